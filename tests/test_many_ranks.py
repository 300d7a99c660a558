"""On 2 ranks the trainers compute what they compute on 1: `accelerate launch` with 2 CPU processes (gloo) under
DDP, DeepSpeed ZeRO-2, ZeRO-3 and FSDP2 (the shipped accelerate configs, `--num_processes 2`) against one plain
process with the same global batch and seed. The first optimizer step's parameter change (plain SGD, no clipping:
AdamW's first step is lr * sign(g) and would hide a gradient's scale; lr 100, so that the change is far above
fp32's rounding of the weights, ~1e-7 near 1.0) must agree to fp32 tolerance, for SFT and
GSPO, with and without shared prefixes (the ranks' prefix trees differ), LoRA and full, beta > 0, and a rank whose
rollouts made no trainable sample. docs/many-ranks.md holds the table these tests measure.

This file is also the per-rank script: one launch per backend runs every setting one after the other in the same
two processes (a launch's start-up is most of its time), and one plain process runs them all for the reference.
GSPO's rollouts are replayed (`Replayed`: fixed trajectories, Algorithm 1 and everything after it real), so both
runs train on the same samples: rank r of 2 gets group r, the single process both groups.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-4  # max over tensors of |Δ(2 ranks) - Δ(1 rank)| / |Δ(1 rank)| (norms), fp32
COMMON = ["--learning_rate", "100", "--optim", "sgd", "--max_grad_norm", "0", "--lr_scheduler_type", "constant",
          "--bf16", "false", "--report_to", "none", "--max_steps", "1", "--logging_steps", "1", "--seed", "3",
          "--save_strategy", "no", "--gradient_checkpointing", "false"]
# setting -> (trainer, its flags)
SETTINGS = {
    "sft": ("sft", ["--shared_prefix", "false"]),
    "sft-shared-prefix": ("sft", ["--shared_prefix", "true"]),
    "sft-lora": ("sft", ["--shared_prefix", "true", "--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8",
                 "--lora_dropout", "0"]),
    "gspo": ("gspo", ["--shared_prefix", "false"]),
    "gspo-shared-prefix": ("gspo", ["--shared_prefix", "true"]),
    "gspo-per-sample": ("gspo", ["--shared_prefix", "true", "--importance_sampling_level", "sequence",
                                 "--loss_weighting", "per-sample"]),
    "gspo-lora": ("gspo", ["--shared_prefix", "true", "--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8",
                 "--lora_dropout", "0"]),
    "gspo-beta": ("gspo", ["--shared_prefix", "true", "--beta", "0.04"]),
    "gspo-empty-rank": ("gspo", ["--shared_prefix", "true", "--empty_rank", "true"]),
}
BACKENDS = {"ddp": "configs/accelerate/ddp.yaml", "zero2": "configs/accelerate/zero2.yaml",
            "zero3": "configs/accelerate/zero3.yaml", "fsdp2": "configs/accelerate/fsdp2.yaml"}
# DDP on CPU: accelerate sets up DDP (MULTI_CPU) only with use_cpu; without it its state is NO in every rank while
# the gloo group spans both (each rank would train alone: `sft.check_process_group` refuses that)
BACKEND_FLAGS = {"ddp": ["--use_cpu", "true"]}
# the settings each backend's launch runs in the suite (one launch each: start-up is most of its time);
# MANY_RANKS_ALL=1 runs every setting under every backend (docs/many-ranks.md's table)
RUN = {"ddp": ["sft-shared-prefix", "sft-lora", "gspo-shared-prefix", "gspo-lora", "gspo-beta"],
       "zero2": ["sft-shared-prefix", "gspo-shared-prefix", "gspo-lora", "gspo-empty-rank"],
       "zero3": ["sft-lora", "gspo-beta"]}
if os.environ.get("MANY_RANKS_ALL"):
    RUN = {b: [n for n in SETTINGS if n != "gspo-empty-rank" or b == "zero2"] for b in RUN}
PORTS = {"ddp": 29571, "zero2": 29572, "zero3": 29573, "fsdp2": 29574}


# ---- the data: the same on every rank and in the reference ----


def sft_samples(fmt) -> list:
    """4 samples (the whole first step on 1 and on 2 ranks): rows 0-1 and 2-3 share a system turn of their own, so
    the two ranks' prefix trees differ."""
    from sculptor_rl.samples import Sample

    samples = []
    for k in range(4):
        system = f"Rules of set {k // 2}: " + " ".join(f"rule {i} says read twice." for i in range(6 + 4 * (k // 2)))
        head = fmt.head_ids([{"role": "system", "content": system}, {"role": "user", "content": f"Question {k}?"}],
                            None)
        completion = fmt.completion_ids(f"Answer {k}:" + " yes" * (k + 2))
        samples.append(Sample(f"r{k}/0", head + completion, [0] * len(head) + [1] * len(completion), [0], None, 1.0,
                              fmt.provenance))
    return samples


def rollouts(fmt, empty_second_group: bool) -> list:
    """2 groups of 2 rollouts; each rollout 2 completions, the second after a rewritten context in group 0's first
    rollout (2 samples) and appended elsewhere (1 sample); rewards 1 / 0 within a group. The groups' prompts differ
    (their own system turns), so the ranks' prefix trees do. `empty_second_group`: group 1's completions are
    empty, no trainable sample."""
    from sculptor_rl.trajectory import Step, Trajectory

    trajs = []
    for g in range(2):
        system = f"Group {g} rules: " + " ".join(f"fact {i} holds." for i in range(5 + 3 * g))
        head = fmt.head_ids([{"role": "system", "content": system}, {"role": "user", "content": f"Task {g}?"}], None)
        for copy in range(2):
            first = [] if g and empty_second_group else fmt.completion_ids(f"Look {g} {copy}" + " ok" * (copy + 1))
            tool = fmt.head_ids([{"role": "user", "content": f"result {copy}"}], None)[-6:]
            rewritten = g == 0 and copy == 0
            prompt2 = (head[:-2] + tool if rewritten else head + first + tool)
            second = [] if g and empty_second_group else fmt.completion_ids(f"Done {copy}" + " yes" * (g + 1))
            steps = [Step(head, first, [-0.5] * len(first), "a"), Step(prompt2, second, [-0.5] * len(second), "b")]
            trajs.append(Trajectory(f"t{g}", "pi_llm", steps, [], "x", float(copy == 0), "answer", 10, 10,
                                    reward=float(copy == 0), rollout_id=f"t{g}/{copy}"))
    return trajs


# ---- the tests ----


def launch(config: str | None, folder: Path, port: int, names: list[str], timeout: int = 900
           ) -> subprocess.CompletedProcess:
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    if config is None:  # the reference: one plain process
        cmd = [sys.executable, __file__, str(folder), *names]
    else:
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ROOT / config),
               "--num_processes", "2", "--main_process_port", str(port), __file__, str(folder), *names]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def data(fmt, tmp_path_factory) -> Path:
    """The tiny model, the SFT samples and the rollouts, written once."""
    from sculptor_rl.samples import write_samples
    from test_rl_loss import tiny_model_dir

    folder = tmp_path_factory.mktemp("many-ranks")
    tiny_model_dir(len(fmt.tokenizer), folder / "tiny")
    fmt.tokenizer.save_pretrained(folder / "tiny")  # the embedded model's, with its chat template
    write_samples(sft_samples(fmt), folder / "samples.jsonl")
    return folder


@pytest.fixture(scope="module")
def reference(data) -> Path:
    out = data / "one"
    out.mkdir()
    proc = launch(None, out, 0, sorted({n for names in RUN.values() for n in names} | {"gspo-empty-rank"}))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def differences(reference: Path, ranks: Path, names) -> dict[str, float]:
    """Per setting: the largest relative difference over the tensors of the first step's change."""
    out = {}
    for name in names:
        one, two = torch.load(reference / f"{name}.pt"), torch.load(ranks / f"{name}.pt")
        assert one.keys() == two.keys() and one, name
        moved = [n for n, d in one.items() if d.abs().max() > 0]
        assert moved, f"{name}: the step moved no parameter"
        out[name] = max(((two[n] - one[n]).norm() / one[n].norm()).item() for n in moved)
    return out


def two_ranks(backend: str, folder: Path, reference: Path, names: list[str], timeout: int = 900,
              port: int | None = None) -> dict:
    folder.mkdir()
    proc = launch(BACKENDS[backend], folder, port or PORTS[backend], names, timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for r in range(2):  # every rank saw a world of 2
        assert json.loads((folder / f"rank{r}.json").read_text())["world"] == 2
    diffs = differences(reference, folder, names)
    print(backend, json.dumps(diffs))
    return diffs


@pytest.mark.slow
@pytest.mark.parametrize("backend", [b for b in BACKENDS if b in RUN])
def test_two_ranks_take_the_one_rank_step(backend, data, reference):
    diffs = two_ranks(backend, data / backend, reference, RUN[backend])
    assert all(d <= TOLERANCE for d in diffs.values()), diffs


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_rank_without_samples_takes_the_step_with_the_others(data, reference):
    """Rank 1's rollouts make no trainable sample: it trains untrained fillers and enters every collective the
    other rank does (before, it raised while rank 0 waited in the step's reduce: a hang). 120 s for the launch."""
    diffs = two_ranks("ddp", data / "empty", reference, ["gspo-empty-rank"], timeout=120, port=29579)
    assert diffs["gspo-empty-rank"] <= TOLERANCE, diffs


# ---- one rank ----


def full_parameters(trainer) -> dict[str, torch.Tensor]:
    """The unwrapped model's trainable parameters, whole: ZeRO-3 shards gathered, FSDP2's DTensors made full (each a
    collective: every rank calls it)."""
    model = trainer.accelerator.unwrap_model(trainer.model_wrapped if trainer.model_wrapped is not None
                                             else trainer.model)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if any(hasattr(p, "ds_id") for _, p in params):
        import deepspeed

        with deepspeed.zero.GatheredParameters([p for _, p in params]):
            return {n: p.detach().clone().float() for n, p in params}
    return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone().float() for n, p in params}


def run_setting(name: str, folder: Path, world: int, rank: int) -> None:
    # the backend's flags: by the launch folder's name (the empty-rank test's launch is DDP)
    """One setting in this process: a fresh trainer, one optimizer step; the main rank saves the change."""
    from trl import TrlParser

    from sculptor_rl.agent.chat import ChatFormat
    from sculptor_rl.models import resolve_model

    kind, flags = SETTINGS[name]
    data = folder.parent
    ga = str(2 // world)  # the same global batch: 2 ranks x 1 micro-batch, or 1 process x 2
    argv = [*COMMON, "--model", str(data / "tiny"), "--output_dir", str(folder / name),
            "--gradient_accumulation_steps", ga, *(["--ddp_backend", "gloo"] if world > 1 else []),
            *BACKEND_FLAGS.get("ddp" if folder.name == "empty" else folder.name, [])]
    empty = "--empty_rank" in flags
    flags = [f for f in flags if f not in ("--empty_rank", "true")] if empty else flags
    if kind == "sft":
        from sculptor_rl.train.sft import SculptorSFTConfig, build_trainer

        (cfg,) = TrlParser((SculptorSFTConfig,)).parse_args_and_config(
            [*argv, *flags, "--samples", str(data / "samples.jsonl"), "--per_device_train_batch_size", "2",
             "--shuffle_dataset", "false"])
        trainer = build_trainer(cfg)
    else:
        from transformers import AutoModelForCausalLM

        from sculptor_rl.train.lora import peft_config
        from sculptor_rl.train.rl import SculptorGRPOConfig, SculptorGRPOTrainer

        (cfg,) = TrlParser((SculptorGRPOConfig,)).parse_args_and_config(
            [*argv, *flags, "--tasks", "unused.jsonl", "--engine", "hf", "--num_generations", "2",
             "--per_device_train_batch_size", "2", "--steps_per_generation", ga, "--lm_coef", "0.1"])
        fmt = ChatFormat.from_pretrained(resolve_model(None))
        tasks = [{"id": f"t{k}", "task": "pi_llm", "messages": [{"role": "user", "content": str(k)}],
                  "answer": {"k": "v"}} for k in range(2)]
        trainer = SculptorGRPOTrainer(AutoModelForCausalLM.from_pretrained(data / "tiny", dtype=torch.float32), cfg,
                                      tasks, fmt.tokenizer, fmt, peft_config=peft_config(cfg))
        trajs = rollouts(fmt, empty)
        mine = trajs if world == 1 else trajs[2 * rank : 2 * rank + 2]
        held: list[str] = []
        trainer._rollouts = lambda rows, step: ([{"id": t.task_id} for t in mine[::2]], mine, held)
    assert trainer.accelerator.num_processes == world, (name, trainer.accelerator.num_processes, world)
    before = full_parameters(trainer)
    trainer.train()
    after = full_parameters(trainer)
    if rank == 0:
        torch.save({n: after[n] - before[n] for n in before}, folder / f"{name}.pt")
    trainer.accelerator.wait_for_everyone()
    trainer.accelerator.free_memory()


if __name__ == "__main__":  # one rank: `folder setting [setting ...]`
    import gc

    import torch.distributed as dist

    folder, names = Path(sys.argv[1]), sys.argv[2:]
    sys.path.insert(0, str(Path(__file__).parent))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    for name in names:
        run_setting(name, folder, world, rank)
        gc.collect()
    if dist.is_available() and dist.is_initialized():
        world = dist.get_world_size()
    Path(folder, f"rank{rank}.json").write_text(json.dumps({"world": world}))
