"""The HTTP server over real uvicorn with the official `openai` client, on a text engine that plays fixed policies.

The policies depend only on the messages each request's loop shows the engine, so a completion that reached
the wrong request (cross-talk in the batcher or a shared workspace) shows up as a wrong answer.
The vLLM runs are in test_serve_vllm.py.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from sculptor_rl.acm import TOOL_SCHEMAS
from sculptor_rl.toolcalls import format_tool_call
from sculptor_rl.engines import Completion
from sculptor_rl.engines.base import Request
from sculptor_rl.config import parse_command
from sculptor_rl.serve import MicroBatcher, ServeConfig, Server, bind, build_app
from sculptor_rl.serve.batcher import Cancelled
from sculptor_rl.envs.acm import ACM_SYSTEM_PROMPT as SYSTEM_PROMPT

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
KEY = "test-key"
MODEL = "tiny-policy"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}


def policy(messages: list[dict]) -> str:
    """The fixed policy. ACM mode: search the context for the code word, then answer with what the search
    found. 'weather': call the client's get_weather tool, then report its result. 'loop': search forever."""
    user = next(m["content"] for m in messages if m["role"] == "user")
    if "weather" in user:
        if messages[-1]["role"] == "tool":
            return f"It is {messages[-1]['content']} there."
        return "Let me check.\n" + format_tool_call("get_weather", {"city": "Paris"})
    if "loop" in user:
        return format_tool_call("search_context", {"query": "loop"})
    if messages[-1]["role"] != "tool":
        return format_tool_call("search_context", {"query": "the code word is"})
    found = re.search(r"the code word is»? (\w+)", messages[-1]["content"], re.IGNORECASE)
    return f"The code word is {found.group(1) if found else 'unknown'}."


class PolicyEngine:
    """A text engine: each completion is `policy(rendered messages)`; records the size of every batch."""

    def __init__(self, delay: float = 0.0, max_model_len: int = 4096):
        self.delay, self.max_model_len = delay, max_model_len
        self.batches: list[int] = []

    def generate(self, requests):
        time.sleep(self.delay)  # an engine call takes time: concurrent requests pile up meanwhile
        self.batches.append(len(requests))
        return [Completion(text=policy(r.messages)) for r in requests]


def start(engine, fmt, **overrides):
    cfg = ServeConfig(**{"api_key": KEY, "max_new_tokens": 64, "max_request_bytes": 64 * 1024, "max_messages": 16,
                         **overrides})
    return Server(build_app(engine, fmt, cfg, MODEL), bind("127.0.0.1", 0), log_level="warning")


@pytest.fixture(scope="module")
def engine():
    return PolicyEngine(delay=0.05)


@pytest.fixture(scope="module")
def server(engine, fmt):
    with start(engine, fmt) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=30)


def document(word: str, lines: int = 30) -> str:
    filler = [f"Line {i}: the {['quiet', 'narrow', 'dusty'][i % 3]} lantern crossed the river." for i in range(lines)]
    filler.insert(lines // 2, f"Remember: the code word is {word}.")
    return "Read this log.\n\n" + "\n".join(filler) + "\n\nWhat is the code word?"


def ask(client, word: str, **kw):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": document(word)}], **kw)


def test_models_lists_the_served_model(client):
    (m,) = client.models.list().data
    assert m.id == MODEL and m.owned_by == "sculptor-rl"


def test_agent_answer_comes_from_its_own_workspace_with_trace(client, fmt):
    resp = ask(client, "Zanzibar", user="alice", extra_body={"sculptor": {"return_trace": True}})  # `user`: ignored
    choice = resp.choices[0]
    assert choice.message.content == "The code word is Zanzibar." and choice.finish_reason == "stop"
    assert choice.message.tool_calls is None
    trace = resp.sculptor_trace
    assert trace["stop_reason"] == "answer" and trace["tool_calls"] == 1
    (call,) = trace["steps"][0]["calls"]
    assert call["name"] == "search_context" and call["ok"] and "code word is» Zanzibar" in call["result"]
    assert trace["steps"][1]["calls"] == [] and trace["steps"][1]["text"] == choice.message.content
    # the first prompt is the request's messages under the training system prompt, with the ACM tools
    head = fmt.head_ids([{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": document("Zanzibar")}],
                        TOOL_SCHEMAS)
    assert trace["steps"][0]["prompt_tokens"] == len(head)
    assert resp.usage.prompt_tokens == sum(s["prompt_tokens"] for s in trace["steps"])
    assert resp.usage.completion_tokens == sum(s["completion_tokens"] for s in trace["steps"]) > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    assert "sculptor_trace" not in ask(client, "Zanzibar").model_extra  # only on request


def test_client_system_prompt_follows_the_environments(client, fmt):
    """The model always sees the system prompt it was trained with; a client's own system message follows it."""
    resp = client.chat.completions.create(model=MODEL, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": document("Kiwi")}],
        extra_body={"sculptor": {"return_trace": True}})
    assert resp.choices[0].message.content == "The code word is Kiwi."
    head = fmt.head_ids([{"role": "system", "content": f"{SYSTEM_PROMPT}\n\nBe brief."},
                         {"role": "user", "content": document("Kiwi")}], TOOL_SCHEMAS)
    assert resp.sculptor_trace["steps"][0]["prompt_tokens"] == len(head)


def test_streamed_answer_in_openai_chunks(client):
    chunks = list(ask(client, "Quokka", stream=True, stream_options={"include_usage": True},
                      extra_body={"sculptor": {"return_trace": True}}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "The code word is Quokka."
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 5  # word by word
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0].choices[0].finish_reason == "stop"
    assert finish[0].sculptor_trace["steps"][-1]["text"] == text
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens > 0
    assert len({c.id for c in chunks}) == 1


def test_passthrough_returns_tool_calls_and_takes_tool_results(client, fmt):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    resp = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER])
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me check."
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert resp.usage.prompt_tokens == len(fmt.head_ids(messages, [WEATHER]))  # rendered with the client's tools
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    follow = client.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER])
    assert follow.choices[0].message.content == "It is sunny, 21 C there." and follow.choices[0].finish_reason == "stop"
    # streamed: the calls arrive as tool_calls deltas
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages[:1], tools=[WEATHER], stream=True))
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert [d.function.name for d in deltas] == ["get_weather"] and chunks[-1].choices[0].finish_reason == "tool_calls"
    # tool_choice "none": the text comes back as it is
    plain = client.chat.completions.create(model=MODEL, messages=messages[:1], tools=[WEATHER], tool_choice="none")
    assert plain.choices[0].message.tool_calls is None and "<tool_call>" in plain.choices[0].message.content


def test_tool_call_cap_stops_the_loop(client):
    resp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "loop please"}],
                                          extra_body={"sculptor": {"return_trace": True, "max_tool_calls": 3}})
    assert resp.choices[0].finish_reason == "length" and resp.choices[0].message.content == ""
    assert resp.sculptor_trace["stop_reason"] == "max_tool_calls" and resp.sculptor_trace["tool_calls"] == 3


def test_auth_is_required_on_every_route(server, client):
    wrong = OpenAI(base_url=server.url, api_key="wrong-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        wrong.models.list()
    assert e.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        wrong.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    for headers in ({}, {"Authorization": "Basic " + KEY}, {"Authorization": "Bearer"}):
        assert httpx.get(server.url + "/models", headers=headers).status_code == 401
        assert httpx.post(server.url + "/chat/completions", json=body, headers=headers).status_code == 401
        assert httpx.get(server.url + "/nowhere", headers=headers).status_code == 401
    assert client.models.list().data  # the right key passes


BAD_BODIES = {
    "invalid JSON": (b'{"model": "tiny-policy", "messages": [', 400, None),
    "not an object": (b"[1, 2]", 400, None),
    "missing messages": ({"model": MODEL}, 400, "messages"),
    "messages not a list": ({"model": MODEL, "messages": "hello"}, 400, "messages"),
    "no messages": ({"model": MODEL, "messages": []}, 400, "messages"),
    "unknown role": ({"model": MODEL, "messages": [{"role": "robot", "content": "hi"}]}, 400, "messages.0.role"),
    "content a number": ({"model": MODEL, "messages": [{"role": "user", "content": 7}]}, 400, "messages.0.content"),
    "no user content": ({"model": MODEL, "messages": [{"role": "user"}]}, 400, "messages.0.content"),
    "image part": ({"model": MODEL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}, 400, "messages.0.content"),
    "temperature a string": ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"},
                             400, "temperature"),
    "stream a string": ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": "yes"}, 400,
                        "stream"),
    "max_tokens 0": ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, 400,
                     "max_tokens"),
    "max_tokens over the cap": ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 65},
                                400, "max_tokens"),
    "n=2": ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "n": 2}, 400, "n"),
    "max_tool_calls over the cap": ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                     "sculptor": {"max_tool_calls": 21}}, 400, "sculptor.max_tool_calls"),
    "tool message without tools": ({"model": MODEL, "messages": [{"role": "user", "content": "hi"},
                                                                 {"role": "tool", "content": "x"}]}, 400, "messages.1"),
    "too many messages": ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}] * 17}, 400, "messages"),
    "stop sequences": ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stop": ["\n"]}, 400, "stop"),
    "tool_choice required": ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER],
                              "tool_choice": "required"}, 400, "tool_choice"),
    "unknown model": ({"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}, 404, "model"),
    "context too long": ({"model": MODEL, "messages": [{"role": "user", "content": "lantern " * 5000}]}, 400,
                         "messages"),
    "too large": ({"model": MODEL, "messages": [{"role": "user", "content": "x" * 70_000}]}, 413, None),
}


@pytest.mark.parametrize("case", list(BAD_BODIES))
def test_bad_requests_get_openai_errors(server, case):
    body, status, param = BAD_BODIES[case]
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(server.url + "/chat/completions", content=content, timeout=30,
                   headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["param"] == param
    if case == "context too long":
        assert err["code"] == "context_length_exceeded"


def test_unknown_routes_and_methods_are_json_errors(server):
    auth = {"Authorization": f"Bearer {KEY}"}
    r = httpx.get(server.url + "/completions", headers=auth)
    assert r.status_code == 404 and r.json()["error"]["message"]
    r = httpx.get(server.url + "/chat/completions", headers=auth)
    assert r.status_code == 405 and r.json()["error"]["message"]


def test_concurrent_requests_are_batched_without_cross_talk(client, engine):
    words = [f"Word{i:02d}x{i * 7919 % 1000:03d}" for i in range(32)]
    engine.batches.clear()
    with ThreadPoolExecutor(32) as pool:
        resps = list(pool.map(lambda w: ask(client, w, extra_body={"sculptor": {"return_trace": True}}), words))
    for word, resp in zip(words, resps):
        assert resp.choices[0].message.content == f"The code word is {word}."
        results = [c["result"] for s in resp.sculptor_trace["steps"] for c in s["calls"]]
        assert word in results[0] and not any(w in results[0] for w in words if w != word)
    assert sum(engine.batches) == 64 and max(engine.batches) > 1  # two steps each, shared engine calls
    assert ask(client, "After").choices[0].message.content == "The code word is After."


def test_timeouts_stop_the_request_and_its_loop(fmt):
    engine = PolicyEngine(delay=0.4)
    with start(engine, fmt, request_timeout=0.6) as s:
        client = OpenAI(base_url=s.url, api_key=KEY, max_retries=0, timeout=30)
        t0 = time.monotonic()
        with pytest.raises(openai.APIStatusError) as e:
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "loop"}])
        assert e.value.status_code == 504 and e.value.body["code"] == "timeout" and time.monotonic() - t0 < 3
        with pytest.raises(openai.APIError, match="did not finish"):  # streamed: an error event
            list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "loop"}],
                                                stream=True))
        time.sleep(1.0)
        calls = len(engine.batches)
        time.sleep(1.0)
        assert len(engine.batches) == calls  # the abandoned loops stopped calling the engine


def test_busy_server_answers_429(fmt):
    with start(PolicyEngine(delay=0.5), fmt, max_concurrent_requests=2) as s:
        client = OpenAI(base_url=s.url, api_key=KEY, max_retries=0, timeout=30)
        with ThreadPoolExecutor(2) as pool:
            slow = [pool.submit(ask, client, f"W{i}") for i in range(2)]
            time.sleep(0.3)
            with pytest.raises(openai.RateLimitError):
                ask(client, "W3")
            assert all(f.result().choices[0].message.content == f"The code word is W{i}." for i, f in enumerate(slow))
        assert ask(client, "W4").choices[0].message.content == "The code word is W4."  # slots were freed


def test_batcher_isolates_errors_and_cancellations():
    class Flaky:
        max_model_len = None

        def generate(self, requests):
            if any(r.prompt_ids == [0] for r in requests):
                raise RuntimeError("engine fell over")
            return [Completion(text=str(r.prompt_ids)) for r in requests]

    def req(ids):
        return Request(prompt_ids=ids, messages=[], max_new_tokens=1)

    batcher = MicroBatcher(Flaky())
    with pytest.raises(RuntimeError, match="fell over"):
        batcher.caller().generate([req([0])])
    assert [c.text for c in batcher.caller().generate([req([1]), req([2])])] == ["[1]", "[2]"]  # still serving
    gone = batcher.caller()
    gone.cancelled.set()
    with pytest.raises(Cancelled):
        gone.generate([req([3])])
    batcher.close()
    with pytest.raises(Cancelled):  # a closed batcher leaves no caller waiting
        batcher.caller().generate([req([4])])


def test_serve_config_yaml_and_busy_port(capsys):
    from trl import TrlParser

    from sculptor_rl.cli import main

    for name in ("cpu", "gpu"):
        (cfg,) = TrlParser((ServeConfig,)).parse_args_and_config(["--config", str(CONFIGS / f"acm/serve_{name}.yaml"),
                                                                  "--port", "9001"])
        assert cfg.host == "127.0.0.1" and cfg.port == 9001 and cfg.api_key is None
    cfg = parse_command(ServeConfig, ["--config", str(CONFIGS / "memtool/serve_cpu.yaml"), "--port", "9001"])
    assert cfg.environment == "memtool" and cfg.environment_params["mode"] == "autonomous" and cfg.port == 9001
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(SystemExit):  # before any engine starts
            main(["serve", "--port", str(taken.getsockname()[1])])
        assert "cannot listen" in capsys.readouterr().err


def test_a_slow_body_does_not_hold_the_server(server, client):
    """A client that stops sending mid-body only holds its own connection; others are answered meanwhile."""
    host, port = server.sock.getsockname()[:2]
    with socket.create_connection((host, port)) as raw:
        raw.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
                    + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":")
        done = threading.Event()
        threading.Thread(target=lambda: (ask(client, "Meanwhile"), done.set()), daemon=True).start()
        assert done.wait(10)


def test_a_chunked_body_over_the_limit_is_refused(server):
    def body():  # no Content-Length: the server counts as it reads
        yield b'{"model": "tiny-policy", "messages": [{"role": "user", "content": "'
        yield from (b"x" * 1000 for _ in range(100))
        yield b'"}]}'

    r = httpx.post(server.url + "/chat/completions", content=body(), headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"



def memtool_policy(messages: list[dict], tool: str) -> str:
    """A MemTool session: search `tool`'s company and metric, call the tool it loaded, answer with its result."""
    from sculptor_rl.envs.memtool.teacher import keyword

    last = messages[-1]
    if last["role"] == "user":
        return format_tool_call("Search_Tools", {"keywords": [keyword(tool)]})
    if " tools added: " in last["content"]:
        return format_tool_call(tool, {"year": 2020})
    return f"Answer: {last['content']}"


class MemToolPolicyEngine(PolicyEngine):
    def __init__(self, tool: str):
        super().__init__()
        self.tool = tool

    def generate(self, requests):
        return [Completion(text=memtool_policy(r.messages, self.tool)) for r in requests]


@pytest.fixture(scope="module")
def memtool_tool():
    from sculptor_rl.envs.memtool.catalogue import catalogue

    return catalogue()[catalogue().names[7]]


@pytest.fixture(scope="module")
def memtool_client(fmt, memtool_tool):
    engine = MemToolPolicyEngine(memtool_tool.name)
    with start(engine, fmt, environment="memtool", environment_params='{"mode": "autonomous", "limit": 16}') as s:
        yield OpenAI(base_url=s.url, api_key=KEY, max_retries=0, timeout=30)


def test_memtool_env_serves_a_request_with_its_own_tool_set(memtool_client, memtool_tool, fmt):
    from sculptor_rl.envs.memtool.env import MemToolParams, MemToolEnv

    tool = memtool_tool
    history = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi, ask me about companies."}]
    ask_for = {"role": "user", "content": f"Find the {tool.metric.phrase} of {tool.company.name} in fiscal year 2020."}
    resp = memtool_client.chat.completions.create(model=MODEL, messages=[*history, ask_for],
                                                  extra_body={"sculptor": {"return_trace": True}})
    assert resp.choices[0].message.content == f"Answer: {tool.result(2020)}"
    search, call, answer = resp.sculptor_trace["steps"]
    (s,) = search["calls"]
    assert s["name"] == "Search_Tools" and s["ok"] and s["modified"] and tool.name in s["result"]
    assert call["calls"][0]["name"] == tool.name and call["calls"][0]["ok"] and answer["calls"] == []
    # the first prompt is a session's: the earlier exchange as request 1 of 2, this one as request 2 of 2, under
    # the MemTool system prompt, with only the management tools loaded
    requests = [{"text": "Hello", "calls": []}, {"text": ask_for["content"], "calls": []}]
    env = MemToolEnv({"id": "x", "task": "memtool", "answer": [[], []], "meta": {"requests": requests},
                      "messages": [{"role": "user", "content": "-"}]}, MemToolParams(limit=16))
    env.append(history[1])
    env.on_answer(history[1]["content"])  # autonomous mode: the reply closes request 1 and opens request 2
    assert [t["function"]["name"] for t in env.tools] == ["Search_Tools", "Remove_Tools"]
    assert search["prompt_tokens"] == len(fmt.head_ids(env.render(), env.tools))


def test_memtool_env_refuses_a_conversation_without_a_request(memtool_client):
    with pytest.raises(openai.BadRequestError, match="must end with a user message"):
        memtool_client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"},
                                                                      {"role": "assistant", "content": "Hello"}])


def test_bad_environment_params_fail_before_the_engine_starts(capsys):
    from sculptor_rl.cli import main

    for params, message in (('{"colour": "red"}', "unknown parameter 'colour' of the memtool environment"),
                            ("{mode", "environment_params is not valid JSON")):
        with pytest.raises(SystemExit):
            main(["serve", "--environment", "memtool", "--environment_params", params, "--port", "0"])
        assert message in capsys.readouterr().err


class MemoryPolicyEngine:
    """A text engine that does what the memory in its system prompt shows: the remembered query's call if the
    prompt holds it, else it says so. Records every request's messages."""

    max_model_len = 8192  # a served conversation has no domain: all 27 tool schemas (~4k tokens)

    def __init__(self, query: str, call: dict):
        self.query, self.call, self.seen = query, call, []

    def generate(self, requests):
        self.seen += [r.messages for r in requests]
        out = []
        for r in requests:
            if r.messages[-1]["role"] == "tool":
                out.append(f"Done: {r.messages[-1]['content']}")
            elif self.query in r.messages[0]["content"]:
                out.append(format_tool_call(self.call["name"], self.call["arguments"]))
            else:
                out.append("No memory.")
        return [Completion(text=t) for t in out]


def test_memtoolagent_env_serves_from_a_trained_memory(fmt, tmp_path):
    from sculptor_rl.memory import MemoryStore
    from sculptor_rl.envs.memtoolagent.entry import check_entry, make_entry

    query = "Find the email address of Carlos."
    call = {"name": "company_directory.find_email_address", "arguments": {"name": "Carlos"}}
    store = MemoryStore(check=check_entry)
    store.add(make_entry(query, [call], 1))
    store.save(tmp_path / "memory.jsonl")
    engine = MemoryPolicyEngine(query, call)
    params = json.dumps({"memory": str(tmp_path / "memory.jsonl"), "retrieval": "topk", "k": 1})
    with start(engine, fmt, environment="memtoolagent", environment_params=params) as s:
        client = OpenAI(base_url=s.url, api_key=KEY, max_retries=0, timeout=30)
        similar = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Find the email address of Nia."}],
            extra_body={"sculptor": {"return_trace": True}})
        unrelated = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi there"}])
    # the similar query was shown the remembered execution, ran its call in the sandbox, and answered from it
    (ran,) = similar.sculptor_trace["steps"][0]["calls"]
    assert ran["name"] == call["name"] and ran["ok"] and "carlos" in ran["result"].lower()
    assert similar.choices[0].message.content == f"Done: {ran['result']}"
    assert query in engine.seen[0][0]["content"] and "User feedback: Correct" in engine.seen[0][0]["content"]
    assert unrelated.choices[0].message.content == "No memory."  # no shared word: nothing retrieved


@pytest.mark.parametrize("schedule", ["lockstep", "per-rollout"])
def test_openai_engine_runs_the_loop_on_either_schedule(server, engine, fmt, schedule):
    """The OpenAI-compatible client engine against the server (pass-through mode: the env's tools go with each
    request): both schedules give the policy's rollouts, search then answer."""
    from sculptor_rl.agent.loop import LoopConfig, run_rollouts
    from sculptor_rl.engines.openai_engine import OpenAIEngine
    from sculptor_rl.envs import make_env_factory
    from sculptor_rl.envs.tasks import generate

    tasks = generate("pi_llm", 3, seed=2, keys=2, updates=8)
    openai_engine = OpenAIEngine(MODEL, base_url=server.url, api_key=KEY, max_model_len=4096)
    trajs = run_rollouts(tasks, openai_engine, fmt, make_env_factory("acm"),
                         LoopConfig(max_new_tokens=64, schedule=schedule), num_generations=2, progress=False)
    assert (openai_engine._pool is not None) == (schedule == "per-rollout")  # agenerate's threads ran the calls
    for t in trajs:
        assert [c["name"] for s in t.steps for c in s.calls] == ["search_context"]
        assert t.stop_reason == "answer" and t.answer == "The code word is unknown."
        assert t.steps[1].prompt_ids[: len(t.steps[0].prompt_ids)] == t.steps[0].prompt_ids
