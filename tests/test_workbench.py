"""The WorkBench-style sandbox (sculptor_rl.envs.memtoolagent.sandbox) and the memtoolagent environment: every tool on its
database (good and bad arguments), the outcome check, the task generator, the metrics, the env with memory, the
scripted teacher through the real agent loop, and the importers on small files in the published shapes."""

from __future__ import annotations

import json

import pytest

from sculptor_rl.memory import MemoryStore
from sculptor_rl.envs.memtoolagent.entry import make_entry
from sculptor_rl.envs.tasks import generate, render_answer, score
from sculptor_rl.envs.memtoolagent import metrics
from sculptor_rl.envs.memtoolagent.sandbox import TOOLS, Sandbox, WorkbenchError, outcome_correct, replay, tool_schemas
from sculptor_rl.envs.memtoolagent.tasks import DOMAINS

TEAM_MEMBER = Sandbox().db["project_management"][0]["assigned_to_email"]  # WorkBench takes only the team's
# (tool, good arguments, what the good call changes: (table, row-count change) or None for a read, bad arguments)
CALLS = [
    ("company_directory.find_email_address", {"name": "raj"}, None, {"name": ""}),
    ("calendar.get_event_information_by_id", {"event_id": "00000000", "field": "event_name"}, None,
     {"event_id": "00000000", "field": "colour"}),
    ("calendar.search_events", {"query": "sofia", "time_min": "2023-11-20 00:00:00"}, None,
     {"time_min": "next week"}),
    ("calendar.create_event", {"event_name": "Sync", "participant_email": "raj.patel@atlas.com",
                               "event_start": "2023-12-01 10:00:00", "duration": 30}, ("calendar", 1),
     {"event_name": "Sync", "participant_email": "raj.patel@atlas.com", "event_start": "2023-12-01 10:00"}),
    ("calendar.delete_event", {"event_id": "00000000"}, ("calendar", -1), {"event_id": "99999999"}),
    ("calendar.update_event", {"event_id": "00000000", "field": "duration", "new_value": "45"}, ("calendar", 0),
     {"event_id": "99999999", "field": "duration", "new_value": "45"}),
    ("email.get_email_information_by_id", {"email_id": "00000000", "field": "subject"}, None,
     {"email_id": "00000000"}),
    ("email.search_emails", {"query": "homepage", "date_min": "2023-10-01"}, None, {"date_min": "October"}),
    ("email.send_email", {"recipient": "raj.patel@atlas.com", "subject": "Hi", "body": "Hello"}, ("email", 1),
     {"recipient": "Raj", "subject": "Hi", "body": "Hello"}),
    ("email.delete_email", {"email_id": "00000000"}, ("email", -1), {"email_id": "0"}),
    ("email.forward_email", {"email_id": "00000000", "recipient": "raj.patel@atlas.com"}, ("email", 1),
     {"email_id": "00000000", "to": "raj.patel@atlas.com"}),
    ("email.reply_email", {"email_id": "00000000", "body": "Thanks"}, ("email", 1), {"email_id": "00000000"}),
    ("analytics.get_visitor_information_by_id", {"visitor_id": "0000"}, None, {"visitor_id": "abcd"}),
    ("analytics.create_plot", {"time_min": "2023-11-01", "time_max": "2023-11-30", "value_to_plot": "total_visits",
                               "plot_type": "line"}, ("plots", 1),
     {"time_min": "2023-11-01", "time_max": "2023-11-30", "value_to_plot": "total_visits", "plot_type": "pie"}),
    ("analytics.total_visits_count", {"time_min": "2023-11-01", "time_max": "2023-11-30"}, None,
     {"time_min": ["2023-11-01"]}),
    ("analytics.engaged_users_count", {"time_min": "2023-11-01"}, None, {"time_min": {"year": 2023}}),
    ("analytics.traffic_source_count", {"traffic_source": "direct"}, None, {"source": "direct"}),
    ("analytics.get_average_session_duration", {"time_max": "2023-10-15"}, None, {"time_max": ["2023-10-15"]}),
    ("project_management.get_task_information_by_id", {"task_id": "00000000", "field": "board"}, None,
     {"task_id": "00000077", "field": "board"}),
    ("project_management.search_tasks", {"task_name": "login"}, None, {}),
    ("project_management.create_task", {"task_name": "T", "assigned_to_email": TEAM_MEMBER.upper(),
                                        "list_name": "Backlog", "due_date": "2023-12-10", "board": "Design"},
     ("project_management", 1), {"task_name": "T", "assigned_to_email": TEAM_MEMBER,
                                 "list_name": "Someday", "due_date": "2023-12-10", "board": "Design"}),
    ("project_management.delete_task", {"task_id": "00000000"}, ("project_management", -1), {}),
    ("project_management.update_task", {"task_id": "00000000", "field": "list_name", "new_value": "Completed"},
     ("project_management", 0), {"task_id": "00000000", "field": "assigned_to_email",
                                 "new_value": "stranger@atlas.com"}),
    ("customer_relationship_manager.search_customers", {"customer_name": "dakota"}, None, {}),
    ("customer_relationship_manager.update_customer", {"customer_id": "00000000", "field": "status",
                                                       "new_value": "Won"}, ("customer_relationship_manager", 0),
     {"customer_id": "00000000", "field": "status", "new_value": "Happy"}),
    ("customer_relationship_manager.add_customer", {"customer_name": "Kim Ward", "assigned_to_email":
                                                    "raj.patel@atlas.com", "status": "Lead"},
     ("customer_relationship_manager", 1), {"customer_name": "Kim Ward", "status": "Lead"}),
    ("customer_relationship_manager.delete_customer", {"customer_id": "00000000"},
     ("customer_relationship_manager", -1), {"customer_id": 7}),
]


def test_every_tool_on_its_database_good_and_bad_arguments():
    assert sorted(c[0] for c in CALLS) == sorted(TOOLS) and len(TOOLS) == 27
    for name, good, change, bad in CALLS:
        box = Sandbox()
        before = box.state()
        with pytest.raises(WorkbenchError) as error:
            box.call(name, bad)
        assert str(error.value) and box.state() == before, name  # a bad call changes nothing
        text = box.call(name, good)
        assert text and not text.startswith("Error"), name
        if change is None:
            assert box.state() == before, name
        else:
            table, delta = change
            assert len(box.db[table]) == len(before[table]["rows"]) + delta, name
            assert box.state() != before, name
    with pytest.raises(WorkbenchError, match="unknown tool"):
        Sandbox().call("calendar.create_meeting", {})
    with pytest.raises(WorkbenchError, match="has no argument 'when'"):
        Sandbox().call("calendar.search_events", {"when": "today"})
    with pytest.raises(WorkbenchError, match="not valid JSON"):
        Sandbox().call("calendar.search_events", "{not json")


def test_tool_results_follow_the_database():
    box = Sandbox()
    assert json.loads(box.call("company_directory.find_email_address", {"name": "raj"})) == ["raj.patel@atlas.com"]
    new_id = box.call("calendar.create_event", {"event_name": "Sync", "participant_email": "raj.patel@atlas.com",
                                                "event_start": "2023-12-01 10:00:00", "duration": "30"})
    info = json.loads(box.call("calendar.get_event_information_by_id", {"event_id": new_id, "field": "event_name"}))
    assert info == {"event_name": "Sync"}
    box.call("email.reply_email", {"email_id": "00000000", "body": "Thanks"})
    sent = box.db["email"][-1]
    original = box.db["email"][0]
    assert (sent["inbox/outbox"], sent["sender/recipient"]) == ("outbox", original["sender/recipient"])
    assert sent["subject"] == original["subject"] and sent["email_id"] == str(len(box.db["email"]) - 1)  # WorkBench's
    counts = json.loads(box.call("analytics.total_visits_count", {"time_min": "2023-11-01", "time_max": "2023-11-30"}))
    assert sum(counts.values()) == sum("2023-11-01" <= v["date_of_visit"] <= "2023-11-30" for v in box.db["analytics"])


def test_outcome_check():
    gold = [{"name": "customer_relationship_manager.search_customers", "arguments": {"customer_name": "Dakota"}},
            {"name": "customer_relationship_manager.update_customer",
             "arguments": {"customer_id": "00000000", "field": "status", "new_value": "Won"}}]
    assert outcome_correct(gold, gold)
    assert outcome_correct(gold, gold[1:])  # reads change nothing
    assert outcome_correct(gold, [gold[1], gold[1]])  # the same write twice: the same state
    assert not outcome_correct(gold, gold[:1])  # the write is missing
    wrong = {**gold[1], "arguments": {**gold[1]["arguments"], "new_value": "Lost"}}
    assert not outcome_correct(gold, [wrong])
    assert not outcome_correct(gold, [*gold, {"name": "calendar.delete_event", "arguments": {"event_id": "00000001"}}])
    _, results = replay([{"name": "calendar.delete_event", "arguments": {}}])
    assert results[0][0] is False and results[0][1] == "Error: Event ID not provided."


def test_generator_domains_splits_and_gold():
    train, test = generate("workbench", 40, 0), generate("workbench", 40, 0, split="test")
    assert train == generate("workbench", 40, 0)  # deterministic
    assert {r["meta"]["domain"] for r in train} == set(DOMAINS)
    assert not {r["messages"][0]["content"] for r in train} & {r["messages"][0]["content"] for r in test}
    for r in train + test:
        assert score(r, render_answer(r)) == 1.0, r["id"]  # the gold calls reach the gold outcome
    # nested: a multi-domain task's write uses what an earlier call returned (the assignee found by the search)
    multi = [r for r in train if r["meta"]["template"] == "multi_domain.multi_task_email"][0]
    found = json.loads(replay(multi["answer"][:1])[1][0][1])
    assert multi["answer"][1]["arguments"]["recipient"] == found[0]["assigned_to_email"]
    conditional = [r for r in train + test if r["meta"]["template"] == "analytics.an_conditional_plot"]
    assert {len(r["answer"]) for r in conditional} == {1, 2}  # both branches of "if so, plot"
    with pytest.raises(ValueError, match="unknown domain"):
        generate("workbench", 2, 0, domains="sales")


def test_metrics():
    gold = [{"name": "a", "arguments": {"x": "1"}}, {"name": "b", "arguments": {"y": "2"}}]
    assert metrics.tool_f1(gold, gold) == metrics.param_f1(gold, gold) == 1.0 and metrics.full_match(gold, gold)
    assert not metrics.full_match(gold[::-1], gold) and metrics.tool_f1(gold[::-1], gold) == 1.0
    half = [{"name": "a", "arguments": {"x": "9"}}]
    assert metrics.tool_f1(half, gold) == pytest.approx(2 / 3) and metrics.param_f1(half, gold) == 0.0
    out = metrics.summarize([{"domain": "email", "outcome": True, "calls": gold, "gold": gold},
                             {"domain": "calendar", "outcome": False, "calls": half, "gold": gold}])
    assert out["outcome"]["rate"] == 0.5 and out["outcome_by_domain"]["email"]["rate"] == 1.0
    assert out["full_sequence_match"]["n"] == 2 and len(out["outcome"]["ci"]) == 2
    # NESTFUL: a reference written `$var1.result$` (NESTFUL's files) or `$var_1.result$` (the env's), a number as
    # 100 or 100.0, is one value: the metrics agree with the outcome (nestful.same_sequence)
    from sculptor_rl.envs.memtoolagent import nestful

    gold = [{"name": "multiply", "arguments": {"arg_0": 100.0, "arg_1": 10}, "label": "var1"},
            {"name": "divide", "arguments": {"arg_0": "$var1.result$", "arg_1": 4}, "label": "var2"}]
    pred = [{"name": "multiply", "arguments": {"arg_0": 100, "arg_1": 10}, "label": "$var_1"},
            {"name": "divide", "arguments": {"arg_0": "$var_1.result$", "arg_1": 4}, "label": "$var_2"}]
    assert metrics.full_match(pred, gold) and metrics.param_f1(pred, gold) == 1.0 and nestful.same_sequence(pred, gold)
    off = [pred[0], {**pred[1], "arguments": {"arg_0": "$var_2.result$", "arg_1": 4.5}}]
    assert not metrics.full_match(off, gold) and not nestful.same_sequence(off, gold)
    assert metrics.param_f1(off, gold) == pytest.approx(0.5)


def _env(task, **params):
    from sculptor_rl.envs import make_env_factory

    return make_env_factory("memtoolagent", params)(task, 0)


def test_env_memory_in_the_system_prompt(tmp_path):
    task = generate("workbench", 5, 0, split="test", domains="customer_relationship_manager")[1]
    path = tmp_path / "memory.jsonl"
    store = MemoryStore([make_entry("We're moving Jordan Lee to Nadia. Can you make that change in the CRM?",
                                    task["answer"], 0, "Search the customer first; use the directory's email."),
                         make_entry("Make a bar chart of total visits since 2023-11-01.", [], 1)])
    store.save(path)
    none = _env(task, memory=str(path), retrieval="none").render()[0]["content"]
    assert "similar queries" not in none and none.startswith("Today's date is Thursday, 2023-11-30")
    top = _env(task, memory=str(path), retrieval="topk", k=1).render()[0]["content"]
    assert "Here are similar queries, their executions, and user feedback:" in top
    assert "Jordan Lee" in top and "bar chart" not in top and "Reflection: Search the customer first" in top
    plain = _env(task, memory=str(path), retrieval="topk", k=1, reflections=False).render()[0]["content"]
    assert "Jordan Lee" in plain and "Reflection" not in plain and "User feedback: Incorrect" in plain
    assert _env(task, memory=str(path), retrieval="dynamic").info()["retrieved"]  # short memory: top-k fallback
    with pytest.raises(ValueError, match="unknown retrieval"):
        _env(task, retrieval="all")


def test_env_outcome_and_bad_calls():
    task = generate("workbench", 3, 0, split="test", domains="calendar")[0]
    env = _env(task)
    assert len(env.tools) == 27 and env.tools == tool_schemas()
    bad = env.execute("calendar.delete_event", {"event_id": "12345678"})
    assert not bad.ok and bad.text == "Error: Event not found."
    assert env.score(None) == 0.0  # nothing done yet
    for call in task["answer"]:
        assert env.execute(call["name"], json.dumps(call["arguments"])).ok
    assert env.score("Done.") == 1.0
    info = env.info()
    assert info["outcome"] and info["calls"] == task["answer"] and info["domain"] == "calendar"


def test_teacher_solves_every_template_through_the_loop(fmt):
    from sculptor_rl.agent.loop import LoopConfig, run_rollouts
    from sculptor_rl.envs import env_class, make_env_factory
    from sculptor_rl.envs.teacher import ScriptedTeacher

    tasks = generate("workbench", 19, 0, split="test") + generate("nestful", 4, 0, split="test")  # every template
    trajs = run_rollouts(tasks, ScriptedTeacher(tasks), fmt, make_env_factory("memtoolagent", {"toolset": "domain"}),
                         LoopConfig(), progress=False)
    assert [t.score for t in trajs] == [1.0] * len(tasks) and {t.reward for t in trajs} == {1.0}
    summary = env_class("memtoolagent").summarize(trajs, "no_memory")
    assert summary["workbench"]["outcome"]["rate"] == 1.0 and summary["nestful"]["full_sequence_match"]["rate"] == 1.0
    assert set(summary["workbench"]["outcome_by_domain"]) == set(DOMAINS) and summary["nestful"]["outcome"]["n"] == 4
    assert trajs[-1].answer == f"The answer is {trajs[-1].info['results'][-1].split('= ')[1]}."


def _write_csv(path, rows):
    import csv

    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)


def test_import_workbench_csv_and_its_database(tmp_path):
    from sculptor_rl.envs.memtoolagent.importers import import_workbench
    from sculptor_rl.envs.memtoolagent.sandbox import load_database

    qa = tmp_path / "queries_and_answers"
    qa.mkdir()
    rows = [["Rename the 'Sync' meeting to 'Kickoff'",
             "['calendar.search_events.func(query=\"Sync\")', "
             "'calendar.update_event.func(event_id=\"00000055\", field=\"event_name\", new_value=\"Kickoff\")']",
             "rename", "['calendar']"],
            ["Cancel my meeting with nobody, if any", "[]", "cancel", "['calendar']"]]
    _write_csv(qa / "calendar_queries_and_answers.csv", [["query", "answer", "template", "domains"], *rows])
    db = tmp_path / "processed"
    db.mkdir()
    (db / "calendar_events.csv").write_text("event_id,event_name,participant_email,event_start,duration\n"
                                            "00000055,Sync,raj.patel@atlas.com,2023-12-01 10:00:00,30\n")
    (db / "emails.csv").write_text("email_id,inbox/outbox,sender/recipient,subject,sent_datetime,body\n"
                                   "00000001,inbox,raj.patel@atlas.com,Hello,2023-11-01 09:00:00,Hi\n")
    records = import_workbench(qa, database=db)
    assert [r["meta"]["domain"] for r in records] == ["calendar", "calendar"] and records[1]["answer"] == []
    assert records[0]["answer"][1] == {"name": "calendar.update_event", "arguments": {
        "event_id": "00000055", "field": "event_name", "new_value": "Kickoff"}}
    assert load_database(db)["email"][0]["sender/recipient"] == "raj.patel@atlas.com"
    assert score(records[0], render_answer(records[0])) == 1.0  # runs on WorkBench's database: the id exists
    assert score(records[0], "") == 0.0 and score(records[1], "") == 1.0
    env = _env(records[0])
    assert env.execute("calendar.update_event", {"event_id": "00000055", "field": "event_name",
                                                 "new_value": "Kickoff"}).ok and env.score("Done.") == 1.0
    # bare function names (the paper's Figure 7) and bad rows
    from sculptor_rl.envs.memtoolagent.importers import parse_call

    assert parse_call('search_customers.func(customer_name="Dakota Wilson")')["name"] == \
        "customer_relationship_manager.search_customers"
    bad = tmp_path / "email_queries_and_answers.csv"
    _write_csv(bad, [["query", "answer"], ["x", "['email.send_email.func(__import__(\"os\"))']"]])
    with pytest.raises(ValueError, match="row 2: positional arguments"):
        import_workbench(bad)
    _write_csv(bad, [["query", "answer"], ["x", "['os.system.func(cmd=\"ls\")']"]])
    with pytest.raises(ValueError, match="row 2: unknown WorkBench tool 'os.system'"):
        import_workbench(bad)


def test_import_nestful_and_nested_execution(tmp_path):
    from sculptor_rl.envs.memtoolagent import nestful
    from sculptor_rl.envs.memtoolagent.importers import import_nestful

    path = tmp_path / "nestful.json"
    calls = [{"name": "multiply", "label": "$var_1", "arguments": {"arg_0": 100, "arg_1": 10}},
             {"name": "divide", "label": "$var_2", "arguments": {"arg_0": "$var_1.result$", "arg_1": 4}}]
    path.write_text(json.dumps([{"sample_id": "m1", "input": "What is 100 times 10 divided by 4?",
                                 "output": json.dumps(calls), "gold_answer": 250, "tools": "[]"},
                                {"sample_id": "m2", "input": "Same with labels as NESTFUL writes them",
                                 "output": [{**c, "label": c["label"].strip("$").replace("_", "")} for c in calls],
                                 "gold_answer": 250.0, "tools": []}]))
    a, b = import_nestful(path)
    assert a["id"] == "nestful-m1" and a["meta"]["gold_answer"] == 250 and a["answer"][1]["label"] == "$var_2"
    assert nestful.execute(a["answer"]) == nestful.execute(b["answer"]) == 250.0
    assert score(a, json.dumps(calls)) == 1.0 and score(a, json.dumps(calls[:1])) == 0.0
    env = _env(a)
    assert [t["function"]["name"] for t in env.tools] == list(nestful.FUNCTIONS)
    assert env.execute("multiply", {"arg_0": 100, "arg_1": 10}).text == "$var_1 = 1000"
    wrong = env.execute("divide", {"arg_0": "$var_7.result$", "arg_1": 4})
    assert not wrong.ok and "refers to no earlier call" in wrong.text
    assert env.execute("divide", {"arg_0": "$var_1.result$", "arg_1": 4}).text == "$var_2 = 250"
    assert env.score("250") == 1.0 and env.info()["calls"] == a["answer"]
    path.write_text(json.dumps([{"input": "x", "output": "[{\"arguments\": {}}]"}]))
    with pytest.raises(ValueError, match="item 0: output must be"):
        import_nestful(path)


class _Lazy:
    """A policy that answers at once without a call: every task needing a write fails (feedback 0)."""

    max_model_len = None

    def generate(self, requests):
        from sculptor_rl.engines import Completion

        return [Completion(text="Done.") for _ in requests]


def test_driver_rounds_frozen_snapshots_and_reflections(fmt, tmp_path):
    from sculptor_rl.crossepisode import DriverConfig, run_rounds
    from sculptor_rl.envs.teacher import ScriptedTeacher

    tasks = generate("workbench", 6, 0, domains="customer_relationship_manager,project_management")
    cfg = DriverConfig(memory=str(tmp_path / "memory.jsonl"), out=str(tmp_path), rounds=2, num_generations=2,
                       environment_params={"retrieval": "topk", "k": 3, "toolset": "domain"})
    store, rounds = run_rounds(tasks, _Lazy(), fmt, cfg)
    assert [len(r) for r in rounds] == [6, 6] and len(store) == 6
    assert all(e["feedback"] == 0 and e["reflection"].startswith("Automatic critique, no LLM") for e in store.entries)
    assert MemoryStore.load(tmp_path / "memory.jsonl").entries == store.entries  # saved after every round
    first = (tmp_path / "round_0.memory.jsonl").read_text()
    assert first == "" and len((tmp_path / "round_1.memory.jsonl").read_text().splitlines()) == 3
    assert all(not t.info["retrieved"] for t in rounds[0])  # round 0: empty memory
    for a, b in zip(rounds[1][::2], rounds[1][1::2]):  # the two rollouts of a group saw the same memory
        assert a.task_id == b.task_id and a.info["retrieved"] == b.info["retrieved"]
        assert a.messages[0] == b.messages[0]
    assert any(t.info["retrieved"] for t in rounds[1])
    # a second driver run goes on from the saved store; the teacher succeeds: entries without reflection
    cfg2 = DriverConfig(memory=cfg.memory, out=str(tmp_path / "again"), rounds=1)
    store2, _ = run_rounds(tasks[:2], ScriptedTeacher(tasks), fmt, cfg2)
    assert len(store2) == 8 and [e["feedback"] for e in store2.entries[6:]] == [1, 1]
    assert all(e["reflection"] is None for e in store2.entries[6:])
    assert (tmp_path / "round_0.memory.jsonl").read_text() == first  # a snapshot file never changes


@pytest.mark.slow
def test_embedded_model_in_rounds_with_its_own_reflections(vllm_engine, fmt, tmp_path):
    """The driver on the real engine: the policy's rollouts, its own reflections on its failures, one snapshot per
    group, and samples whose trained tokens are the engine's."""
    from sculptor_rl.agent.loop import LoopConfig
    from sculptor_rl.crossepisode import DriverConfig, run_rounds
    from sculptor_rl.envs.llm import policy_llm
    from sculptor_rl.samples import build_samples

    tasks = generate("workbench", 4, 0, domains="calendar,email")
    cfg = DriverConfig(memory=str(tmp_path / "memory.jsonl"), out=str(tmp_path), rounds=2, num_generations=2,
                       environment_params={"retrieval": "topk", "k": 2, "toolset": "domain"},
                       loop=LoopConfig(max_tool_calls=3, max_new_tokens=48))
    store, rounds = run_rounds(tasks, vllm_engine, fmt, cfg, policy_llm(vllm_engine, fmt, max_new_tokens=32))
    assert len(store) == 4 and [len(r) for r in rounds] == [4, 4]
    for entry in store.entries:
        assert (entry["reflection"] is None) == (entry["feedback"] == 1)
        assert entry["reflection"] is None or not entry["reflection"].startswith("Automatic critique")
    for a, b in zip(rounds[1][::2], rounds[1][1::2]):
        assert a.task_id == b.task_id and a.messages[0] == b.messages[0]
    for traj in rounds[0] + rounds[1]:
        assert traj.score in (0.0, 1.0) and traj.info["env"] == "memtoolagent"
        assert sum(sum(s.loss_mask) for s in build_samples(traj)) == traj.generated_tokens


def test_cli_generate_import_and_memory_build(tmp_path, capsys):
    from sculptor_rl.cli import main

    tasks = tmp_path / "tasks.jsonl"
    main(["data", "generate", "--task", "workbench", "--num", "4", "--param", "split=train", "--out", str(tasks)])
    main(["memory", "build", "--engine", "scripted", "--reflect", "rules", "--data", str(tasks), "--memory",
          str(tmp_path / "memory.jsonl"), "--out", str(tmp_path / "rounds"), "--rounds", "2"])
    assert "outcome accuracy per round: 1.00, 1.00" in capsys.readouterr().out
    assert [e["feedback"] for e in MemoryStore.load(tmp_path / "memory.jsonl").entries] == [1, 1, 1, 1]
    source = tmp_path / "n.jsonl"
    add = {"name": "add", "label": "$var_1", "arguments": {"arg_0": 1, "arg_1": 2}}
    source.write_text(json.dumps({"sample_id": 7, "input": "1 + 2?", "gold_answer": 3, "output": [add]}))
    main(["data", "import", "--format", "nestful", "--in", str(source), "--out", str(tmp_path / "nestful.jsonl")])
    (record,) = [json.loads(line) for line in (tmp_path / "nestful.jsonl").read_text().splitlines()]
    assert record["id"] == "nestful-7" and score(record, render_answer(record)) == 1.0
