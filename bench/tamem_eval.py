"""TA-Mem's eval table on one model: `eval` of configs/tamem/eval_cpu.yaml (tamem over the oracle notes, full, bm25,
acm) and, with --llm-notes, the same model as the LLM extractor (`envs.tamem.extract_notes`) and the tamem mode
over its notes; one vLLM engine serves it all. Prints Table I's layout (per category F1 / BLEU-1, tokens and turns
per question) beside the paper's TA-Mem and Mem0 rows, and the tool shares per category, and writes both to
OUT/table.md.

    python bench/tamem_eval.py --out runs/tamem-eval/base [--model DIR] [--modes tamem,full] [--llm-notes]
        [--extractor-base-url http://HOST/v1 --extractor-model NAME]   # LLM notes from another model
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from sculptor_rl.agent.chat import ChatFormat
from sculptor_rl.engines import SamplingConfig, make_engine
from sculptor_rl.envs.llm import endpoint_llm, policy_llm
from sculptor_rl.envs.tamem.env import extract_notes
from sculptor_rl.eval.run import EvalConfig, evaluate, eval_tasks, model_labels
from sculptor_rl.models import resolve_model
from sculptor_rl.envs.tamem import metrics
from sculptor_rl.trajectory import read_trajectories


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default=None, help="a checkpoint dir (default: the embedded model)")
    ap.add_argument("--modes", default=None, help="comma-separated (default: the config's)")
    ap.add_argument("--llm-notes", action="store_true", help="also extract notes with the model and run tamem on them")
    ap.add_argument("--extractor-base-url", default=None, help="extract the LLM notes on this OpenAI-compatible "
                    "endpoint instead (the paper extracts with GPT-4o-mini); implies --llm-notes")
    ap.add_argument("--extractor-model", default=None, help="the endpoint's model name")
    ap.add_argument("--api-key", default="EMPTY", help="the endpoint's API key")
    args = ap.parse_args()
    if bool(args.extractor_base_url) != bool(args.extractor_model):
        ap.error("--extractor-base-url and --extractor-model go together")
    args.llm_notes = args.llm_notes or bool(args.extractor_base_url)
    out = Path(args.out)
    cfg = EvalConfig.from_yaml("configs/tamem/eval_cpu.yaml", out=str(out), models=[args.model],
                               modes=args.modes.split(",") if args.modes else None)
    tasks = eval_tasks(cfg)
    path = resolve_model(args.model)
    fmt = ChatFormat.from_pretrained(path)
    engine = make_engine("vllm", path, fmt, SamplingConfig(temperature=0.0, seed=cfg.seed),
                         max_model_len=cfg.max_model_len)
    try:
        evaluate(cfg, engine=engine)
        if args.llm_notes:
            extractor = policy_llm(engine, fmt) if not args.extractor_base_url else endpoint_llm(
                args.extractor_base_url, args.extractor_model, args.api_key)
            report = extract_notes(tasks, extractor, out / "notes", retries=1, max_new_tokens=1024)
            print("extraction:", json.dumps(report))
            evaluate(dataclasses.replace(cfg, out=str(out / "llm-notes"), modes=["tamem"],
                                         environment_params={"notes": str(out / "notes")}), engine=engine)
    finally:
        engine.close()
    gold = {t["id"]: t["answer"] for t in tasks}
    (label,) = model_labels(cfg.models)
    rows, shares = {}, {}
    for run in sorted(out.glob("**/runs/*/*/trajectories.jsonl")):
        name = f"{label} · {run.parent.name}" + (" (LLM notes)" if "llm-notes" in run.parts else "")
        rows[name] = metrics.summarize(list(read_trajectories(run)), gold)
        shares[name] = {c: s["tool_share"] for c, s in rows[name].items() if s["tool_share"]}
    text = metrics.table(rows) + "\n\nTool shares per category:\n" + json.dumps(shares, indent=1)
    (out / "table.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":  # vLLM's worker processes import this module
    main()
