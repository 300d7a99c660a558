"""Two processes under `accelerate launch` with DeepSpeed ZeRO-2 on CPU (gloo) complete RL steps.

vLLM in two ranks is too heavy for a 2-core machine, so each rank runs the real agent loop on the `hf` engine
(the policy's own `generate`, seeded per rank). This file is also the per-rank script: it trains through
`build_trainer` and writes what the rank saw (its rollouts' task ids, a digest of its final weights) so the
test checks the sharding itself. Without a GPU, accelerate reports one process per rank under DeepSpeed
(every rank would train on the same rows) unless `ddp_backend: gloo` is set, as here.
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def digest(model) -> str:
    h = hashlib.sha256()
    for _, p in sorted(model.named_parameters()):
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


@pytest.mark.slow
def test_two_ranks_zero2_complete_rl_steps(model_path, tmp_path):
    from sculptor_rl.tasks import generate
    from sculptor_rl.tasks import write_jsonl

    write_jsonl(generate("pi_llm", 8, seed=3, keys=1, updates=1), tmp_path / "tasks.jsonl")
    out = tmp_path / "rl"
    args = ["--model", model_path, "--tasks", str(tmp_path / "tasks.jsonl"), "--output_dir", str(out),
            "--engine", "hf", "--max_steps", "2", "--num_generations", "4", "--per_device_train_batch_size", "1",
            "--gradient_accumulation_steps", "4", "--ddp_backend", "gloo", "--max_completion_length", "16",
            "--max_tool_calls", "1",
            "--max_context_tokens", "2048", "--learning_rate", "1e-4", "--lr_scheduler_type", "constant",
            "--bf16", "false", "--report_to", "none", "--save_strategy", "no", "--save_rollouts", "true",
            "--seed", "5"]  # DeepSpeed comes from the accelerate config (configs/deepspeed/zero2.json)
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
         str(ROOT / "configs/accelerate/zero2.yaml"), "--num_processes", "2", "--main_process_port", "29533",
         __file__, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["world"] for r in ranks] == [2, 2] and all(r["global_step"] == 2 for r in ranks)
    # each rank ran its own share of the tasks (1 of the 2 groups per round), in both rounds
    for step in (1, 2):
        seen = [{json.loads(line)["task_id"] for line in (out / "rollouts" / f"step-{step:06d}.rank{r}.jsonl").open()}
                for r in range(2)]
        assert all(len(s) == 1 for s in seen) and not seen[0] & seen[1]
    # DeepSpeed averaged the gradients: both ranks end with the same weights, and they moved
    assert ranks[0]["after"] == ranks[1]["after"] != ranks[0]["before"]
    assert any(r["grad_norm"] > 0 for r in ranks)


if __name__ == "__main__":  # one rank of the test above, under accelerate launch
    import torch.distributed as dist
    from trl import TrlParser

    from sculptor_rl.train.rl import SculptorGRPOConfig, build_trainer

    from test_rl_vllm import mentions_key  # this file's folder is on sys.path when run as a script

    (cfg,) = TrlParser((SculptorGRPOConfig,)).parse_args_and_config(sys.argv[1:])
    trainer = build_trainer(cfg, reward_funcs=[mentions_key])
    before = digest(trainer.model)
    trainer.train()
    grad_norms = [e["grad_norm"] for e in trainer.state.log_history if "grad_norm" in e]
    Path(cfg.output_dir, f"rank{dist.get_rank()}.json").write_text(json.dumps({
        "world": dist.get_world_size(), "global_step": trainer.state.global_step, "before": before,
        "after": digest(trainer.model), "grad_norm": max(grad_norms)}))
