"""The RL trainer growing MemToolAgent's memory between its generation rounds (`memory_updates`): the entries a
round adds (`round_entries`, shared with `sculptor_rl.crossepisode`) on trajectories made by hand, and one real
run (slow): a tiny random policy trained on a scripted engine's rollouts for two rounds, then resumed from its
first checkpoint. The option's config checks are in test_rl_configs."""

import pytest
import torch

from sculptor_rl.engines import Completion
from sculptor_rl.envs.memtoolagent.env import MemToolAgentParams, round_entries
from sculptor_rl.envs.teacher import ScriptedTeacher
from sculptor_rl.memory import MemoryStore
from sculptor_rl.envs.memtoolagent.entry import make_entry
from sculptor_rl.envs.tasks import generate
from sculptor_rl.jsonl import write_jsonl
from sculptor_rl.train.rl import SculptorGRPOConfig, SculptorGRPOTrainer
from sculptor_rl.trajectory import Step, Trajectory, read_trajectories


def rollout(task_id: str, query: str, score: float, calls: list[dict]) -> Trajectory:
    """A memtoolagent rollout as the loop records it, reduced to what an entry is made of."""
    records = [{**c, "ok": score == 1.0, "modified": False, "format_error": False, "result": "Error: no such id"}
               for c in calls]
    return Trajectory(task_id, "workbench", [Step([1], [2], None, "...", calls=records)], [], "Done.", score,
                      "answer", 1, 1, info={"query": query, "calls": calls, "domain": "email"})


def test_a_round_adds_one_entry_per_group_critiquing_its_failures(tmp_path):
    snapshot = tmp_path / "snapshot.jsonl"
    seen = make_entry("Delete my last email from Sofia.", [], 0, "Look the email up first.")
    MemoryStore([seen]).save(snapshot)
    delete = {"name": "email.delete_email", "arguments": {"email_id": "00000042"}}
    send = {"name": "email.send_email", "arguments": {"recipient": "carlos@atlas.com"}}
    trajs = [rollout("a", "Email Carlos.", 0.0, []), rollout("a", "Email Carlos.", 1.0, [send]),  # group a
             rollout("b", "Delete my last email from Raj.", 0.0, [delete]), rollout("b", "-", 0.0, [])]  # b
    critiqued = []

    def reflect(traj, similar):
        critiqued.append((traj, similar))
        return "critique"

    params = MemToolAgentParams(memory=str(snapshot), retrieval="topk", k=2)
    a, b = round_entries(trajs, 2, params, reflect, step=3)
    # a: the successful rollout's calls, no critique; b: the first rollout's, critiqued given what the agent saw
    assert a == {"query": "Email Carlos.", "calls": [send], "feedback": 1, "reflection": None, "task_id": "a",
                 "domain": "email", "step": 3}
    assert b["calls"] == [delete] and b["feedback"] == 0 and b["reflection"] == "critique" and b["step"] == 3
    assert len(critiqued) == 1 and critiqued[0][0] is trajs[2] and critiqued[0][1] == [seen]
    # without a reflector a failure is kept without critique (the ablation "w/o memory extractor")
    assert [e["reflection"] for e in round_entries(trajs, 2, params)] == [None, None]


class HalfTeacher(ScriptedTeacher):
    """The scripted teacher on each group's first rollout, an agent that answers at once on the others."""

    def generate(self, requests):
        taught = iter(super().generate([r for r in requests if r.rollout_id.endswith("/0")]))
        return [next(taught) if r.rollout_id.endswith("/0") else Completion(text="Done.") for r in requests]


@pytest.mark.slow
def test_rl_grows_the_memory_between_rounds_and_resumes_from_it(fmt, tmp_path):
    from test_rl_loss import tiny_model_dir
    from transformers import AutoModelForCausalLM

    # one template: every query shares words with the others, so a later round retrieves an earlier one's entry
    tasks = [t for t in generate("workbench", 40, 0, domains="email") if t["meta"]["template"] == "email.mail_send"]
    tasks = tasks[:3]
    write_jsonl(tasks, tmp_path / "tasks.jsonl")
    policy_dir = tiny_model_dir(len(fmt.tokenizer), tmp_path / "tiny")
    out, memory = tmp_path / "rl", tmp_path / "memory.jsonl"

    def run(max_steps: int, resume: str | None = None) -> SculptorGRPOTrainer:
        cfg = SculptorGRPOConfig(
            tasks=str(tmp_path / "tasks.jsonl"), output_dir=str(out), environment="memtoolagent",
            environment_params={"memory": str(memory), "retrieval": "topk", "k": 2, "toolset": "domain"},
            memory_updates="rules", max_steps=max_steps, num_generations=2, per_device_train_batch_size=2,
            gradient_accumulation_steps=1, gradient_checkpointing=False, max_tool_calls=4, bf16=False,
            report_to="none", save_steps=1, use_cpu=True, save_rollouts=True, seed=1)
        trainer = SculptorGRPOTrainer(AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32), cfg,
                                      tasks, fmt.tokenizer, fmt, engine=HalfTeacher(tasks))
        trainer.train(resume_from_checkpoint=resume)
        return trainer

    def entries(path) -> list[dict]:
        return MemoryStore.load(path).entries

    trainer = run(2)
    assert trainer.state.global_step == 2
    assert [e["memory_entries"] for e in trainer.state.log_history if "memory_entries" in e] == [1, 2]
    store = entries(memory)  # one entry per round's group, the teacher's success
    assert [(e["step"], e["feedback"]) for e in store] == [(1, 1), (2, 1)] and store[0]["calls"]
    # each round read its own snapshot: empty, then the first round's entry; both rollouts of a group alike
    assert entries(out / "memory" / "step-000001.jsonl") == []
    assert entries(out / "memory" / "step-000002.jsonl") == [store[0]]
    first, second = (list(read_trajectories(out / "rollouts" / f"step-00000{s}.rank0.jsonl")) for s in (1, 2))
    assert [t.info["retrieved"] for t in first] == [[], []]
    assert [t.info["retrieved"] for t in second] == [[store[0]["query"]]] * 2
    assert second[0].messages[0] == second[1].messages[0]
    assert "User feedback: Correct" in second[0].messages[0]["content"]
    assert [len(entries(out / f"checkpoint-{s}" / "memory.jsonl")) for s in (1, 2)] == [1, 2]

    # resumed from checkpoint-1, the run goes on from that checkpoint's store, not the file's later round
    run(3, resume=str(out / "checkpoint-1"))
    assert [e["step"] for e in entries(memory)] == [1, 2, 3] and entries(memory)[0] == store[0]
    assert entries(out / "memory" / "step-000002.jsonl") == [store[0]]
    assert len(entries(out / "memory" / "step-000003.jsonl")) == 2
