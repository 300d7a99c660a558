"""The scripted teachers of the context-management paradigms through `sculptor-rl eval` at several context budgets,
then `eval --compare` over those outputs: the example chart and table of docs/paradigms.md. A teacher is not a
trained policy: this shows what the comparison looks like and what each paradigm's own rule does to the prompt.

    .venv/bin/python bench/paradigm_compare.py --num 4 --budgets 512 1024 2048 --out runs/paradigm-compare

Each paradigm is evaluated on its own (`--environment P --modes P`: its teacher reads its own prompts), one output
per budget and paradigm under OUT/b<budget>/<paradigm>; the comparison is written to OUT/compare.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sculptor_rl.envs.teacher import ScriptedTeacher
from sculptor_rl.eval.compare import write_comparison
from sculptor_rl.eval.run import EvalConfig, eval_tasks, evaluate
from sculptor_rl.longcontext import FAMILIES

PARADIGMS = ("acm", "fold", "memact", "resum", "mem1", "memagent")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num", type=int, default=4, help="tasks per family")
    ap.add_argument("--budgets", type=int, nargs="+", default=[512, 1024, 2048])
    ap.add_argument("--paradigms", nargs="+", default=list(PARADIGMS))
    ap.add_argument("--families", nargs="+", default=list(FAMILIES))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default="runs/paradigm-compare")
    args = ap.parse_args()
    out, dirs, start = Path(args.out), [], time.perf_counter()
    for budget in args.budgets:
        for name in args.paradigms:
            cfg = EvalConfig(environment=name, modes=[name], tasks=args.families, num=args.num, seed=args.seed,
                             context_budget=budget, out=str(out / f"b{budget}" / name))
            evaluate(cfg, engine=ScriptedTeacher(eval_tasks(cfg), environment=name))
            dirs.append(cfg.out)
    write_comparison(dirs, out / "compare")
    print(f"wrote {out / 'compare'} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
