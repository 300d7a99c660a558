"""The evaluation metrics (sculptor_rl.metrics) on hand-made trajectories whose numbers are known."""

import math

import pytest

from sculptor_rl.metrics import restores_after_fold, summarize, summarize_by, tool_entropy
from sculptor_rl.trajectory import Step, Trajectory


def call(name, ok=True, format_error=False):
    return {"name": name, "arguments": {}, "ok": ok, "modified": False, "format_error": format_error, "result": ""}


def traj(task_id, score, calls=(), before=1000, after=1000, generated=10, stop="answer", reward=None):
    """One rollout: a step per call (each generating `generated` tokens), then the answer step."""
    steps = [Step(prompt_ids=[1], completion_ids=[7] * generated, logprobs=None, text="", calls=[c]) for c in calls]
    steps.append(Step(prompt_ids=[1], completion_ids=[7] * generated, logprobs=None, text="answer"))
    return Trajectory(task_id=task_id, task=task_id.split("-")[0], steps=steps, messages=[], answer="answer",
                      score=score, stop_reason=stop, context_tokens_before=before, context_tokens_after=after,
                      reward=score if reward is None else reward)


@pytest.fixture
def trajs():
    return [
        # bucket 2k: one right, one wrong (a format error); bucket 8k: right
        traj("babilong-0", 1.0, [call("fragment_context"), call("fold_fragment"), call("fragment_context")],
             before=1000, after=250),
        traj("babilong-1", 0.0, [call("search_context"), call(None, ok=False, format_error=True)],
             before=1000, after=1000, reward=-1.0),
        traj("babilong-2", 1.0, before=4000, after=1000, generated=40),
    ]


BUCKET = {"babilong-0": "2k", "babilong-1": "2k", "babilong-2": "8k"}


def test_tool_entropy_known_values():
    assert tool_entropy({"a": 2, "b": 1, "c": 1}) == pytest.approx(1.5)  # -(1/2 log 1/2 + 2 * 1/4 log 1/4)
    assert tool_entropy({"a": 5, "b": 5}) == pytest.approx(1.0)
    assert tool_entropy({"a": 7}) == 0.0
    assert tool_entropy({}) == 0.0
    assert tool_entropy({f"t{i}": 1 for i in range(6)}) == pytest.approx(math.log2(6))  # all six tools evenly


def test_summary_numbers(trajs):
    s = summarize(trajs)
    assert s["n"] == 3
    assert s["accuracy"] == pytest.approx(2 / 3)
    assert s["reward"] == pytest.approx(1 / 3)
    # calls named: fragment x2, fold, search (the unparseable one has no name) -> entropy 1.5 bits
    assert s["tool_counts"] == {"fragment_context": 2, "fold_fragment": 1, "search_context": 1}
    assert s["tool_entropy"] == pytest.approx(1.5)
    assert s["tool_calls_per_task"] == pytest.approx(5 / 3)
    assert s["tool_calls_per_tool"] == pytest.approx({"fold_fragment": 1 / 3, "fragment_context": 2 / 3,
                                                      "search_context": 1 / 3})
    assert s["format_error_rate"] == pytest.approx(1 / 3)  # one rollout of three
    assert s["valid_calls"] == pytest.approx(4 / 5)
    # reductions 0.75, 0 and 0.75 -> 0.5; tokens are plain means
    assert s["context_reduction"] == pytest.approx(0.5)
    assert s["context_tokens_before"] == pytest.approx(2000)
    assert s["context_tokens_after"] == pytest.approx(750)
    assert s["generated_tokens"] == pytest.approx((4 * 10 + 3 * 10 + 40) / 3)
    assert s["stop_reasons"] == {"answer": 3}


def test_per_bucket_accuracy(trajs):
    by = summarize_by(trajs, lambda t: BUCKET[t.task_id])
    assert list(by) == ["2k", "8k"]
    assert by["2k"]["n"] == 2 and by["2k"]["accuracy"] == pytest.approx(0.5)
    assert by["8k"]["n"] == 1 and by["8k"]["accuracy"] == 1.0
    assert by["2k"]["context_reduction"] == pytest.approx(0.375)
    assert by["8k"]["context_reduction"] == pytest.approx(0.75)
    assert by["8k"]["tool_calls_per_task"] == 0 and by["8k"]["valid_calls"] is None  # no calls: no ratio


def test_correct_threshold_counts_partial_scores():
    trajs = [traj("pi_llm-0", 0.75), traj("pi_llm-1", 1.0)]
    assert summarize(trajs)["correct"] == 0.5
    assert summarize(trajs, correct_threshold=0.7)["correct"] == 1.0
    assert summarize(trajs)["accuracy"] == pytest.approx(0.875)


def test_restores_after_fold_count_only_a_fragment_folded_before():
    def on(name, fragment, ok=True):
        return {**call(name, ok), "arguments": {"fragment_id": fragment}}

    learned = traj("pi_llm-0", 1.0, [on("fold_fragment", "fa"), on("restore_fragment", "fa"),
                                     on("restore_fragment", "fa"),  # already restored
                                     on("restore_fragment", "fb"),  # never folded (summarized, or unknown)
                                     on("fold_fragment", "fc", ok=False), on("restore_fragment", "fc")])
    assert restores_after_fold(learned) == 1
    assert summarize([learned, traj("pi_llm-1", 0.0)])["restores_after_fold"] == 0.5
