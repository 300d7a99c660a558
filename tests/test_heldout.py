"""Held-out evaluation during RL (`train.heldout`): TRL's eval_strategy/eval_steps run our held-out rollouts in the
modes asked, logged beside the training metrics at those steps; the numbers are the held-out tasks' own metrics
under the step's weights; the run page draws them. A tiny random model with the embedded tokenizer, HF engine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from sculptor_rl.agent.loop import LoopConfig, run_rollouts
from sculptor_rl.engines import SamplingConfig
from sculptor_rl.envs import make_env_factory
from sculptor_rl.envs.tasks import generate
from sculptor_rl.jsonl import write_jsonl
from sculptor_rl.metrics import summarize
from sculptor_rl.train.heldout import HeldOutEval
from sculptor_rl.train.rl import SculptorGRPOConfig, build_trainer, train
from sculptor_rl.view import collect


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, model_path) -> str:
    """A tiny random Llama with the embedded model's tokenizer and chat template."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("tiny")
    tok = AutoTokenizer.from_pretrained(model_path)
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                                 tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                                 eos_token_id=tok.eos_token_id)).save_pretrained(path)
    tok.save_pretrained(path)
    for name in ("chat_template.jinja", "generation_config.json"):
        if (Path(model_path) / name).exists():
            shutil.copy(Path(model_path) / name, path)
    return str(path)


def config(tmp_path, tiny, **kw) -> SculptorGRPOConfig:
    tasks = generate("pi_llm", 4, seed=1, keys=2, updates=8)
    write_jsonl(tasks, tmp_path / "tasks.jsonl")
    write_jsonl(generate("pi_llm", 3, seed=2, keys=2, updates=8), tmp_path / "heldout.jsonl")
    return SculptorGRPOConfig(
        output_dir=str(tmp_path / "rl"), model=tiny, tasks=str(tmp_path / "tasks.jsonl"), engine="hf",
        num_generations=2, per_device_train_batch_size=2, gradient_accumulation_steps=1, max_steps=2,
        max_new_tokens=16, max_tool_calls=2, max_context_tokens=2048, learning_rate=1e-2, bf16=False,
        use_cpu=True, report_to="none", logging_steps=1, save_strategy="steps", save_steps=2,
        heldout_tasks=str(tmp_path / "heldout.jsonl"), heldout_modes=["acm", "full"], **kw)


def test_trl_eval_schedule_runs_heldout_rollouts_logged_and_drawn(tmp_path, tiny):
    cfg = config(tmp_path, tiny, eval_strategy="steps", eval_steps=1)
    assert (cfg.heldout_steps, str(cfg.eval_strategy)) == (1, "IntervalStrategy.NO")  # ours runs TRL's schedule
    train(cfg)
    history = json.loads((tmp_path / "rl" / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    logged = [e for e in history if "eval/acm/accuracy" in e]
    assert [e["step"] for e in logged] == [1, 2]  # every eval_steps = 1 step, beside the training metrics
    for e in logged:
        assert "reward" in e and "eval/full/accuracy" in e and "eval/full/context_reduction" in e
        assert e["eval/full/context_reduction"] == 0.0 and e["eval/full/tool_calls_per_task"] == 0.0
    curves = collect(tmp_path / "rl")["curves"]
    drawn = {m["key"]: m for c in curves for m in c["metrics"]}
    assert [p[0] for p in drawn["eval/acm/accuracy"]["points"]] == [1, 2]
    assert drawn["eval/acm/reward"]["definition"].startswith("held-out evaluation during training")


def test_heldout_metrics_are_the_heldout_tasks_own(tmp_path, tiny, fmt):
    """The callback's numbers equal a plain greedy run of the same weights on the held-out tasks."""
    cfg = config(tmp_path, tiny, heldout_steps=1)
    trainer = build_trainer(cfg)
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, HeldOutEval))
    got = callback.evaluate()
    heldout = [json.loads(line) for line in (tmp_path / "heldout.jsonl").read_text().splitlines()]
    engine = trainer.engine  # the policy's own (HF: the model itself), greedy as the callback runs it
    engine.sampling = SamplingConfig(temperature=0.0, seed=cfg.seed)
    for mode in ("acm", "full"):
        make_env = make_env_factory(mode, {}, seed=cfg.seed)
        trajs = run_rollouts(heldout, engine, fmt, make_env, LoopConfig.of(cfg), progress=False)
        s = summarize(trajs)
        assert got[f"eval/{mode}/accuracy"] == s["accuracy"]
        assert got[f"eval/{mode}/tool_calls_per_task"] == s["tool_calls_per_task"]
        assert got[f"eval/{mode}/reward"] == pytest.approx(s["reward"])
    assert trainer._metrics["train"]["eval/acm/accuracy"] == [got["eval/acm/accuracy"]]
    with pytest.raises(ValueError, match="heldout_modes"):
        HeldOutEval(trainer, heldout, ["nope"], 1)


def test_an_eval_schedule_without_heldout_tasks_is_refused(tmp_path, tiny):
    from sculptor_rl.train.rl_config import check_config

    cfg = config(tmp_path, tiny, heldout_steps=1)
    assert not [e for e in check_config(cfg) if "eval_strategy" in e or "heldout" in e]
    cfg.heldout_steps = 0
    with pytest.raises(ValueError, match="heldout_tasks needs heldout_steps >= 1"):
        check_config(cfg)
    trl_only = SculptorGRPOConfig(output_dir=str(tmp_path), model=tiny, tasks=str(tmp_path / "tasks.jsonl"),
                                  eval_strategy="steps", eval_steps=2, use_cpu=True, report_to="none")
    with pytest.raises(ValueError, match="eval_strategy: 'steps' with heldout_tasks"):
        check_config(trl_only)


def test_the_pipelines_rl_stage_evaluates_its_heldout_tasks_when_asked(tmp_path, tiny):
    from sculptor_rl.pipeline import PipelineConfig, _rl_config

    data = tmp_path / "data"
    data.mkdir()
    for name in ("rl", "eval"):
        write_jsonl(generate("pi_llm", 2, seed=3, keys=2, updates=8), data / f"{name}.jsonl")
    plain = _rl_config(PipelineConfig(rl={"max_steps": 1}), tiny, data / "rl.jsonl", tmp_path / "rl")
    assert plain.heldout_tasks is None
    asked = _rl_config(PipelineConfig(rl={"max_steps": 1, "heldout_steps": 2}), tiny, data / "rl.jsonl",
                       tmp_path / "rl")
    assert (asked.heldout_tasks, asked.heldout_steps) == (str(data / "eval.jsonl"), 2)
