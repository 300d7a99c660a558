"""MemTool: the catalogue, sessions, the environment (management tools, limit, modes, history) and the metrics,
on hand-made sessions with known numbers. Rollouts through the agent loop are in test_memtool_rollouts.py."""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import pytest

from sculptor_rl.envs import tasks
from sculptor_rl.jsonl import write_jsonl
from sculptor_rl.longcontext import FAMILIES as LONG_CONTEXT
from sculptor_rl.envs import RewardConfig
from sculptor_rl.envs.memtool.env import (ANSWER_STEP, PRUNE_STEP, REMOVE, REPRUNE_STEP, SEARCH, SEARCH_STEP,
                                          SUMMARY_STEP, MemToolParams, MemToolEnv, judge_score)
from sculptor_rl.envs.memtool.catalogue import catalogue
from sculptor_rl.envs.memtool import sessions
from sculptor_rl.envs.memtool.catalogue import METRICS, NUM_COMPANIES
from sculptor_rl.envs.memtool.metrics import (avg_removal_ratio_3t, avg_residual_3t, format_table, peak_residuals,
                                              plot_loaded_tools, removal_ratio, session_reward, summarize, window_removal_ratios)
from sculptor_rl.stats import wilson
from sculptor_rl.records import load_tasks


# ---- catalogue ----

def test_catalogue_names_schemas_and_values():
    cat = catalogue()
    assert len(cat) == NUM_COMPANIES * len(METRICS) == 5000
    assert len({c.ticker for c in cat.companies}) == len({c.name for c in cat.companies}) == NUM_COMPANIES
    for name, tool in list(cat.tools.items())[::97]:
        assert re.fullmatch(rf"get_{tool.metric.key}_{tool.company.ticker.lower()}", name)
        assert tool.schema["function"]["name"] == name and tool.company.name in tool.schema["function"]["description"]
        value = tool.value(2019, 3)
        assert re.fullmatch(r"\d+\.\d\d", value) and tool.metric.low <= float(value) <= tool.metric.high
        assert value == tool.value(2019, 3) != tool.value(2019)  # a pure function of the period
        assert tool.result(2019, 3) == f"{tool.label(2019, 3)}: {value} ({tool.metric.unit})"
        assert tool.label(2019, 3) == f"{tool.company.ticker} {tool.metric.phrase} Q3 2019"


def test_search_finds_every_tool_by_company_and_metric():
    cat = catalogue()
    for name, tool in cat.tools.items():
        assert cat.search(f"{tool.company.name} {tool.metric.phrase}")[0] == name
    found = cat.search("revenue")
    assert len(found) == 5 and all(n.startswith("get_revenue_") for n in found)
    assert cat.search("quantum zebra") == [] and cat.search("the of") == []


# ---- sessions ----

def test_sessions_are_deterministic_and_ask_for_new_tools():
    batch = sessions.generate(6, seed=3, requests=8, calls_per_request=3, reuse=0.5)
    assert batch == sessions.generate(6, seed=3, requests=8, calls_per_request=3, reuse=0.5)
    assert batch[:2] == sessions.generate(2, seed=3, requests=8, calls_per_request=3, reuse=0.5)
    assert all(a["messages"] != b["messages"] for a, b in zip(batch, sessions.generate(6, seed=4, requests=8,
                                                                                       calls_per_request=3, reuse=0.5)))
    reused = 0
    for record in batch:
        assert json.loads(json.dumps(record)) == record and record["meta"]["bucket"] == "8x3"
        used: list[set] = []
        for k, request in enumerate(record["meta"]["requests"]):
            names = [c["name"] for c in request["calls"]]
            assert len(set(names)) == 3 and all(name not in request["text"] for name in names)
            earlier, recent = set().union(*used), set().union(*used[-2:])
            assert names[0] not in earlier  # every request needs a tool no earlier request used
            assert all(n not in earlier or n in recent for n in names)  # reuse only from the last two requests
            reused += sum(n in earlier for n in names)
            used.append(set(names))
            tools = [catalogue()[n] for n in names]
            assert record["answer"][k] == [t.value(**c["arguments"]) for t, c in zip(tools, request["calls"])]
        assert record["messages"] == [{"role": "user", "content": sessions.request_message(
            0, 8, record["meta"]["requests"][0]["text"])}]  # no system message: the environment gives it
    assert reused > 0


def test_session_scoring_is_exact_per_request():
    record = {"answer": [["12.50", "3.07"], ["7.00"]]}
    assert sessions.score(record, ["Answer: 12.50 and 3.07", "7.00"]) == 1.0
    assert sessions.score(record, ["12.50, 3.07"]) == 0.5  # the second request was never answered
    assert sessions.score(record, ["112.50 3.07", "7.00"]) == 0.5  # part of a longer number does not count
    assert sessions.score(record, ["12.5 3.07", "7.001"]) == 0.0
    assert sessions.score(record, "") == 0.0
    r = sessions.generate(1, 0)[0]
    assert tasks.score(r, tasks.render_answer(r)) == 1.0  # also through the task registry


@pytest.mark.parametrize("params", [{"requests": 0}, {"calls_per_request": 0}, {"reuse": 1.5}, {"requests": "3"}])
def test_bad_session_params(params):
    with pytest.raises(ValueError):
        tasks.generate("memtool", 2, 0, **params)


def test_sessions_load_from_jsonl(tmp_path):
    records = tasks.generate("memtool", 3, 1, requests=2)
    write_jsonl(records, tmp_path / "s.jsonl")
    assert load_tasks(tmp_path / "s.jsonl") == records
    assert "memtool" not in LONG_CONTEXT  # the long-context families the ACM env, eval and pipeline iterate


def test_paper_sessions_are_stratified_and_related_or_not():
    (record,) = sessions.generate(1, seed=2, requests=100, calls_per_request=list(range(1, 10)), related=0.5)
    requests = record["meta"]["requests"]
    calls = [len(r["calls"]) for r in requests]
    assert len(requests) == 100 and sum(calls) == 500  # averaging exactly 5 calls per turn
    assert sorted(calls.count(c) for c in range(1, 10)) == [11] * 8 + [12] and calls.count(5) == 12
    assert record["meta"]["bucket"] == "100x1-9" and requests[0]["related"] is False
    assert 30 < sum(r["related"] for r in requests) < 70
    cat, used = catalogue(), set()
    for prev, req in zip(requests, requests[1:]):
        used |= {c["name"] for c in prev["calls"]}
        names = [c["name"] for c in req["calls"]]
        prev_names = {c["name"] for c in prev["calls"]}
        if req["related"]:  # again about one of the previous request's tools, then new ones
            assert names[0] in prev_names and not set(names[1:]) & used
        else:  # new tools, none of the previous request's companies
            assert not set(names) & used
            assert not {cat[n].company.ticker for n in names} & {cat[n].company.ticker for n in prev_names}
    with pytest.raises(ValueError, match="distinct"):
        sessions.generate(1, calls_per_request=[2, 2])


# ---- the environment ----

def _session(*requests: list[tuple[str, dict]]) -> dict:
    """A hand-made session: each request is a list of (tool name, arguments)."""
    cat = catalogue()
    metas = [{"text": f"hand-made request {i}", "calls": [{"name": n, "arguments": a} for n, a in calls]}
             for i, calls in enumerate(requests)]
    answer = [[cat[n].value(**a) for n, a in calls] for calls in requests]
    return {"id": "memtool-hand", "task": "memtool", "answer": answer,
            "messages": [{"role": "user", "content": sessions.request_message(0, len(metas), metas[0]["text"])}],
            "meta": {"requests": metas}}


def _names(env: MemToolEnv) -> list[str]:
    return [t["function"]["name"] for t in env.tools]


def _kw(name: str) -> str:
    tool = catalogue()[name]
    return f"{tool.company.name} {tool.metric.phrase}"


A, B, C = (catalogue().names[i] for i in (0, 1001, 2002))


def test_search_and_remove_change_the_tool_set():
    env = MemToolEnv(_session([(A, {"year": 2020})]))
    assert _names(env) == ["Search_Tools", "Remove_Tools"] == [SEARCH, REMOVE]
    assert [m["role"] for m in env.render()] == ["system", "user"]
    assert "Tool count: 2 (limit 128; 0 loaded from the catalogue)" in env.render()[0]["content"]
    r = env.execute(SEARCH, {"keywords": [_kw(A), _kw(B)]})
    assert r.ok and r.modified and r.text.startswith("10 tools added: " + A) and r.text.endswith("Tool count: 12.")
    assert len(env.loaded) == 10 and _names(env)[2:] == env.loaded and B in env.loaded
    assert "Tool count: 12 (limit 128; 10 loaded" in env.render()[0]["content"]
    again = env.execute(SEARCH, '{"keywords": ["' + _kw(A) + '"]}')  # JSON text arguments work too
    assert again.ok and not again.modified and again.text.startswith("No new tools")
    before = list(env.loaded)
    for bad, message in [({"tool_names": []}, "non-empty array"), ({"names": [A]}, "unknown argument"),
                         ("{oops", "not valid JSON")]:
        r = env.execute(REMOVE, bad)
        assert not r.ok and not r.modified and r.text.startswith("Error:") and message in r.text
    assert env.loaded == before  # a bad call changes nothing
    assert env.turns[0].added == 10 and env.turns[0].removed == 0


def test_remove_is_a_set_difference_or_strict():
    """The paper: T <- T \\ (R \\ {Search_Tools, Remove_Tools}); names not loaded are ignored. strict: they fail."""
    env = MemToolEnv(_session([(A, {"year": 2020})]))
    env.execute(SEARCH, {"keywords": [_kw(A), _kw(B)]})
    r = env.execute(REMOVE, {"tool_names": [B, SEARCH, "get_nothing_zzz", B, A]})
    assert r.ok and r.modified and r.text.startswith(f"2 tools removed: {B}, {A}. Ignored (not loaded or not "
                                                     f"removable): {SEARCH}, get_nothing_zzz. Tool count: 10.")
    assert len(env.loaded) == 8 and A not in env.loaded and _names(env)[:2] == [SEARCH, REMOVE]
    r = env.execute(REMOVE, {"tool_names": [A]})  # nothing of it is loaded: nothing changes, no error
    assert r.ok and not r.modified and r.text.startswith("0 tools removed: none.")
    assert env.turns[0].removed == 2

    strict = MemToolEnv(_session([(A, {"year": 2020})]), MemToolParams(remove_rule="strict"))
    strict.execute(SEARCH, {"keywords": [_kw(A)]})
    loaded = list(strict.loaded)
    for names, message in [([SEARCH, loaded[0]], "Search_Tools cannot be removed"), ([B, loaded[0]], "not loaded")]:
        r = strict.execute(REMOVE, {"tool_names": names})
        assert not r.ok and not r.modified and message in r.text and strict.loaded == loaded


@pytest.mark.parametrize("count_management", [True, False])
def test_limit_rule_adds_then_errs_in_autonomous_mode(count_management):
    """The paper: T <- T ∪ S, then "Hit L limit, remove tools." when |T| > L (|T| with the 2 management tools)."""
    env = MemToolEnv(_session([(A, {"year": 2020})]), MemToolParams(limit=7, count_management=count_management))
    assert env.execute(SEARCH, {"keywords": [_kw(A)]}).ok  # |T| = 7 (or 5): within the limit
    r = env.execute(SEARCH, {"keywords": [_kw(B)]})
    count = 12 if count_management else 10
    assert not r.ok and r.modified and r.text.startswith("Error: Hit 7 limit, remove tools. 5 tools added: " + B)
    assert r.text.endswith(f"Tool count: {count}.") and len(env.loaded) == 10  # the tools stay: past the limit
    assert env.turns[0].breaches == 1 and f"Tool count: {count} (limit 7" in env.render()[0]["content"]
    env.execute(REMOVE, {"tool_names": env.loaded[:8]})
    # 2 + 5 catalogue tools: |T| = 9 > 7 with the management tools, 7 without
    assert env.execute(SEARCH, {"keywords": [_kw(C)]}).ok is (not count_management)
    assert len(env.loaded) == 7 and env.turns[0].breaches == (2 if count_management else 1)


def test_limit_rule_refuse():
    env = MemToolEnv(_session([(A, {"year": 2020})]), MemToolParams(limit=7, limit_rule="refuse",
                                                                     count_management=False))
    assert env.execute(SEARCH, {"keywords": [_kw(A)]}).ok
    r = env.execute(SEARCH, {"keywords": [_kw(B)]})
    assert not r.ok and not r.modified and r.text.startswith("Error: Hit 7 limit, remove tools.")
    assert len(env.loaded) == 5 and env.turns[0].breaches == 1
    env.execute(REMOVE, {"tool_names": env.loaded[1:]})
    assert env.execute(SEARCH, {"keywords": [_kw(B)]}).ok and len(env.loaded) == 6


def test_workflow_reprune_loop_until_within_the_limit_or_error():
    """Algorithm 2: after the search, while |T| > L: R <- LLM_prune (the model's plain-text reply); R empty: error."""
    env = MemToolEnv(_session([(A, {"year": 2020})], [(C, {"year": 2021})]), MemToolParams(mode="workflow", limit=7))
    assert env.on_answer(f"{_kw(A)}, {_kw(B)}") is True  # the search step: 10 tools, over 7
    loaded = list(env.loaded)
    assert env.phase == "reprune" and env.tools == [] and len(loaded) == 10
    assert env.render()[-1]["content"] == "10 tools added: " + ", ".join(loaded) + ". Tool count: 10.\n\n" + \
        REPRUNE_STEP.format(count=10, limit=7, names=", ".join(loaded))
    assert env.on_answer(f"Remove {loaded[5]} and {loaded[6]}, Search_Tools, get_nothing") is True  # 8: again
    assert env.phase == "reprune" and len(env.loaded) == 8
    assert env.render()[-1]["content"].startswith("2 tools removed: ") and "tool count 8 is over the limit 7" in \
        env.render()[-1]["content"]
    assert env.on_answer(loaded[7]) is True  # 7: within the limit, the agent answers
    assert env.phase == "agent" and _names(env) == env.loaded and len(env.loaded) == 7
    assert env.render()[-1]["content"] == ANSWER_STEP.format(outcome=f"1 tools removed: {loaded[7]}. Tool count: 7.")
    assert env.turns[0].removed == 3 and env.turns[0].breaches == 0
    assert env.execute(A, {"year": 2020}).ok and env.on_answer("Answer: " + env.task["answer"][0][0]) is True
    # request 2: prune (none), search C (12 tools), a re-prune reply naming nothing loaded: Raise Error("T > L")
    assert env.phase == "prune" and env.on_answer("none") is True and env.phase == "search"
    assert env.on_answer(_kw(C)) is True and env.phase == "reprune" and len(env.loaded) == 12
    assert env.on_answer("none of them") is False  # the request fails; it was the last one
    assert env.replies[-1] == "Error: the tool count 12 is over the limit 7." and env.turns[1].breaches == 1
    assert env.score(None) == 0.5 and [t["completed"] for t in env.info()["turns"]] == [True, False]


def test_hybrid_reprune_after_the_agents_search():
    """Algorithm 3: the agent's Search_Tools passes the limit (|T| counts Search_Tools); prune steps follow."""
    env = MemToolEnv(_session([(A, {"year": 2020})]), MemToolParams(mode="hybrid", limit=8))
    assert _names(env) == [SEARCH] and env.execute(SEARCH, {"keywords": [_kw(A)]}).ok  # |T| = 6
    r = env.execute(SEARCH, {"keywords": [_kw(B)]})  # |T| = 11 > 8
    assert r.ok and r.modified and r.text.endswith(REPRUNE_STEP.format(count=11, limit=8, names=", ".join(env.loaded)))
    assert env.phase == "reprune" and env.tools == [] and env.turns[0].breaches == 0
    assert env.execute(A, {"year": 2020}).text.startswith("Error: this step takes a reply in plain text")
    assert env.on_answer(", ".join(env.loaded[5:8])) is True  # |T| = 8
    assert env.phase == "agent" and _names(env)[0] == SEARCH and len(env.loaded) == 7
    assert env.turns[0].removed == 3 and env.turns[0].added == 10


def test_tool_calls_results_and_correctness():
    env = MemToolEnv(_session([(A, {"year": 2020, "quarter": 2}), (B, {"year": 2016})]))
    env.execute(SEARCH, {"keywords": [_kw(A), _kw(B)]})
    cat = catalogue()
    r = env.execute(A, {"year": 2020, "quarter": 2})
    assert r.ok and not r.modified and r.text == cat[A].result(2020, 2)
    assert env.execute(B, {"year": 2017}).ok  # a real value, but not the one asked for
    for bad in [{"year": 2030}, {"year": "2016"}, {"year": 2016, "quarter": 5}, {"year": 2016, "month": 1}]:
        assert env.execute(B, bad).text.startswith("Error:")
    assert env.execute(C, {"year": 2016}).text.startswith("Error: \"" + C + "\" is not in your tool set")
    turn = env.turns[0]
    assert (turn.calls, turn.correct_calls, turn.expected, turn.expected_called) == (7, 1, 2, 2)


def _answer(env: MemToolEnv, k: int) -> str:
    return "Answer: " + ", ".join(env.task["answer"][k])


def test_autonomous_session_moves_on_request_by_request_and_truncates_history():
    env = MemToolEnv(_session([(A, {"year": 2020})], [(B, {"year": 2021})], [(C, {"year": 2022})]),
                     MemToolParams(history_turns=1))
    env.execute(SEARCH, {"keywords": [_kw(A)]})
    env.append({"role": "assistant", "content": "calls"})
    env.append({"role": "tool", "content": "results"})
    assert env.on_answer(_answer(env, 0)) is True
    shown = env.render()
    assert shown[-1] == {"role": "user", "content": "Request 2 of 3: hand-made request 1"}
    assert [m["role"] for m in shown] == ["system", "user", "assistant", "tool", "user"]  # request 1 in full
    assert env.on_answer("I do not know") is True
    shown = env.render()
    assert [m["content"] for m in shown[1:]] == ["Request 2 of 3: hand-made request 1",
                                                 "Request 3 of 3: hand-made request 2"]  # request 1 left the window
    assert "Earlier requests" not in shown[0]["content"] and env.original() == shown
    assert env.on_answer(_answer(env, 2)) is False and env.phase == "done"
    assert env.score(None) == pytest.approx(2 / 3)
    assert [t["completed"] for t in env.info()["turns"]] == [True, False, True]
    assert [t["loaded"] for t in env.info()["turns"]] == [5, 5, 5] and env.info()["requests"] == 3


def test_history_digest_and_policy_summary():
    session = _session([(A, {"year": 2020})], [(B, {"year": 2021})], [(C, {"year": 2022})])
    digest = MemToolEnv(session, MemToolParams(history="digest", history_turns=1, digest_turns=1))
    digest.on_answer(_answer(digest, 0))
    digest.on_answer("I do not know")
    line = "Earlier requests (digest):\n- Request 1 of 3: hand-made request 0 You replied: Answer: "
    assert line in digest.render()[0]["content"]

    env = MemToolEnv(session, MemToolParams(mode="hybrid", history="summarize", history_turns=1))

    def reply(text: str) -> bool:  # as the loop does: the completion joins the messages, then on_answer
        env.append({"role": "assistant", "content": text})
        return env.on_answer(text)

    assert reply(_answer(env, 0)) is True and env.phase == "agent"  # nothing leaves the window yet
    assert reply("I do not know") is True  # request 1 leaves: the policy summarizes first
    shown = env.render()
    assert env.phase == "summarize" and env.tools == [] and shown[-1] == {"role": "user", "content": SUMMARY_STEP}
    assert [m["content"] for m in shown[1:-1]] == ["Request 1 of 3: hand-made request 0", _answer(env, 0),
                                                   "Request 2 of 3: hand-made request 1", "I do not know"]
    assert reply("  Asked for a revenue; found 1.0.  ") is True
    shown = env.render()
    assert env.phase == "agent" and shown[0]["content"].count("Summary of earlier requests:\nAsked for a revenue; "
                                                               "found 1.0.\n\nTool count: 1") == 1
    assert [m["content"] for m in shown[1:]] == ["Request 2 of 3: hand-made request 1", "I do not know",
                                                 "Request 3 of 3: hand-made request 2"]
    assert len(env.turns) == 3 and reply(_answer(env, 2)) is False and env.score(None) == pytest.approx(2 / 3)


def test_workflow_steps():
    session = _session([(A, {"year": 2020})], [(B, {"year": 2021})])
    wf = MemToolEnv(session, MemToolParams(mode="workflow"))
    assert wf.tools == [] and wf.render()[-1]["content"].endswith(SEARCH_STEP.format(names="none"))
    assert wf.execute("get_x", {}).text.startswith("Error: this step takes a reply in plain text")
    assert wf.on_answer(f"Keywords: {_kw(A)}, none") is True
    assert _names(wf) == wf.loaded and len(wf.loaded) == 5 and A in wf.loaded  # no management tool
    assert wf.render()[-1]["content"].startswith("5 tools added: " + A)
    assert wf.execute(A, {"year": 2020}).ok and wf.on_answer(_answer(wf, 0)) is True
    prune = wf.render()[-1]["content"]
    assert prune.startswith("Request 2 of 2") and prune.endswith(PRUNE_STEP.format(names=", ".join(wf.loaded)))
    assert wf.tools == [] and wf.on_answer(f"{wf.loaded[1]}, {wf.loaded[2]}, Search_Tools, nothing_else") is True
    assert len(wf.loaded) == 3 and wf.turns[1].removed == 2
    assert wf.render()[-1]["content"].startswith("2 tools removed") and wf.phase == "search"
    assert wf.on_answer("none") is True and wf.phase == "agent" and len(wf.loaded) == 3

    hy = MemToolEnv(session, MemToolParams(mode="hybrid"))
    assert _names(hy) == [SEARCH]  # nothing loaded: no prune step
    hy.execute(SEARCH, {"keywords": [_kw(A)]})
    removal = hy.execute(REMOVE, {"tool_names": [A]})
    assert removal.text == "Error: Remove_Tools is not in your tool set in hybrid mode."
    assert hy.turns[0].calls == 0  # a management tool call is not a call of the catalogue
    assert hy.on_answer(_answer(hy, 0)) is True and hy.phase == "prune" and hy.tools == []
    assert hy.on_answer("none") is True and hy.phase == "agent" and _names(hy)[0] == SEARCH
    assert hy.render()[-1]["content"].startswith("No tools removed. Now answer the request")


def test_bad_config_and_task():
    for params in [{"mode": "manual"}, {"limit": 0}, {"history_turns": -1}, {"loaded_tools_penalty": -0.1},
                   {"limit_rule": "clip"}, {"remove_rule": "lenient"}, {"history": "forget"}, {"digest_turns": 0},
                   {"count_management": "yes"}, {"judge_url": "http://x/v1"}, {"summary_model": "m"},
                   {"summary_url": "http://x/v1", "summary_model": "m"}]:
        with pytest.raises(ValueError):
            MemToolParams(**params)
    with pytest.raises(ValueError, match="runs 'memtool' tasks"):
        MemToolEnv(tasks.generate("babilong", 1, 0)[0])


# ---- metrics (eq. 1-5) on hand-computed sessions ----

def _turns(*rows) -> list[dict]:
    """Turn records from (A added, R removed, N loaded at the end) rows, every request completed and correct."""
    return [{"added": a, "removed": r, "loaded": n, "calls": 1, "correct_calls": 1, "expected": 1,
             "expected_called": 1, "breaches": 0, "completed": True, "judged": None} for a, r, n in rows]


TURNS = _turns((5, 0, 5), (0, 2, 3), (6, 1, 8), (1, 1, 8), (0, 6, 2), (0, 0, 2))


def test_removal_ratios_eq1_eq2_and_the_clipped_variant():
    assert removal_ratio(TURNS) == 10 / 12
    # eq. 2: windows t = 3..6 of (ΣR, ΣA): (3, 11), (4, 7), (8, 7), (7, 1): a plain mean, > 1 allowed
    assert window_removal_ratios(TURNS) == [3 / 11, 4 / 7, 8 / 7, 7.0]
    assert avg_removal_ratio_3t(TURNS) == pytest.approx((3 / 11 + 4 / 7 + 8 / 7 + 7) / 4)
    assert window_removal_ratios(TURNS, "clipped") == [3 / 11, 4 / 7, 1.0, 1.0]
    assert window_removal_ratios(TURNS[:2], "clipped") == [2 / 5] and math.isnan(avg_removal_ratio_3t(TURNS[:2]))
    quiet = _turns((4, 0, 4), (0, 0, 4), (0, 0, 4), (0, 0, 4))  # a window that adds nothing counts 0
    assert window_removal_ratios(quiet) == [0.0, 0.0] and window_removal_ratios(quiet, "clipped") == [0.0]


def test_residuals_eq3_next_three_turns_after_each_peak():
    # N = 5, 3, 8, 8, 2, 2: peaks at turns 1 and 3 (the plateau 8, 8 peaks at its first turn)
    assert peak_residuals(TURNS) == [pytest.approx(19 / 3), 4] and avg_residual_3t(TURNS) == pytest.approx(31 / 6)
    late = _turns((4, 0, 4), (0, 3, 1), (5, 0, 6), (0, 4, 2))  # N = 4, 1, 6, 2: the peak at turn 3 has 1 turn after
    assert peak_residuals(late) == [3] and peak_residuals(late, "upto3") == [3, 2]
    assert math.isnan(avg_residual_3t(_turns((4, 0, 4), (1, 0, 5))))  # loaded, but no peak with 3 turns after


def _traj(env: MemToolEnv, mode="autonomous", **kw) -> SimpleNamespace:
    return SimpleNamespace(info=env.info(), score=env.score(None), format_errors=0, stop_reason="answer",
                           num_tool_calls=kw.get("calls", 0), reward=0.0, rollout_id="r", task="memtool")


def test_a_session_that_adds_nothing():
    env = MemToolEnv(_session([(A, {"year": 2020})], [(B, {"year": 2021})], [(C, {"year": 2022})]))
    for k in range(3):
        env.on_answer("I cannot tell.")
    turns = env.info()["turns"]
    assert math.isnan(removal_ratio(turns))  # eq. 1: nothing added, nothing to divide
    assert avg_removal_ratio_3t(turns) == 0.0 and math.isnan(avg_removal_ratio_3t(turns, "clipped"))
    assert avg_residual_3t(turns) == 0.0  # nothing ever loaded: nothing remains (Table 2's GPT-4.1 Nano row)
    s = summarize([_traj(env)])["autonomous"]
    assert (s["avg_removal_ratio_3t"], s["avg_residual_3t"], s["tool_correctness"], s["task_completion"]) == \
        (0.0, 0.0, 0.0, 0.0)
    assert s["ci"]["task_completion"] == list(wilson(0, 3)) and s["sessions"] == 1 and s["requests"] == 3


def test_a_session_that_passes_the_limit():
    """5 requests, limit 12 (|T| with the 2 management tools): request 3's search passes it, the agent removes."""
    env = MemToolEnv(_session([(A, {"year": 2020})], [(B, {"year": 2021})], [(C, {"year": 2022})],
                              [(C, {"year": 2023})], [(C, {"year": 2016, "quarter": 1})]), MemToolParams(limit=12))
    env.execute(SEARCH, {"keywords": [_kw(A)]})
    env.execute(A, {"year": 2020})
    env.on_answer(_answer(env, 0))  # N1 = 5, completed, correct
    env.execute(SEARCH, {"keywords": [_kw(B)]})  # |T| = 12: at the limit, allowed
    env.execute(B, {"year": 2019})  # the right tool, the wrong year
    env.on_answer("I do not know")  # N2 = 10
    r = env.execute(SEARCH, {"keywords": [_kw(C)]})  # |T| = 17 > 12
    assert r.text.startswith("Error: Hit 12 limit, remove tools.") and len(env.loaded) == 15
    env.execute(REMOVE, {"tool_names": env.loaded[:10]})
    env.execute(C, {"year": 2022})
    env.on_answer(_answer(env, 2))  # N3 = 5
    env.execute(C, {"year": 2023})
    env.on_answer(_answer(env, 3))  # N4 = 5
    assert env.on_answer("no idea") is False  # N5 = 5, no call
    turns = env.info()["turns"]
    assert [(t["added"], t["removed"], t["loaded"]) for t in turns] == [(5, 0, 5), (5, 0, 10), (5, 10, 5), (0, 0, 5),
                                                                        (0, 0, 5)]
    assert removal_ratio(turns) == 10 / 15  # eq. 1
    assert avg_removal_ratio_3t(turns) == pytest.approx((10 / 15 + 10 / 10 + 10 / 5) / 3)  # eq. 2: 11/9
    assert avg_residual_3t(turns) == 5.0  # eq. 3: one peak (turn 2: 10), then 5, 5, 5
    s = summarize([_traj(env)])["autonomous"]
    assert s["task_completion"] == 3 / 5  # eq. 4: exact check per request
    assert s["tool_correctness"] == 4 / 5  # eq. 5 (names, per request): requests 1-4 called their tool, 5 did not
    assert s["tool_correctness_calls"] == 3 / 4  # the calls variant: request 2's call had the wrong year
    assert s["limit_breaches"] == 1 and s["loaded_max"] == 10 and s["removal_ratio"] == 10 / 15
    assert s["ci"]["task_completion"] == list(wilson(3, 5)) and s["ci"]["tool_correctness"] == list(wilson(4, 5))
    lo, hi = s["ci"]["avg_removal_ratio_3t"]
    assert lo <= 11 / 9 <= hi and s["ci"]["avg_residual_3t"] == [5.0, 5.0]
    cfg = RewardConfig()
    assert session_reward(SimpleNamespace(info={"turns": turns}, score=0.6, format_errors=0, stop_reason="answer"),
                          cfg) == -1.0  # a limit error costs the reward
    table = format_table({"autonomous": s})
    assert table.splitlines()[0] == ("| Mode | Avg Removal Ratio 3T | Avg Residual 3T | Tool Correctness | "
                                     "Task Completion | Sessions |")
    assert "| autonomous | 1.222 [" in table and table.endswith("| 1 × 5 |")


def test_session_reward():
    cfg = RewardConfig()
    traj = SimpleNamespace(info={"turns": TURNS}, score=0.5, format_errors=0, stop_reason="answer")
    assert session_reward(traj, cfg) == 0.5
    assert session_reward(traj, cfg, loaded_tools_penalty=0.03) == pytest.approx(0.5 - 0.03 * 28 / 6)
    assert session_reward(SimpleNamespace(**{**vars(traj), "format_errors": 1}), cfg) == -1.0
    assert session_reward(SimpleNamespace(**{**vars(traj), "stop_reason": "max_tool_calls"}), cfg) == -1.0
    capped = [*TURNS[:-1], {**TURNS[-1], "capped": "max_context_tokens"}]  # the session went on past it
    assert session_reward(SimpleNamespace(**{**vars(traj), "info": {"turns": capped}}), cfg) == -1.0


def test_llm_judge_and_endpoint_summary_over_http(fmt, monkeypatch):
    """An OpenAI-compatible endpoint (this project's server, a text engine behind it) judges each reply (eq. 4)
    and writes the history summary."""
    from sculptor_rl.engines import Completion
    from sculptor_rl.serve import ServeConfig, Server, bind, build_app

    seen = []

    class Grader:  # the endpoint's model: 8/10 for a reply with a number, else 1; a summary names the requests
        max_model_len = 4096

        def generate(self, requests):
            out = []
            for r in requests:
                user = r.messages[-1]["content"]
                seen.append(user)
                if "Output:" in user:
                    out.append(Completion(text="8" if re.search(r"Output: .*\d", user) else "1"))
                else:
                    out.append(Completion(text=f"SUMMARY of {user.count('Request ')} requests"))
            return out

    monkeypatch.setenv("OPENAI_API_KEY", "k")
    cfg = ServeConfig(environment="full", api_key="k")
    with Server(build_app(Grader(), fmt, cfg, "grader"), bind("127.0.0.1", 0), log_level="warning") as server:
        params = MemToolParams(history="summarize", history_turns=1, summary_url=server.url, summary_model="grader",
                               judge_url=server.url, judge_model="grader")
        env = MemToolEnv(_session([(A, {"year": 2020})], [(B, {"year": 2021})], [(C, {"year": 2022})]), params)
        assert env.on_answer(_answer(env, 0)) and env.on_answer("no idea")
        assert env.phase == "agent" and "Summary of earlier requests:\nSUMMARY of 1 requests" in env.render()[0]["content"]
        assert env.on_answer(_answer(env, 2)) is False
    assert [t["judged"] for t in env.info()["turns"]] == [0.8, 0.1, 0.8]
    assert any(f"Expected answer: {env.task['answer'][1][0]}" in u for u in seen)
    s = summarize([_traj(env)])["autonomous"]
    assert s["judged"] and s["task_completion"] == pytest.approx(1.7 / 3)  # the judge's scores, not the exact 2/3
    assert judge_score("Score: 7/10") == 0.7 and judge_score("12") == 1.0 and judge_score("none") == 0.0


def test_plot_of_loaded_tools(tmp_path):
    trajs = [SimpleNamespace(info={"mode": mode, "turns": TURNS}) for mode in ("autonomous", "workflow")]
    path = plot_loaded_tools(trajs, tmp_path / "plots" / "loaded.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
