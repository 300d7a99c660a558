"""MemToolAgent's ablation table on one model (paper §4.3): the memory is built by the model itself, in rounds, on
the train split (its failures reflected on by the same engine, Figure 6), then `eval` of
configs/memtoolagent/eval_cpu.yaml runs the held-out test split with no memory, fixed top-k and Dynamic "n", with
and without reflections. With --teacher-memory, topk and dynamic also run over a memory of correct executions
(the scripted teacher's: one entry per train task, like the paper's one query per template). One vLLM engine
serves it all. Prints outcome accuracy per domain, tool/parameter F1 and full-sequence match with 95 % intervals
beside the paper's reported numbers, and writes them to OUT/table.md. The same command run again resumes: the
policy's memory is kept once built, and finished modes are skipped.

    python bench/memtoolagent_eval.py --out runs/memtoolagent-eval/base [--model DIR] [--num 19] [--teacher-memory]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from sculptor_rl.agent.chat import ChatFormat
from sculptor_rl.agent.loop import LoopConfig
from sculptor_rl.crossepisode import DriverConfig, run_rounds
from sculptor_rl.envs.llm import policy_llm
from sculptor_rl.engines import SamplingConfig, make_engine
from sculptor_rl.envs.teacher import ScriptedTeacher
from sculptor_rl.eval.run import EvalConfig, evaluate
from sculptor_rl.models import resolve_model
from sculptor_rl.stats import mcnemar_exact
from sculptor_rl.envs.tasks import generate
from sculptor_rl.trajectory import read_trajectories

PAPER = ("Paper (Claude 3.7 Sonnet, embeddings): WorkBench outcome accuracy 57 % without memory -> 85 % with "
         "MemToolAgent; NESTFUL full-sequence match 15.6 % -> 30.4 % (win rate 51 % -> 70 %).")


def _cell(rate: dict) -> str:
    if rate.get("rate") is None and rate.get("mean") is None:
        return "-"
    value = rate["rate"] if "rate" in rate else rate["mean"]
    lo, hi = rate["ci"] or (value, value)
    return f"{100 * value:.0f} [{100 * lo:.0f}, {100 * hi:.0f}]"


def table(rows: dict[str, dict]) -> str:
    """Per mode: WorkBench outcome accuracy (overall, per domain), its tool/parameter F1 and full-sequence match;
    NESTFUL's win rate and full-sequence match; entries retrieved. Percentages with 95 % intervals."""
    domains = sorted({d for s in rows.values() for d in s.get("workbench", {}).get("outcome_by_domain", {})})
    short = {"customer_relationship_manager": "crm", "project_management": "pm", "multi_domain": "multi"}
    head = ["mode", "retrieved", "WorkBench outcome", *(short.get(d, d) for d in domains), "tool F1", "param F1",
            "full seq.", "NESTFUL win", "NESTFUL full seq."]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, s in rows.items():
        wb, ne = s.get("workbench", {}), s.get("nestful", {})
        cells = [name, f"{s['retrieved_mean']:.1f}", _cell(wb.get("outcome", {})),
                 *(_cell(wb.get("outcome_by_domain", {}).get(d, {})) for d in domains),
                 *(_cell(wb.get(k, {})) for k in ("tool_f1", "param_f1", "full_sequence_match")),
                 _cell(ne.get("outcome", {})), _cell(ne.get("full_sequence_match", {}))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired(runs: dict[str, Path]) -> str:
    """Each memory mode against no_memory on the same test tasks: the outcome gain in points per family and the
    exact McNemar p-value (`sculptor_rl.stats`)."""
    def outcomes(directory: Path) -> dict[str, tuple[str, bool]]:
        return {t.task_id: (t.info["family"], bool(t.info["outcome"]))
                for t in read_trajectories(directory / "trajectories.jsonl")}

    base = outcomes(runs["no_memory"])
    families = sorted({f for f, _ in base.values()}, key=lambda f: f != "workbench")  # the paper's headline first
    head = ["mode vs no_memory", *(f"{f} gain [points], McNemar p" for f in families)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, directory in runs.items():
        if name == "no_memory":
            continue
        other, cells = outcomes(directory), []
        for f in families:
            ids = sorted(i for i, (fam, _) in base.items() if fam == f and i in other)
            a, b = [base[i][1] for i in ids], [other[i][1] for i in ids]
            test = mcnemar_exact(a, b)
            cells.append(f"{100 * (sum(b) - sum(a)) / len(ids):+.0f} (+{test['only_b']} / -{test['only_a']} of "
                         f"{len(ids)}), p = {test['p']:.3g}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default=None, help="a checkpoint dir (default: the embedded model)")
    ap.add_argument("--num", type=int, default=19, help="test tasks per family (19 = one per workbench template)")
    ap.add_argument("--train", type=int, default=38, help="train tasks that build the memory (per family: workbench "
                    "and half as many nestful)")
    ap.add_argument("--teacher-memory", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    path = resolve_model(args.model)
    fmt = ChatFormat.from_pretrained(path)
    cfg = EvalConfig.from_yaml("configs/memtoolagent/eval_cpu.yaml", out=str(out / "eval"), models=[args.model],
                               num=args.num)
    loop = LoopConfig(max_tool_calls=cfg.max_tool_calls, max_new_tokens=cfg.max_new_tokens,
                      max_context_tokens=cfg.max_context_tokens)
    train = generate("workbench", args.train, 0, split="train") + generate("nestful", args.train // 2, 0,
                                                                         split="train")
    params = {k: v for k, v in cfg.environment_params.items() if k != "memory"}
    engine = make_engine("vllm", path, fmt, SamplingConfig(temperature=0.0, seed=cfg.seed),
                         max_model_len=cfg.max_model_len, enforce_eager=True)  # no minute of warm-up on CPU
    try:
        own, built_file = out / "memory_policy.jsonl", out / "memory_policy.summary.json"
        if built_file.exists():  # a restarted run: keep the memory its finished modes were evaluated with
            built = json.loads(built_file.read_text())
        else:
            own.unlink(missing_ok=True)  # a build killed half-way: the driver would add to its entries
            store, rounds = run_rounds(train, engine, fmt, DriverConfig(
                memory=str(own), out=str(out / "rounds"), rounds=2, loop=loop,
                environment_params={**params, "retrieval": "dynamic"}),
                policy_llm(engine, fmt, max_new_tokens=128))
            built = {"entries": len(store), "right": sum(e["feedback"] for e in store.entries),
                     "per_round": [sum(t.score == 1.0 for t in r) / len(r) for r in rounds]}
            built_file.write_text(json.dumps(built) + "\n")
        print("memory built by the policy:", json.dumps(built))
        evaluate(dataclasses.replace(cfg, environment_params={**params, "memory": str(own)}), engine=engine)
        if args.teacher_memory:
            teacher = out / "memory_teacher.jsonl"
            teacher.unlink(missing_ok=True)  # rebuilt whole (no model: a second), never added to
            run_rounds(train, ScriptedTeacher(train), fmt, DriverConfig(memory=str(teacher), out=str(
                out / "rounds_teacher"), rounds=1, loop=loop, environment_params=params))
            evaluate(dataclasses.replace(cfg, out=str(out / "eval_teacher"), modes=["topk", "dynamic"],
                                         environment_params={**params, "memory": str(teacher)}), engine=engine)
    finally:
        engine.close()
    rows, runs = {}, {}
    for name, sub in (("policy memory", "eval"), ("teacher memory", "eval_teacher")):
        for summary in sorted((out / sub).glob("runs/*/*/summary.json")):
            mode = summary.parent.name
            label = f"{mode} ({name})" if mode != "no_memory" else mode
            rows[label] = json.loads(summary.read_text())["memtoolagent"]
            runs[label] = summary.parent
    text = "\n\n".join([table(rows), paired(runs), f"Memory built by the policy: {json.dumps(built)}", PAPER])
    (out / "table.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
