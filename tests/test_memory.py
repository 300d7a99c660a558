"""The cross-episode memory (sculptor_rl.memory): store round-trip through disk, frozen snapshots, BM25 and
Dynamic "n" (MemToolAgent Algorithm 1) on hand-made similarity curves."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sculptor_rl.memory import MemoryStore, bm25_scores, dynamic_n, load_snapshot, select, top_k
from sculptor_rl.envs.memtoolagent.entry import check_entry, make_entry, render_entries


def _entries():
    call = {"name": "email.send_email", "arguments": {"recipient": "carlos@atlas.com", "subject": "Hi"}}
    return [make_entry("send an email to Carlos", [call], 1),
            make_entry("delete my last meeting", [], 0, "The agent deleted nothing: search events first.",
                       domain="calendar")]


def test_store_round_trip_through_disk(tmp_path):
    store = MemoryStore(_entries(), check=check_entry)
    path = tmp_path / "memory.jsonl"
    assert store.save(path) == 2
    back = MemoryStore.load(path, check=check_entry)
    assert back.entries == store.entries
    assert back.entries[1]["domain"] == "calendar" and back.entries[0]["reflection"] is None


def test_load_names_the_bad_line(tmp_path):
    path = tmp_path / "memory.jsonl"
    good = json.dumps(_entries()[0])
    path.write_text(good + "\n" + json.dumps({"query": "x", "calls": [], "feedback": 2}) + "\n")
    with pytest.raises(ValueError, match=r"memory.jsonl line 2: not a memory entry .*feedback"):
        MemoryStore.load(path, check=check_entry)
    path.write_text(good + "\n[1, 2]\n")
    with pytest.raises(ValueError, match="line 2"):
        MemoryStore.load(path)
    with pytest.raises(ValueError, match="reflection"):  # r only when f = 0
        make_entry("q", [], 1, "a critique of a correct execution")


def test_frozen_snapshot_does_not_change():
    store = MemoryStore(_entries())
    snap = store.frozen()
    store.add(make_entry("plot total visits", [], 1))
    store.entries[0]["query"] = "changed"
    assert len(snap) == 2 and snap.entries[0]["query"] == "send an email to Carlos"
    with pytest.raises(TypeError):
        snap.entries[0]["query"] = "x"
    with pytest.raises(AttributeError):
        snap.entries[0]["calls"].append({})  # lists are frozen into tuples
    with pytest.raises(AttributeError):
        snap.entries = ()


def test_load_snapshot_reads_a_new_version(tmp_path):
    path = tmp_path / "m.jsonl"
    MemoryStore(_entries()[:1]).save(path)
    first = load_snapshot(path)
    assert load_snapshot(path) is first  # one read per file version
    MemoryStore(_entries()).save(path)
    assert len(load_snapshot(path)) == 2


def test_render_shows_feedback_and_reflection():
    text = render_entries(_entries())
    assert 'email.send_email(recipient="carlos@atlas.com", subject="Hi")' in text
    assert "User feedback: Correct" in text and "User feedback: Incorrect" in text
    assert text.count("Reflection:") == 1


def test_bm25_ranks_the_similar_query_first():
    docs = ["send an email to Carlos about the budget", "delete the calendar event tomorrow", "plot total visits"]
    scores = bm25_scores("email Carlos the new budget", docs)
    assert top_k(scores, 1) == [0] and scores[1] == scores[2] == 0.0
    assert bm25_scores("the", docs) == [0.0, 0.0, 0.0] and bm25_scores("x", []) == []


def test_bm25_indexing_logs_nothing_at_info(caplog):
    """bm25s sets its logger to DEBUG on import; a command at INFO would print a line per index built."""
    import logging

    with caplog.at_level(logging.INFO):
        bm25_scores("email Carlos", ["send an email to Carlos", "plot total visits"])
        assert not logging.getLogger("bm25s").isEnabledFor(logging.DEBUG)


def test_dynamic_n_one_knee():
    assert dynamic_n([1.0] * 12 + [0.2] * 20) == 12
    # noisy plateaus and an order that is not sorted yet
    rng = np.random.default_rng(0)
    x = np.r_[np.linspace(0.9, 0.85, 15), np.linspace(0.4, 0.35, 30)] + rng.normal(0, 0.003, 45)
    assert dynamic_n(rng.permutation(x)) == 15


def test_dynamic_n_two_knees_first_or_second_peak():
    x = [1.0] * 12 + [0.6] * 25 + [0.1] * 20
    assert dynamic_n(x) == 12 and dynamic_n(x, peak=1) == 37
    assert dynamic_n(x, radius=3) == 12


def test_dynamic_n_range_of_algorithm_1():
    """y(j) exists for j = R .. |x|-R-1 and find_peaks never reports its end points, so n = j + 1 lies in
    [R + 2, |x| - R - 1]: a drop after the first R + 1 entries or fewer is not seen (the top-k fallback decides),
    and a memory needs 2R + 4 entries for any knee to be found."""
    assert dynamic_n([1.0] * 12 + [0.2] * 28, fallback=-1) == 12  # the earliest knee R = 10 can find
    assert dynamic_n([1.0] * 11 + [0.2] * 29, fallback=-1) == -1  # one earlier: not seen
    assert dynamic_n([5.1, 3.2, 1.0] + [0.0] * 25, fallback=-1) == -1  # sparse BM25 scores: no knee
    assert dynamic_n([1.0] * 12 + [0.2] * 11, fallback=-1) == -1  # 23 = 2R + 3 entries: y has no inner point
    assert dynamic_n([1.0] * 12 + [0.2] * 12, fallback=-1) == 12  # 24 = 2R + 4
    assert dynamic_n([1.0] * 4 + [0.2] * 20, radius=2) == 4  # a smaller R sees earlier knees (R + 2)


def test_dynamic_n_falls_back_to_top_k():
    assert dynamic_n([0.5] * 40, fallback=4) == 4  # flat: no peak
    assert dynamic_n([0.9, 0.1, 0.1], fallback=5) == 3  # shorter than a window
    assert dynamic_n([1.0] * 12 + [0.2] * 20, peak=1, fallback=7) == 7  # no second peak
    assert select([0.1, 0.9, 0.5], "none") == [] and select([0.1, 0.9, 0.5], "topk", k=2) == [1, 2]
    assert select([1.0] * 12 + [0.2] * 20, "dynamic", k=3) == list(range(12))
    with pytest.raises(ValueError, match="retrieval"):
        select([1.0], "best")
