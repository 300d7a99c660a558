"""Algorithm 1 on hand-built trajectories: exact samples and masks."""

import random

import pytest

from sculptor_rl.samples import build_samples
from sculptor_rl.trajectory import Step, Trajectory

MOD, READ, ERR, ANSWER = "mod", "read", "err", "answer"


def make_traj(kinds: list[str]) -> Trajectory:
    """A rollout whose context version changes after every MOD step, as the loop builds prompts.

    Head of version v is [900 + v]; completion i is [100*(i+1) + k ...] ending in the eos 2; the tool
    result after it is [50 + i]. The prompt of step i is head(v_i) followed by every earlier C_j, T_j.
    """
    steps, version, turns = [], 0, []
    for i, kind in enumerate(kinds):
        completion = [100 * (i + 1) + k for k in range(i % 3 + 1)] + [2]
        calls = [] if kind == ANSWER else [{"name": None if kind == ERR else "t", "arguments": {}, "ok": kind != ERR,
                                            "modified": kind == MOD, "format_error": kind == ERR, "result": "r"}]
        steps.append(Step(prompt_ids=[900 + version] + turns, completion_ids=completion,
                          logprobs=[-0.5 - i] * len(completion), text=f"c{i}", calls=calls))
        turns = turns + completion + [50 + i]
        version += kind == MOD
    return Trajectory(task_id="t", task="pi_llm", steps=steps, messages=[], answer="a", score=1.0,
                      stop_reason="answer", context_tokens_before=10, context_tokens_after=5, reward=1.0,
                      rollout_id="t/0")


def trained(sample):
    return [t for t, m in zip(sample.input_ids, sample.loss_mask) if m]


def test_the_design_worked_example():
    # Q, C0=fragment, T0, C1=search, T1, C2=fold, T2, C3=answer
    traj = make_traj([MOD, READ, MOD, ANSWER])
    c = [s.completion_ids for s in traj.steps]
    s1, s2, s3 = build_samples(traj)
    # sample 1: [Q, C0], loss on C0 (the paper's T0 after it changes no loss and is left out)
    assert s1.input_ids == [900] + c[0] and trained(s1) == c[0] and s1.completions == [0]
    # sample 2: [Q', C0, T0, C1, T1, C2], loss on C1 and C2
    assert s2.input_ids == [901] + c[0] + [50] + c[1] + [51] + c[2]
    assert trained(s2) == c[1] + c[2] and s2.completions == [1, 2]
    # sample 3: [Q'', C0, T0, C1, T1, C2, T2, C3], loss on C3, nothing after the final answer
    assert s3.input_ids == [902] + c[0] + [50] + c[1] + [51] + c[2] + [52] + c[3]
    assert trained(s3) == c[3] and s3.completions == [3]
    # the loss mask covers C0's tokens in sample 2 with 0: it was trained in sample 1
    assert s2.loss_mask[1 : 1 + len(c[0])] == [0] * len(c[0])


@pytest.mark.parametrize("kinds", [
    [MOD, MOD, MOD, ANSWER],  # several modifications in a row
    [READ, READ, MOD, READ, MOD, READ, ANSWER],  # read-only calls between them
    [MOD, MOD, MOD, MOD, ANSWER],  # fragment, fold, restore, fold again
    [MOD, ERR, READ, MOD, ERR, ANSWER],  # format errors mid-rollout: trained, but they close no sample
    [ANSWER],  # no tool at all
    [READ, READ, READ],  # stopped by a cap after read-only calls
    [MOD, READ, MOD],  # stopped by a cap right after a modification
])
def test_each_completion_trained_exactly_once_in_its_own_context(kinds):
    traj = make_traj(kinds)
    samples = build_samples(traj)
    closes = [i for i, k in enumerate(kinds) if k == MOD or i == len(kinds) - 1]
    assert [s.completions[-1] for s in samples] == closes
    assert sorted(i for s in samples for i in s.completions) == list(range(len(kinds)))
    assert sum(sum(s.loss_mask) for s in samples) == traj.generated_tokens
    for s in samples:
        for i in s.completions:
            step = traj.steps[i]
            at = len(step.prompt_ids)
            assert s.input_ids[:at] == step.prompt_ids  # exactly the context it was generated in
            assert s.input_ids[at : at + len(step.completion_ids)] == step.completion_ids
            assert s.logprobs[at : at + len(step.completion_ids)] == step.logprobs
        assert all(lp == 0.0 for lp, m in zip(s.logprobs, s.loss_mask) if not m)
        assert len(s.input_ids) == len(s.loss_mask) == len(s.logprobs)


def test_random_trajectories_keep_the_invariants():
    rng = random.Random(0)
    for _ in range(200):
        kinds = [rng.choice([MOD, READ, ERR]) for _ in range(rng.randint(0, 12))] + [ANSWER]
        traj = make_traj(kinds)
        samples = build_samples(traj)
        assert sum(sum(s.loss_mask) for s in samples) == traj.generated_tokens
        assert len(samples) == kinds.count(MOD) + 1


@pytest.mark.parametrize("at", [0, 3, -2])  # the head, C0, the end of C1
def test_a_prompt_that_does_not_extend_the_last_starts_a_sample(at):
    """The general rule: a template that re-renders history (or re-tokenization drift) changes step 2's prompt
    without any context-modifying call; step 1's completion is trained in its own prompt, step 2's in its own."""
    traj = make_traj([READ, READ, ANSWER])
    traj.steps[2].prompt_ids[at] += 1
    s1, s2 = build_samples(traj)
    assert s1.completions == [0, 1] and s1.input_ids == traj.steps[1].prompt_ids + traj.steps[1].completion_ids
    assert s2.completions == [2] and s2.input_ids == traj.steps[2].prompt_ids + traj.steps[2].completion_ids
    assert trained(s2) == traj.steps[2].completion_ids


def test_text_only_teacher_steps_have_no_logprobs():
    traj = make_traj([MOD, ANSWER])
    for s in traj.steps:
        s.logprobs = None
    assert all(s.logprobs is None for s in build_samples(traj))
