"""MemTool: the catalogue, sessions, the environment (management tools, limit, modes, history) and the metrics,
on hand-made sessions with known numbers. Rollouts through the agent loop are in test_memtool_rollouts.py."""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import pytest

from sculptor_rl import tasks
from sculptor_rl.envs import RewardConfig
from sculptor_rl.envs.memtool import PRUNE_STEP, SEARCH_STEP, MemToolConfig, MemToolEnv
from sculptor_rl.memtool import catalogue, sessions
from sculptor_rl.memtool.catalogue import METRICS, NUM_COMPANIES
from sculptor_rl.memtool.metrics import (peak_residuals, plot_loaded_tools, removal_ratio, session_reward,
                                         summarize, window_removal_ratios)
from sculptor_rl.tasks.io import load_tasks


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
    tasks.write_jsonl(records, tmp_path / "s.jsonl")
    assert load_tasks(tmp_path / "s.jsonl") == records
    assert "memtool" not in tasks.FAMILIES  # the long-context families the ACM env, eval and pipeline iterate


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
    assert _names(env) == ["search_tools", "remove_tools"]
    assert [m["role"] for m in env.render()] == ["system", "user"]
    assert "You have 0 tools loaded" in env.render()[0]["content"]
    r = env.execute("search_tools", {"keywords": [_kw(A), _kw(B)]})
    assert r.ok and r.modified and r.text.startswith("Loaded 10 tools: " + A)
    assert len(env.loaded) == 10 and _names(env)[2:] == env.loaded and B in env.loaded
    assert "You have 10 tools loaded (limit 128)" in env.render()[0]["content"]
    again = env.execute("search_tools", '{"keywords": ["' + _kw(A) + '"]}')  # JSON text arguments work too
    assert again.ok and not again.modified and again.text.startswith("No new tools")
    r = env.execute("remove_tools", {"tool_names": [B, A]})
    assert r.ok and r.modified and r.text.startswith("Removed 2 tools") and len(env.loaded) == 8
    before = list(env.loaded)
    for bad, message in [({"tool_names": ["search_tools", env.loaded[0]]}, "search_tools cannot be removed"),
                         ({"tool_names": [A]}, "not loaded"), ({"tool_names": []}, "non-empty array"),
                         ({"names": [A]}, "unknown argument"), ("{oops", "not valid JSON")]:
        r = env.execute("remove_tools", bad)
        assert not r.ok and not r.modified and r.text.startswith("Error:") and message in r.text
    assert env.loaded == before  # a bad call changes nothing
    assert env.turns[0].added == 10 and env.turns[0].removed == 2


def test_limit_breach_is_refused_and_counted():
    env = MemToolEnv(_session([(A, {"year": 2020})]), MemToolConfig(limit=7))
    assert env.execute("search_tools", {"keywords": [_kw(A)]}).ok
    r = env.execute("search_tools", {"keywords": [_kw(B)]})
    assert not r.ok and not r.modified and r.text.startswith("Error: Hit 7 limit, remove tools.")
    assert len(env.loaded) == 5 and env.turns[0].breaches == 1
    env.execute("remove_tools", {"tool_names": env.loaded[1:]})
    assert env.execute("search_tools", {"keywords": [_kw(B)]}).ok and len(env.loaded) == 6


def test_tool_calls_results_and_correctness():
    env = MemToolEnv(_session([(A, {"year": 2020, "quarter": 2}), (B, {"year": 2016})]))
    env.execute("search_tools", {"keywords": [_kw(A), _kw(B)]})
    cat = catalogue()
    r = env.execute(A, {"year": 2020, "quarter": 2})
    assert r.ok and not r.modified and r.text == cat[A].result(2020, 2)
    assert env.execute(B, {"year": 2017}).ok  # a real value, but not the one asked for
    for bad in [{"year": 2030}, {"year": "2016"}, {"year": 2016, "quarter": 5}, {"year": 2016, "month": 1}]:
        assert env.execute(B, bad).text.startswith("Error:")
    assert env.execute(C, {"year": 2016}).text.startswith("Error: \"" + C + "\" is not in your tool set")
    assert (env.turns[0].calls, env.turns[0].correct_calls) == (7, 1)


def _answer(env: MemToolEnv, k: int) -> str:
    return "Answer: " + ", ".join(env.task["answer"][k])


def test_autonomous_session_moves_on_request_by_request():
    env = MemToolEnv(_session([(A, {"year": 2020})], [(B, {"year": 2021})], [(C, {"year": 2022})]),
                     MemToolConfig(history_turns=1, digest_turns=1))
    env.execute("search_tools", {"keywords": [_kw(A)]})
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
    digest = "Earlier requests (digest):\n- Request 1 of 3: hand-made request 0 You replied: Answer: "
    assert digest in shown[0]["content"]
    assert env.original() == shown
    assert env.on_answer(_answer(env, 2)) is False and env.phase == "done"
    assert env.score(None) == pytest.approx(2 / 3)
    assert [t["completed"] for t in env.info()["turns"]] == [True, False, True]
    assert [t["loaded"] for t in env.info()["turns"]] == [5, 5, 5]


def test_workflow_and_hybrid_steps():
    session = _session([(A, {"year": 2020})], [(B, {"year": 2021})])
    wf = MemToolEnv(session, MemToolConfig(mode="workflow"))
    assert wf.tools == [] and wf.render()[-1]["content"].endswith(SEARCH_STEP.format(names="none"))
    assert wf.execute("get_x", {}).text.startswith("Error: this workflow step takes a reply in plain text")
    assert wf.on_answer(f"Keywords: {_kw(A)}, none") is True
    assert _names(wf) == wf.loaded and len(wf.loaded) == 5 and A in wf.loaded  # no management tool
    assert wf.render()[-1]["content"].startswith("Loaded 5 tools: " + A)
    assert wf.execute(A, {"year": 2020}).ok and wf.on_answer(_answer(wf, 0)) is True
    prune = wf.render()[-1]["content"]
    assert prune.startswith("Request 2 of 2") and prune.endswith(PRUNE_STEP.format(names=", ".join(wf.loaded)))
    assert wf.tools == [] and wf.on_answer(f"{wf.loaded[1]}, {wf.loaded[2]}, search_tools, nothing_else") is True
    assert len(wf.loaded) == 3 and wf.turns[1].removed == 2
    assert wf.render()[-1]["content"].startswith("Removed 2 tools") and wf.phase == "search"
    assert wf.on_answer("none") is True and wf.phase == "agent" and len(wf.loaded) == 3

    hy = MemToolEnv(session, MemToolConfig(mode="hybrid"))
    assert _names(hy) == ["search_tools"]  # nothing loaded: no prune step
    hy.execute("search_tools", {"keywords": [_kw(A)]})
    removal = hy.execute("remove_tools", {"tool_names": [A]})
    assert removal.text == "Error: remove_tools is not in your tool set in hybrid mode."
    assert hy.turns[0].calls == 0  # a management tool call is not a call of the catalogue
    assert hy.on_answer(_answer(hy, 0)) is True and hy.phase == "prune" and hy.tools == []
    assert hy.on_answer("none") is True and hy.phase == "agent" and _names(hy)[0] == "search_tools"
    assert hy.render()[-1]["content"].startswith("No tools removed. Now answer the request")


def test_bad_config_and_task():
    for params in [{"mode": "manual"}, {"limit": 0}, {"history_turns": -1}, {"loaded_tools_penalty": -0.1}]:
        with pytest.raises(ValueError):
            MemToolConfig(**params)
    with pytest.raises(ValueError, match="runs 'memtool' tasks"):
        MemToolEnv(tasks.generate("babilong", 1, 0)[0])


# ---- metrics ----

# A, R and N per turn: N goes 5, 3, 8, 8, 2, 2.
TURNS = [{"added": a, "removed": r, "loaded": n, "calls": c, "correct_calls": cc, "breaches": 0, "completed": True}
         for a, r, n, c, cc in [(5, 0, 5, 2, 2), (0, 2, 3, 2, 1), (6, 1, 8, 3, 3), (1, 1, 8, 1, 0), (0, 6, 2, 2, 2),
                                (0, 0, 2, 0, 0)]]


def test_metrics_on_a_hand_made_session():
    assert removal_ratio(TURNS) == 10 / 12
    assert window_removal_ratios(TURNS) == [3 / 11, 4 / 7, 1.0, 1.0]  # windows removing more count as 1
    assert peak_residuals(TURNS) == [pytest.approx(19 / 3), 4]  # peaks at turns 1 and 3 (8, 8 is one plateau)
    assert window_removal_ratios(TURNS[:2]) == [2 / 5]  # fewer turns than a window: one window
    assert peak_residuals([{"loaded": 4}]) == [] and math.isnan(removal_ratio([{"added": 0, "removed": 0}]))
    traj = SimpleNamespace(info={"env": "memtool", "mode": "autonomous", "turns": TURNS}, score=0.5, format_errors=0,
                           stop_reason="answer", num_tool_calls=12, reward=0.4, rollout_id="r")
    s = summarize([traj, traj])["autonomous"]
    assert s["tool_correctness"] == 8 / 10 and s["removal_ratio"] == 10 / 12 and s["task_completion"] == 0.5
    assert s["removal_ratio_3turn"] == pytest.approx((3 / 11 + 4 / 7 + 2) / 4)
    assert s["residual_after_peaks"] == pytest.approx(31 / 6) and s["loaded_max"] == 8
    assert s["loaded_mean"] == pytest.approx(28 / 6) and s["sessions"] == 2


def test_session_reward():
    cfg = RewardConfig()
    traj = SimpleNamespace(info={"turns": TURNS}, score=0.5, format_errors=0, stop_reason="answer")
    assert session_reward(traj, cfg) == 0.5
    assert session_reward(traj, cfg, loaded_tools_penalty=0.03) == pytest.approx(0.5 - 0.03 * 28 / 6)
    assert session_reward(SimpleNamespace(**{**vars(traj), "format_errors": 1}), cfg) == -1.0
    assert session_reward(SimpleNamespace(**{**vars(traj), "stop_reason": "max_tool_calls"}), cfg) == -1.0
    breach = [{**TURNS[0], "breaches": 1}, *TURNS[1:]]
    assert session_reward(SimpleNamespace(**{**vars(traj), "info": {"turns": breach}}), cfg) == -1.0


def test_plot_of_loaded_tools(tmp_path):
    trajs = [SimpleNamespace(info={"mode": mode, "turns": TURNS}) for mode in ("autonomous", "workflow")]
    path = plot_loaded_tools(trajs, tmp_path / "plots" / "loaded.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
