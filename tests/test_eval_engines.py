"""`eval` end to end on the embedded model: two checkpoints side by side on the HF engine (each started,
evaluated and shut down in turn), and all four modes on the session's vLLM engine.

The HF test comes first: it runs in ~20 s before the session's vLLM engine exists, ~250 s beside it (on 2
cores the idle engine's processes still take CPU)."""

import logging

import pytest

from sculptor_rl.eval.run import EvalConfig, evaluate
from sculptor_rl.trajectory import read_trajectories


def trajectories(out, model, mode):
    return list(read_trajectories(out / "runs" / model / mode / "trajectories.jsonl"))


@pytest.mark.slow
def test_two_checkpoints_side_by_side_on_hf(model_path, tmp_path):
    other = tmp_path / "ckpt-b"
    other.symlink_to(model_path)  # the same weights under another name: greedy results must agree
    cfg = EvalConfig(models=[model_path, str(other)], tasks=["babilong"], modes=["full", "bm25"], num=2,
                     engine="hf", out=str(tmp_path / "out"), context_budget=60, chunk_tokens=30,
                     sizes={"babilong": [{"facts": 2, "context_tokens": 200}]}, max_new_tokens=16)
    results = evaluate(cfg)
    assert results["models"] == ["smollm2-135m-instruct", "ckpt-b"]
    assert [(r["model"], r["mode"]) for r in results["runs"]] == [
        ("smollm2-135m-instruct", "full"), ("smollm2-135m-instruct", "bm25"), ("ckpt-b", "full"), ("ckpt-b", "bm25")]
    a, b = results["runs"][:2], results["runs"][2:]
    for x, y in zip(a, b):
        assert x["tasks"]["babilong"]["accuracy"] == y["tasks"]["babilong"]["accuracy"]
        assert x["tasks"]["babilong"]["generated_tokens"] == y["tasks"]["babilong"]["generated_tokens"]
    md = (tmp_path / "out" / "results.md").read_text()
    assert "| ckpt-b | bm25 |" in md and "| smollm2-135m-instruct | full |" in md


@pytest.mark.slow
def test_eval_all_modes_on_vllm(vllm_engine, fmt, tmp_path, caplog):
    out = tmp_path / "out"
    cfg = EvalConfig(tasks=["needlebench", "babilong"], num=2, out=str(out), context_budget=80, chunk_tokens=40,
                     sizes={"needlebench": [{"needles": 2, "context_tokens": 400}],
                            "babilong": [{"facts": 2, "context_tokens": 150}, {"facts": 2, "context_tokens": 400}]},
                     max_new_tokens=48, max_tool_calls=3)
    results = evaluate(cfg, engine=vllm_engine)

    runs = {run["mode"]: run for run in results["runs"]}
    assert list(runs) == ["acm", "full", "truncate", "bm25"]
    for mode, run in runs.items():
        assert {t: s["n"] for t, s in run["tasks"].items()} == {"needlebench": 2, "babilong": 2}
        assert 0 <= run["average"] <= 1 and run["wall_time"] > 0
        trajs = trajectories(out, "smollm2-135m-instruct", mode)
        first_prompts = [fmt.tokenizer.decode(t.steps[0].prompt_ids) for t in trajs]
        assert all(("<tools>" in p) == (mode == "acm") for p in first_prompts)
        assert all(p.rstrip().endswith("`Answer: NAME`.<|im_end|>\n<|im_start|>assistant") or
                   p.rstrip().endswith("`Answer: PLACE`.<|im_end|>\n<|im_start|>assistant") for p in first_prompts)
        assert all(len(s.completion_ids) <= 48 for t in trajs for s in t.steps)
        if mode != "acm":
            assert all(len(t.steps) == 1 for t in trajs)  # no tools: the first completion is the answer
    before = {mode: [t.context_tokens_before for t in trajectories(out, "smollm2-135m-instruct", mode)]
              for mode in ("full", "truncate", "bm25")}
    assert before["full"] == before["truncate"] == before["bm25"]  # reductions are against the same context
    full, truncate, bm25 = (runs[m]["tasks"]["needlebench"] for m in ("full", "truncate", "bm25"))
    assert full["context_tokens_after"] == full["context_tokens_before"]
    assert truncate["context_tokens_after"] < full["context_tokens_after"] - 200
    assert bm25["context_tokens_after"] < full["context_tokens_after"] - 200
    assert len((out / "results.md").read_text().split("## Accuracy (%)")[1].split("\n\n")[1].splitlines()) == 6
    assert (out / "accuracy_vs_length.png").stat().st_size > 10_000 and (out / "tool_usage.png").exists()

    with caplog.at_level(logging.INFO, logger="sculptor_rl.eval.run"):
        again = evaluate(cfg, engine=vllm_engine)
    assert caplog.text.count("skipping") == 4 and again["runs"][0]["average"] == runs["acm"]["average"]
