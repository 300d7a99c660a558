"""The scripted teachers of the context-management paradigms on the five long-context families: accuracy, calls,
peak and mean prompt, and context reduction, per paradigm and family (the teacher table of docs/paradigms.md).

    .venv/bin/python bench/paradigm_teachers.py --num 40 --budget 1024

Prompts are counted in the embedded model's tokens (its chat template applied: what an engine would see); the
context reduction is 1 - peak prompt / the whole record's prompt.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

from sculptor_rl.agent.chat import ChatFormat
from sculptor_rl.agent.loop import LoopConfig, run_rollouts
from sculptor_rl.envs import env_class, make_env_factory, params_of
from sculptor_rl.envs.teacher import ScriptedTeacher
from sculptor_rl.longcontext import FAMILIES
from sculptor_rl.models import prepare_default_model

PARADIGMS = ("acm", "fold", "memact", "resum", "mem1", "memagent")


def table(paradigms, families, num: int, budget: int, seed: int, fmt: ChatFormat) -> list[dict]:
    rows = []
    for name in paradigms:
        for family in families:
            tasks = FAMILIES[family].generate(num, seed)
            takes = {f.name for f in dataclasses.fields(env_class(name).Params)}
            params = {"context_budget": budget} if "context_budget" in takes else {}  # ACM: no budget of its own
            trajs = run_rollouts(tasks, ScriptedTeacher(tasks, environment=name), fmt,
                                 make_env_factory(name, params, tokenizer=fmt.tokenizer), LoopConfig(), progress=False)
            peaks = [max(len(s.prompt_ids) for s in t.steps) for t in trajs]
            means = [statistics.mean(len(s.prompt_ids) for s in t.steps) for t in trajs]
            full = [len(fmt.head_ids(env_class(name)(task, params_of(name, params), tokenizer=fmt.tokenizer)
                                     .original(), None))
                    for task in tasks]
            rows.append({
                "paradigm": name, "family": family, "tasks": num,
                "accuracy": statistics.mean(t.score >= 1.0 for t in trajs),
                "calls": statistics.mean(sum(len(s.calls) for s in t.steps) for t in trajs),
                "turns": statistics.mean(len(t.steps) for t in trajs),
                "peak": statistics.mean(peaks), "max_peak": max(peaks), "mean_prompt": statistics.mean(means),
                "full": statistics.mean(full),
                "reduction": statistics.mean(1 - p / f for p, f in zip(peaks, full)),
            })
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num", type=int, default=40)
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--paradigms", nargs="*", default=list(PARADIGMS))
    ap.add_argument("--families", nargs="*", default=list(FAMILIES))
    args = ap.parse_args()
    fmt = ChatFormat.from_pretrained(str(prepare_default_model()))
    print("| paradigm | family | accuracy | calls | turns | peak prompt (max) | mean prompt | whole record | "
          "reduction |\n|---|---|---|---|---|---|---|---|---|")
    for r in table(args.paradigms, args.families, args.num, args.budget, args.seed, fmt):
        print(f"| {r['paradigm']} | {r['family']} | {100 * r['accuracy']:.1f} % | {r['calls']:.1f} | {r['turns']:.1f} "
              f"| {r['peak']:.0f} ({r['max_peak']}) | {r['mean_prompt']:.0f} | {r['full']:.0f} | "
              f"{100 * r['reduction']:.0f} % |", flush=True)


if __name__ == "__main__":
    main()
