"""ToolMem on a model: induce the memory from training experiences, then GENERIC / FEW-SHOT / TOOLMEM on held-out
score prediction, pair selection and choosing a context strategy, beside the paper's reported gains (Tables 1-4).

    .venv/bin/python bench/toolmem_eval.py [--model CKPT] [--train-tasks 8] [--num 48] [--out runs/toolmem-eval]
        [--induction model|rules]                                        # the paper's LLM induction, or the rules
        [--induction-base-url http://HOST/v1 --induction-model NAME]   # induce the memory on another model
        [--teacher-only]                                                 # no engine: the scripted teacher's rows only
        [--eval-run OUT/runs/MODEL/MODE ... --tasks FILE [--test-fraction 0.5] [--split-seed 0]]  # tools: models

1. Training experiences: `--train-tasks` generated tasks x the 4 context strategies (train split, exact scores);
   or, with `--eval-run` (repeated: one saved `sculptor-rl eval` run each) and `--tasks` (the task records it ran
   on, the eval's data file), the tools are the runs' models in their modes ("sft_final/acm"), each task's
   experience scored as the run scored it (`sculptor_rl.envs.toolmem.eval_runs`), split by task into train and test
   (`--test-fraction` of the tasks in test, drawn by `--split-seed`); `--train-tasks` is not used then.
2. The memory: `--induction model` (default, the paper's: top-6 entries per category, refinement prompt,
   M <- (M \\ M_ctx) ∪ M_upd) run on the model itself through one vLLM engine (greedy), or with
   --induction-base-url on any OpenAI-compatible endpoint (the paper induces with the model it evaluates; a small
   model writes no usable entries); `--induction rules`: the same update path with the deterministic rules
   (`sculptor_rl.envs.toolmem.memory`), the offline substitute, which needs no model. `OUT/memory/induction.json` says
   how it was induced and how many answers were malformed, retried and given up on.
3. `sculptor-rl eval --environment toolmem` (configs/toolmem/eval_cpu.yaml) on the same engine: `--num` predict
   records in all (predict, select, choose) of the test split, in the three modes; and the scripted teacher in the
   same three modes, reading the same memory, as a reference for what the memory itself carries (on an empty memory
   the teacher's TOOLMEM row is its GENERIC row: no memory line, so 3 and the first tool). A choose record is a
   two-turn episode: the model names a strategy, then answers the task through that strategy's view of its context.
   With `--eval-run`, the test split's experiences give the records, half predict and half select (no choose: a model
   tool has no view of the task for the agent to answer through), written to OUT/tasks.jsonl; A of a pair is the
   tool with the higher mean score on the training experiences.
`--teacher-only` starts no engine and runs no model row (induce with --induction rules or on an endpoint).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sculptor_rl.envs.toolmem.memory import INDUCTIONS

PAPER = "paper (GPT-4o-mini): MAE -14.8 % (text) / -28.7 % (image) vs GENERIC; selection accuracy +21 / +24 points"


def _fmt(value, ci=None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def table(results: dict, label: str) -> list[str]:
    rows = [f"| {label} mode | MAE [95 % CI] | RMSE [95 % CI] | Pearson [95 % CI] | parsed | sel. acc. (direct) "
            "[95 % CI] | F1< | F1> | sel. acc. (from 2 predictions) | choice from predictions [95 % CI] (best) |",
            "|" + "---|" * 10]
    for run in results["runs"]:
        own = run.get("toolmem", {})
        p, s, sp = own.get("prediction", {}), own.get("selection", {}), own.get("selection_from_predictions", {})
        cp = own.get("choice_from_predictions", {})
        rows.append(f"| {run['mode']} | {_fmt(p.get('mae'), p.get('mae_ci'))} "
                    f"| {_fmt(p.get('rmse'), p.get('rmse_ci'))} "
                    f"| {_fmt(p.get('pearson'), p.get('pearson_ci'))} | {p.get('parsed')}/{p.get('n')} "
                    f"| {_fmt(s.get('accuracy'), s.get('accuracy_ci'))} | {_fmt(s.get('f1_lt'))} "
                    f"| {_fmt(s.get('f1_gt'))} "
                    f"| {_fmt(sp.get('accuracy'), sp.get('accuracy_ci'))} "
                    f"| {_fmt(cp.get('chosen'), cp.get('chosen_ci'))} ({_fmt(cp.get('oracle'))}) |")
    if not any("choice" in run.get("toolmem", {}) for run in results["runs"]):
        return rows
    rows += ["", f"| {label} mode | its answers through the chosen strategy [95 % CI] | the strategy's own answers "
             "[95 % CI] | best per task | each strategy always |", "|---|---|---|---|---|"]
    for run in results["runs"]:
        c = run.get("toolmem", {}).get("choice")
        if c:
            fixed = ", ".join(f"{t} {v:.2f}" for t, v in c["fixed"].items())
            rows.append(f"| {run['mode']} | {_fmt(c.get('solved'), c.get('solved_ci'))} "
                        f"| {_fmt(c['chosen'], c['chosen_ci'])} | {c['oracle']:.3f} | {fixed} |")
    return rows


def paired(out: Path, label: str) -> list[str]:
    """TOOLMEM against GENERIC and FEW-SHOT on the same predict records (the paper's comparison), paired by record:
    the mean change of the absolute error (-reward: an answer without a score counts as 4) with the paired
    bootstrap's 95 % interval and p-value (the bench evaluates one model under `out`)."""
    from sculptor_rl.stats import paired_bootstrap
    from sculptor_rl.trajectory import read_trajectories

    rows = []
    for model in sorted(p for p in (out / "runs").iterdir() if p.is_dir()):
        errors = {mode: {t.task_id: -t.reward for t in read_trajectories(model / mode / "trajectories.jsonl")
                         if t.info.get("kind") == "predict"} for mode in ("generic", "few-shot", "toolmem")}
        for base in ("generic", "few-shot"):
            ids = sorted(errors[base].keys() & errors["toolmem"].keys())
            d = paired_bootstrap([errors[base][i] for i in ids], [errors["toolmem"][i] for i in ids])
            if d["n"]:
                rows.append(f"{label}: TOOLMEM - {base.upper()} absolute error, paired on {d['n']} "
                            f"predict records: {d['diff']:+.3f} [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}], p = "
                            f"{d['p']:.3g}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--train-tasks", type=int, default=8)
    ap.add_argument("--num", type=int, default=48,
                    help="records in all (a third of each kind: predict, select, choose; with --eval-run, half "
                         "predict, half select)")
    ap.add_argument("--induction", choices=INDUCTIONS, default="model",
                    help="model: the paper's LLM induction (this model, or the endpoint below); rules: the "
                         "deterministic offline substitute")
    ap.add_argument("--induction-tokens", type=int, default=160)
    ap.add_argument("--retries", type=int, default=2, help="re-asks of a malformed induction answer (sampled)")
    ap.add_argument("--out", default="runs/toolmem-eval")
    ap.add_argument("--induction-base-url", default=None,
                    help="an OpenAI-compatible endpoint that induces the memory")
    ap.add_argument("--induction-model", default=None, help="the endpoint's model name")
    ap.add_argument("--api-key", default="EMPTY", help="the endpoint's API key")
    ap.add_argument("--teacher-only", action="store_true",
                    help="start no engine: only the scripted teacher's rows")
    ap.add_argument("--eval-run", action="append", default=[], metavar="DIR",
                    help="a saved eval run, OUT/runs/<model>/<mode> (repeat it): its model in that mode is a tool")
    ap.add_argument("--tasks", default=None, metavar="FILE", help="the task records the --eval-run runs ran on")
    ap.add_argument("--test-fraction", type=float, default=0.5, help="of the --eval-run tasks, in the test split")
    ap.add_argument("--split-seed", type=int, default=0, help="draws the --eval-run test tasks")
    args = ap.parse_args()
    if bool(args.eval_run) != bool(args.tasks):
        ap.error("--eval-run and --tasks go together")
    if bool(args.induction_base_url) != bool(args.induction_model):
        ap.error("--induction-base-url and --induction-model go together")
    if args.induction_base_url and args.induction != "model":
        ap.error("--induction-base-url runs the model induction (--induction model)")
    if args.teacher_only and args.induction == "model" and not args.induction_base_url:
        ap.error("--teacher-only starts no engine: induce with --induction rules or on --induction-base-url")

    from sculptor_rl.agent.chat import ChatFormat
    from sculptor_rl.engines import SamplingConfig
    from sculptor_rl.envs.teacher import ScriptedTeacher
    from sculptor_rl.envs.llm import endpoint_llm, policy_llm
    from sculptor_rl.envs.toolmem.env import build_memory
    from sculptor_rl.eval.run import EvalConfig, eval_tasks, evaluate
    from sculptor_rl.jsonl import write_jsonl
    from sculptor_rl.models import resolve_model
    from sculptor_rl.envs.toolmem.experiences import generate_experiences

    out, path = Path(args.out), resolve_model(args.model)
    data, records = None, []
    if args.eval_run:
        from sculptor_rl.envs.toolmem.eval_runs import eval_run_experiences, split_by_task
        from sculptor_rl.envs.toolmem.family import capability_order, from_experiences

        train, test = split_by_task(eval_run_experiences(args.eval_run, args.tasks), args.test_fraction,
                                    args.split_seed)
        order = capability_order(train)
        for kind, num in (("predict", args.num - args.num // 2), ("select", args.num // 2)):
            found = from_experiences(test, kind, order, num, "evalruns")
            print(f"{kind}: {len(found)} records (asked {num})")
            records += found
        data = str(out / "tasks.jsonl")
        write_jsonl(records, data)
        source = (f"{len({e['task_id'] for e in train})} tasks of {', '.join(order)} (most capable first); "
                  f"test: {len({e['task_id'] for e in test})} tasks")
    else:
        train = generate_experiences(args.train_tasks, 0, "train")
        source = f"{args.train_tasks} tasks"
    fmt = ChatFormat.from_pretrained(path)
    engine = None
    if not args.teacher_only:
        from sculptor_rl.engines.vllm_engine import VLLMEngine

        # eager: no compilation warm-up (a minute on 2 cores) for the short answers generated here
        engine = VLLMEngine(path, fmt.stop_ids, SamplingConfig(temperature=0.0, seed=0), max_model_len=8192,
                            enforce_eager=True)
    # room for a choose record's second answer, the task's own (an mrcr reply runs to ~200 tokens)
    cfg = EvalConfig.from_yaml("configs/toolmem/eval_cpu.yaml", models=[args.model],
                               num=len(records) if data else args.num, data=data,
                               max_new_tokens=256, environment_params={"memory": str(out / "memory")},
                               out=str(out / "model"))
    try:
        inducer = policy_llm(engine, fmt) if not args.induction_base_url else endpoint_llm(
            args.induction_base_url, args.induction_model, args.api_key)
        induction = build_memory(train, out / "memory", inducer, retries=args.retries,
                                 max_new_tokens=args.induction_tokens, induction=args.induction)
        print(json.dumps({k: v for k, v in induction.items() if k != "failed"}, indent=1))
        for failed in induction["failed"][:3]:
            print("given up on", failed["id"], "- last answer:", repr(failed["answer"][:300]))
        print((out / "memory" / "toolmem.jsonl").read_text()[:3000])
        model = evaluate(cfg, engine=engine) if engine is not None else None
    finally:
        if engine is not None:
            engine.close()
    cfg.out = str(out / "teacher")
    teacher = evaluate(cfg, engine=ScriptedTeacher(eval_tasks(cfg)))
    lines = [f"{len(train)} training experiences ({source}); {args.induction} induction: "
             f"{induction['entries']} entries, {induction['updates']} updates, {induction['retries']} retries, "
             f"{len(induction['failed'])} given up",
             *([*table(model, "model"), ""] if model else []), *table(teacher, "scripted teacher"), "",
             *(paired(out / "model", "model") if model else []), *paired(out / "teacher", "scripted teacher"), "",
             PAPER]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
