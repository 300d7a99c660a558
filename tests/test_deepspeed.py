"""Two processes under `accelerate launch` with DeepSpeed ZeRO-2 and ZeRO-3 on CPU (gloo) complete SFT and RL steps.

The shipped accelerate configs (configs/accelerate/zero{2,3}.yaml) run unchanged, only `--num_processes 2`.
vLLM in two ranks is too heavy for a 2-core machine, so RL runs the real agent loop on the `hf` engine (the
policy's own `generate`, seeded per rank; under ZeRO-3 its shards are gathered for generation). This file is
also the per-rank script: it trains through the trainers' `build_trainer` and writes what the rank saw (its
rows, digests of the full weights before and after) so the tests check the sharding themselves. The tests of
one ZeRO stage share one launch, its jobs run one after the other in the same two ranks. Without a GPU,
accelerate reports one process per rank under DeepSpeed (every rank would train on the same rows) unless
`ddp_backend: gloo` is set, as here. Under ZeRO-2 the shared-prefix forward (rows of a micro-batch computing a
common prefix once) gives the plain forward's loss and full gradients.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import digest

ROOT = Path(__file__).resolve().parents[1]
STAGES = pytest.mark.parametrize("zero", ["zero2", "zero3"])
COMMON = ["--ddp_backend", "gloo", "--learning_rate", "1e-4", "--lr_scheduler_type", "constant", "--bf16", "false",
          "--report_to", "none", "--per_device_train_batch_size", "1", "--max_steps", "2", "--logging_steps", "1"]
JOBS_SEP = "::"  # between the jobs of one launch


def full_digest(model) -> str:
    """In a rank: of the full weights, ZeRO-3 shards gathered (a collective: every rank calls it)."""
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(model.parameters())):
        return digest(model)


def launch(zero: str, jobs: list[tuple[str, list[str]]], port: int) -> None:
    """This file as 2 ranks under the shipped accelerate config, running `jobs` (name, trainer flags) one after
    the other in the same two processes: a launch's start-up (imports, process group) is most of a test's time."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    argv = [a for i, (job, args) in enumerate(jobs) for a in ([JOBS_SEP] if i else []) + [job, *args]]
    proc = subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
         str(ROOT / f"configs/accelerate/{zero}.yaml"), "--num_processes", "2", "--main_process_port", str(port),
         __file__, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]


def rank_reports(out: Path, steps: int = 2) -> list[dict]:
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["world"] for r in ranks] == [2, 2] and all(r["global_step"] == steps for r in ranks)
    # DeepSpeed averaged the gradients: both ranks end with the same weights, and they moved
    assert ranks[0]["after"] == ranks[1]["after"] != ranks[0]["before"]
    return ranks


def sft_job(fmt, folder: Path) -> tuple[tuple[str, list[str]], list]:
    """2 SFT steps of 2 micro-batches on 8 distinct samples (so each rank's rows can be told apart)."""
    from sculptor_rl.samples import Sample, write_samples

    samples = []
    for k in range(8):
        head = fmt.head_ids([{"role": "user", "content": f"Say hi {k} times."}], None)
        completion = fmt.completion_ids("hi " * k + "done")
        samples.append(Sample(f"r{k}/0", head + completion, [0] * len(head) + [1] * len(completion), [0], None, 1.0,
                              fmt.provenance))
    write_samples(samples, folder / "samples.jsonl")
    return ("sft", ["--samples", str(folder / "samples.jsonl"), "--output_dir", str(folder / "sft"),
                    "--gradient_accumulation_steps", "2", "--save_strategy", "no", "--seed", "5", *COMMON]), samples


def grads_job(fmt, folder: Path) -> tuple[str, list[str]]:
    """One SFT step (2 micro-batches of 2 rows per rank) on rows sharing a 267-token system turn, run twice by
    `shared_prefix_rank`: with `shared_prefix` on, then off."""
    from sculptor_rl.samples import Sample, write_samples

    system = " ".join(f"Rule {i}: read the file before you answer, and quote the line you used." for i in range(1, 15))
    samples = []
    for k in range(8):
        head = fmt.head_ids([{"role": "system", "content": system},
                             {"role": "user", "content": f"Question {k}: what does line {k} say?"}], None)
        completion = fmt.completion_ids(f"Line {k} says:" + " read the file" * (k + 1))
        samples.append(Sample(f"r{k}/0", head + completion, [0] * len(head) + [1] * len(completion), [0], None, 1.0,
                              fmt.provenance))
    assert len(os.path.commonprefix([s.input_ids for s in samples])) >= 200
    write_samples(samples, folder / "prefix_samples.jsonl")
    return ("grads", ["--samples", str(folder / "prefix_samples.jsonl"), "--output_dir", str(folder / "grads"),
                      "--save_strategy", "no", "--seed", "5", *COMMON, "--per_device_train_batch_size", "2",
                      "--gradient_accumulation_steps", "2", "--max_steps", "1",
                      "--gradient_checkpointing", "false"])  # on, the layers would drop the shared cache


def rl_job(model_path, folder: Path) -> tuple[str, list[str]]:
    """One RL step of 2 groups (one per rank) on the `hf` engine."""
    from sculptor_rl.envs.tasks import generate
    from sculptor_rl.jsonl import write_jsonl

    write_jsonl(generate("pi_llm", 8, seed=3, keys=1, updates=1), folder / "tasks.jsonl")
    return ("rl", ["--model", model_path, "--tasks", str(folder / "tasks.jsonl"), "--output_dir", str(folder / "rl"),
                   "--engine", "hf", "--environment", "acm-mentions-key", "--num_generations", "2",
                   "--gradient_accumulation_steps", "2", "--max_new_tokens", "8", "--max_tool_calls", "1",
                   "--max_context_tokens", "2048",
                   "--save_strategy", "no", "--save_rollouts", "true", "--seed", "5", *COMMON, "--max_steps", "1"])


@pytest.fixture(scope="module")
def zero2(fmt, tmp_path_factory) -> tuple[Path, list]:
    """One ZeRO-2 launch: the SFT steps, then the shared-prefix gradient check."""
    folder = tmp_path_factory.mktemp("zero2")
    sft, samples = sft_job(fmt, folder)
    launch("zero2", [sft, grads_job(fmt, folder)], 29533)
    return folder, samples


@pytest.fixture(scope="module")
def zero3(fmt, model_path, tmp_path_factory) -> tuple[Path, list]:
    """One ZeRO-3 launch: the SFT steps, then an RL step."""
    folder = tmp_path_factory.mktemp("zero3")
    sft, samples = sft_job(fmt, folder)
    launch("zero3", [sft, rl_job(model_path, folder)], 29534)
    return folder, samples


@pytest.mark.slow
@STAGES
def test_two_ranks_complete_sft_steps(zero, request):
    folder, samples = request.getfixturevalue(zero)
    out = folder / "sft"
    ranks = rank_reports(out)
    # 2 steps x 2 micro-batches x 2 ranks = the 8 samples, each rank its own half
    seen = [set(map(tuple, r["rows"])) for r in ranks]
    assert all(len(s) == 4 for s in seen) and not seen[0] & seen[1]
    assert seen[0] | seen[1] == {tuple(s.input_ids) for s in samples}
    # the saved checkpoint holds the full trained weights (ZeRO-3: gathered on save)
    from transformers import AutoModelForCausalLM

    assert digest(AutoModelForCausalLM.from_pretrained(out / "final")) == ranks[0]["after"]


@pytest.mark.slow
def test_lora_under_zero3_saves_the_merged_full_model(fmt, model_path, tmp_path):
    """LoRA SFT under ZeRO-3 (2 ranks, parameters sharded): the final checkpoint is the whole model with the trained
    adapters merged in, a plain HF checkpoint of the base's names and shapes."""
    import torch
    from transformers import AutoModelForCausalLM

    (job, argv), _ = sft_job(fmt, tmp_path)
    launch("zero3", [(job, [*argv, "--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8"])], 29536)
    base = AutoModelForCausalLM.from_pretrained(model_path)
    final = AutoModelForCausalLM.from_pretrained(tmp_path / "sft" / "final")
    got, want = dict(final.named_parameters()), dict(base.named_parameters())
    assert list(got) == list(want) and all(got[n].shape == p.shape for n, p in want.items())
    moved = [n for n, p in want.items() if not torch.equal(got[n], p)]
    assert moved and all("proj" in n for n in moved)  # the adapted linear layers, merged; nothing else


@pytest.mark.slow
def test_an_empty_step_moves_no_weight_under_deepspeed(tmp_path):
    """skip_empty_updates under ZeRO-2 (2 ranks): DeepSpeed steps its optimizer inside backward, where the trainer
    skips it for a step whose samples all have advantage 0 (beta 0). Two steps: the first has a signal and moves
    the weights, the second leaves them as the first did (AdamW's momentum would move them: test_rl_loss)."""
    launch("zero2", [("skip", ["--output_dir", str(tmp_path), "--engine", "hf", "--num_generations", "2",
                               "--gradient_accumulation_steps", "1", "--save_strategy", "no", "--seed", "5",
                               "--skip_empty_updates", "true", *COMMON, "--per_device_train_batch_size", "2",
                               "--learning_rate", "1e-2", "--tasks", "unused.jsonl"])], 29535)
    for rank in range(2):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert report["update_skipped"] == [0.0, 1.0]
        assert report["before"] != report["steps"][0] == report["steps"][1]


@pytest.mark.slow
def test_two_ranks_complete_an_rl_step(zero3):
    """ZeRO-3 only, one step (two steps under both stages took 7 min of the suite): parameters stay sharded even
    while the policy generates; ZeRO-2 shards less, and the SFT test above covers its launch."""
    out = zero3[0] / "rl"
    ranks = rank_reports(out, steps=1)
    # each rank ran its own share of the tasks (1 of the 2 groups of the round)
    seen = [{json.loads(line)["task_id"] for line in (out / "rollouts" / f"step-000001.rank{r}.jsonl").open()}
            for r in range(2)]
    assert all(len(s) == 1 for s in seen) and not seen[0] & seen[1]
    assert any(r["grad_norm"] > 0 for r in ranks)


@pytest.mark.slow
def test_zero2_shared_prefix_gives_the_plain_step_gradients(zero2):
    """One SFT step with `shared_prefix` on, and one from the same weights with it off: each rank's loss and every
    parameter's full gradient (read after the step's last `engine.backward`, before `engine.step`) agree to fp32
    tolerance. Each micro-batch computes the rows' common system turn once: 3 model forwards (prefix, then each
    row's rest) against 1, all inside one call of the DeepSpeed engine."""
    out = zero2[0] / "grads"
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    for r in ranks:
        shared, plain = r["shared"], r["plain"]
        assert r["world"] == 2 and shared["rows"] == plain["rows"] and len(shared["rows"]) == 4
        assert shared["fallback"] is None and shared["forwards"] == [3, 3] and plain["forwards"] == [1, 1]
        # and one engine call per micro-batch either way: DeepSpeed's per-call bookkeeping runs once
        assert shared["engine_calls"] == plain["engine_calls"] == [1, 1]
        assert abs(shared["loss"] - plain["loss"]) <= 1e-5 * abs(plain["loss"])
        # per parameter: max |shared - plain| / max |plain|
        assert r["n_params"] > 0 and r["worst"][1] <= 1e-4, r["worst"]
    assert not set(map(tuple, ranks[0]["shared"]["rows"])) & set(map(tuple, ranks[1]["shared"]["rows"]))


def shared_prefix_rank(argv: list[str]) -> None:
    """One rank of the gradient test: a fresh trainer per pass (shared_prefix on, then off), each one step.
    Around the trainer's own compute_loss it records the rows, the model forwards (embedding calls) and engine
    calls per micro-batch, and after the step's last `engine.backward` (the accumulation boundary) the full
    gradients (`safe_get_full_grad`, a collective under ZeRO). The step itself then runs as usual."""
    import gc

    import torch.distributed as dist
    from deepspeed.utils import safe_get_full_grad
    from trl import TrlParser

    from sculptor_rl.train.sft import SculptorSFTConfig, build_trainer
    from sculptor_rl.train.shared_prefix import fallback_reason

    passes, grads = {}, {}
    for name in ("shared", "plain"):
        flag = ["--shared_prefix", "true" if name == "shared" else "false"]
        (cfg,) = TrlParser((SculptorSFTConfig,)).parse_args_and_config([*argv, *flag])
        trainer = build_trainer(cfg)
        seen = passes[name] = {"rows": [], "forwards": [], "engine_calls": [], "loss": 0.0, "fallback": None}
        compute_loss, hooked = trainer.compute_loss, []

        def recorded(engine, inputs, *args, seen=seen, compute_loss=compute_loss, hooked=hooked, name=name, **kw):
            if not hooked:  # the engine exists once training starts
                for module, key in ((engine.module.get_input_embeddings(), "forwards"), (engine, "engine_calls")):
                    hooked.append(module.register_forward_pre_hook(
                        lambda *_, key=key: seen[key].__setitem__(-1, seen[key][-1] + 1)))
                backward = engine.backward

                def captured(loss, *a, **k):
                    result = backward(loss, *a, **k)
                    seen["loss"] += loss.item()
                    if engine.is_gradient_accumulation_boundary():
                        grads[name] = {n: safe_get_full_grad(p).detach().clone()
                                       for n, p in engine.module.named_parameters()}
                    return result

                engine.backward = captured
            seen["fallback"] = seen["fallback"] or fallback_reason(engine)
            seen["rows"] += inputs["input_ids"].tolist()
            seen["forwards"].append(0)
            seen["engine_calls"].append(0)
            return compute_loss(engine, inputs, *args, **kw)

        trainer.compute_loss = recorded
        trainer.train()
        trainer.accelerator.free_memory()  # drops the DeepSpeed engine before the next pass builds its own
        del trainer, recorded
        gc.collect()
    rel = {n: ((g - grads["plain"][n]).abs().max() / grads["plain"][n].abs().max().clamp(min=1e-30)).item()
           for n, g in grads["shared"].items()}
    worst = max(rel.items(), key=lambda kv: kv[1])
    Path(argv[argv.index("--output_dir") + 1], f"rank{dist.get_rank()}.json").write_text(json.dumps({
        "world": dist.get_world_size(), "shared": passes["shared"], "plain": passes["plain"],
        "n_params": len(rel), "worst": worst}))


def skip_rank(argv: list[str]) -> None:
    """One rank of the `skip` job: two optimizer steps on replayed rounds, the second without signal; writes the
    weights' digests after each step and the logged `update_skipped`."""
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import TrlParser

    from sculptor_rl.agent.chat import ChatFormat
    from sculptor_rl.models import resolve_model
    from sculptor_rl.train.rl import SculptorGRPOConfig, SculptorGRPOTrainer
    from test_rl_loss import cut_rollouts, tiny_model_dir

    (cfg,) = TrlParser((SculptorGRPOConfig,)).parse_args_and_config(argv)
    fmt = ChatFormat.from_pretrained(resolve_model(None))
    path = Path(cfg.output_dir) / "tiny"
    if dist.get_rank() == 0:  # transformers saves on the main process only
        tiny_model_dir(len(fmt.tokenizer), path)
    dist.barrier()
    tasks = [{"id": f"t{k}", "task": "pi_llm", "messages": [{"role": "user", "content": str(k)}], "answer": {"k": "v"}}
             for k in range(2)]
    trainer = SculptorGRPOTrainer(AutoModelForCausalLM.from_pretrained(path), cfg, tasks, fmt.tokenizer, fmt)
    samples = cut_rollouts(len(fmt.tokenizer), (1, 2))
    rounds = iter([[1.0, -1.0, -1.0], [0.0, 0.0, 0.0]])
    trainer._generate_round = lambda rows: trainer._micro_batches(samples, next(rounds))  # rollouts not under test
    steps = []

    class Snapshot(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kw):
            steps.append(digest(model))

    trainer.add_callback(Snapshot())
    before = digest(trainer.model)
    trainer.train()
    skipped = [r["update_skipped"] for r in trainer.state.log_history if "update_skipped" in r]
    Path(cfg.output_dir, f"rank{dist.get_rank()}.json").write_text(json.dumps({
        "before": before, "steps": steps, "update_skipped": skipped}))
    trainer.accelerator.free_memory()


def train_rank(job: str, argv: list[str]):
    """One rank of an `sft` or `rl` job: trains, then writes what the rank saw. Returns the trainer."""
    import torch.distributed as dist
    from trl import TrlParser

    if job == "sft":
        from sculptor_rl.train.checkpoints import save_final
        from sculptor_rl.train.sft import SculptorSFTConfig, build_trainer

        (cfg,) = TrlParser((SculptorSFTConfig,)).parse_args_and_config(argv)
        trainer = build_trainer(cfg)
        # the rows this rank's (sharded) dataloader yields
        report = {"rows": [row for b in trainer.get_train_dataloader() for row in b["input_ids"].tolist()]}
    else:
        from sculptor_rl.train.rl import SculptorGRPOConfig, build_trainer

        import test_rl_vllm  # noqa: F401 (registers its environment; this file's folder is on sys.path as a script)

        (cfg,) = TrlParser((SculptorGRPOConfig,)).parse_args_and_config(argv)
        trainer = build_trainer(cfg)
        report = {}
    before = full_digest(trainer.model)
    trainer.train()
    if job == "sft":
        save_final(trainer, trainer.processing_class, Path(cfg.output_dir) / "final")
    grad_norms = [e["grad_norm"] for e in trainer.state.log_history if "grad_norm" in e]
    Path(cfg.output_dir, f"rank{dist.get_rank()}.json").write_text(json.dumps({
        **report, "world": dist.get_world_size(), "global_step": trainer.state.global_step, "before": before,
        "after": full_digest(trainer.model), "grad_norm": max(grad_norms)}))
    return trainer


if __name__ == "__main__":  # one rank of a launch: `job flags [:: job flags ...]`, job one of sft, rl, grads, skip
    import gc

    args = sys.argv[1:]
    while args:
        end = args.index(JOBS_SEP) if JOBS_SEP in args else len(args)
        job, argv, args = args[0], args[1:end], args[end + 1:]
        if job == "grads":
            shared_prefix_rank(argv)
        elif job == "skip":
            skip_rank(argv)
        else:
            trained = train_rank(job, argv)
            trained.accelerator.free_memory()  # the next job builds its own DeepSpeed engine
            del trained
        gc.collect()
