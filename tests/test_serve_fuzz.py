"""The server under a property-based fuzz of request bodies, over real HTTP: every answer is a well-formed OpenAI
error (4xx) or a valid completion, never a 500 or a hang, and afterwards every request slot is free.

Bodies: random JSON values, right-shaped bodies with fields of the wrong type or out of range (huge numbers,
negative n), unicode and lone surrogates, deep nesting, strings near the byte limit, invalid UTF-8 and broken
JSON. Derandomized, so a run in CI sends the same bodies every time.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from sculptor_rl.toolcalls import format_tool_call
from sculptor_rl.engines import Completion
from test_serve import KEY, MODEL, start

SLOTS = 4  # max_concurrent_requests: small, so a slot a bad request kept would show as a 429 afterwards
LIMIT = 256 * 1024  # max_request_bytes
AUTH = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
ERROR_KEYS = {"message", "type", "param", "code"}
FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.large_base_example])


class SearchThenAnswer:
    """Any conversation gets a reply: a search for the start of its last message (so the fuzzed text goes through
    a real tool call in the server's workspace), then an answer quoting the tool result."""

    max_model_len = 4096

    def __init__(self):
        self.delay = 0.0

    def generate(self, requests):
        time.sleep(self.delay)
        return [Completion(text=self.reply(r.messages)) for r in requests]

    @staticmethod
    def reply(messages: list[dict]) -> str:
        last = messages[-1]
        if last["role"] == "tool":
            return "Found: " + last["content"][:40]
        return "Searching.\n" + format_tool_call("search_context", {"query": last["content"][:12] or "x"})


@pytest.fixture(scope="module")
def engine():
    return SearchThenAnswer()


ENVIRONMENTS = {"acm": {}, "memtool": {"mode": "autonomous", "limit": 16}}  # each server's environment params
BODIES_PER_RUN = 600


@pytest.fixture(scope="module", params=list(ENVIRONMENTS))
def server(engine, fmt, request):
    with start(engine, fmt, max_concurrent_requests=SLOTS, max_request_bytes=LIMIT, max_messages=64,
               request_timeout=30, environment=request.param,
               environment_params=json.dumps(ENVIRONMENTS[request.param])) as s:
        yield s


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as c:
        yield c


# ---- strategies ---------------------------------------------------------------------------------------------------

HUGE_INTS = st.sampled_from([10**30, -(10**30), 2**63, 2**64 + 1, -1, 0, 10**4000])
HUGE_FLOATS = st.sampled_from([1e308, -1e308, 5e-324, -0.0, 2.0000001, 1e-300])
NUMBERS = st.one_of(st.integers(), HUGE_INTS, st.floats(allow_nan=False, allow_infinity=False), HUGE_FLOATS)
TEXT = st.one_of(st.text(max_size=40), st.text(st.characters(codec="utf-8"), max_size=40),
                 st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=4),
                 st.sampled_from(["", "\x00", "{{ raise_exception('x') }}", "<tool_call>", "<|im_end|>",
                                  "\u202e\ufeff\U0001f600", "tiny-policy"]))
JSON = st.recursive(st.one_of(st.none(), st.booleans(), NUMBERS, TEXT),
                    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
                    max_leaves=20)

ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool", "robot", "", None])
TOOL = {"type": "function", "function": {"name": "lookup", "description": "look a word up",
                                         "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}


def maybe(strategy, other=JSON):
    """Mostly the right kind of value, sometimes anything."""
    return st.one_of(strategy, strategy, strategy, other)


MESSAGE = st.fixed_dictionaries(
    {"role": maybe(ROLES)},
    optional={"content": maybe(st.one_of(TEXT, st.lists(st.fixed_dictionaries({"type": maybe(st.just("text")),
                                                                                 "text": maybe(TEXT)}), max_size=3))),
              "tool_calls": st.lists(st.fixed_dictionaries({"type": maybe(st.just("function")), "function":
                                                            st.fixed_dictionaries({"name": maybe(TEXT),
                                                                                   "arguments": maybe(TEXT)})}),
                                     max_size=2),
              "tool_call_id": maybe(TEXT)})

CHAT = st.fixed_dictionaries(
    {"model": maybe(st.just(MODEL), TEXT), "messages": maybe(st.lists(MESSAGE, min_size=1, max_size=5))},
    optional={"max_tokens": maybe(NUMBERS), "max_completion_tokens": maybe(NUMBERS),
              "temperature": maybe(NUMBERS), "top_p": maybe(NUMBERS), "n": maybe(NUMBERS), "seed": maybe(NUMBERS),
              "stream": maybe(st.booleans()), "stream_options": maybe(st.fixed_dictionaries(
                  {"include_usage": maybe(st.booleans())})),
              "tools": maybe(st.lists(st.one_of(st.just(TOOL), JSON), max_size=2)),
              "tool_choice": maybe(st.sampled_from(["auto", "none", "required"])),
              "sculptor": maybe(st.fixed_dictionaries({}, optional={"return_trace": maybe(st.booleans()),
                                                                    "max_tool_calls": maybe(NUMBERS)})),
              "stop": JSON, "user": JSON, "metadata": JSON})


def _valid_chat(text: str) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}]}


def _deep(depth: int, inside: str) -> bytes:
    """A valid request whose `metadata` nests `depth` levels (lists or objects)."""
    nest = ("[" * depth + "]" * depth) if inside == "list" else ('{"a":' * depth + "1" + "}" * depth)
    return ('{"model": "tiny-policy", "messages": [{"role": "user", "content": "hi"}], "metadata": ' + nest
            + "}").encode()


RAW = st.one_of(
    st.binary(max_size=200),  # mostly invalid UTF-8 and invalid JSON
    st.builds(lambda b, cut: json.dumps(b).encode()[:cut], CHAT, st.integers(0, 200)),  # truncated JSON
    st.builds(_deep, st.integers(1000, 20_000), st.sampled_from(["list", "object"])),
    st.builds(lambda d: ("[" * d).encode(), st.integers(1000, 50_000)),
    st.builds(lambda n, c: json.dumps(_valid_chat(c * n)).encode(), st.integers(LIMIT // 4, LIMIT - 200),
              st.sampled_from(["x", "é", " lantern"])),  # big, within the byte limit (too long a context: 400)
    st.builds(lambda n: json.dumps(_valid_chat("x" * n)).encode(), st.integers(LIMIT, 2 * LIMIT)),  # over: 413
    st.builds(lambda s: b'{"model": "tiny-policy", "messages": [{"role": "user", "content": "' + s + b'"}]}',
              st.sampled_from([b"\\ud800", b"\\udfff\\ud800", b"\xff\xfe", b"\xed\xa0\x80", b"\\u0000", b"\\x41",
                               b"\t\n", b"\\uZZZZ"])),
)

VALID_CHAT = st.fixed_dictionaries(
    {"model": st.just(MODEL),
     "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "user", "assistant"]),
                                                 "content": TEXT}), min_size=1, max_size=4)
     .map(lambda ms: [*ms, {"role": "user", "content": "Remember: the code word is Lantern."}])},
    optional={"max_tokens": st.integers(1, 64), "temperature": st.floats(0, 2), "top_p": st.floats(0.01, 1),
              "seed": st.integers(-(2**63), 2**63), "stream": st.booleans(),
              "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
              "sculptor": st.fixed_dictionaries({"return_trace": st.booleans(), "max_tool_calls": st.integers(0, 3)}),
              "tools": st.just([TOOL]), "tool_choice": st.sampled_from(["auto", "none"]), "user": TEXT})
# a valid body with one field set to anything: the wrong type, a huge number, unicode, a nested value
ONE_WRONG = st.builds(lambda body, key, value: {**body, key: value}, VALID_CHAT,
                      st.sampled_from(["model", "messages", "max_tokens", "temperature", "top_p", "n", "seed", "stream",
                                       "stream_options", "sculptor", "tools", "tool_choice", "stop", "logprobs"]),
                      st.one_of(TEXT, NUMBERS, JSON))


def _encode(value, ascii: bool) -> bytes:
    """JSON text as a client sends it: escaped, or raw UTF-8 (lone surrogates then make bytes that are not UTF-8)."""
    return json.dumps(value, ensure_ascii=ascii).encode("utf-8", "surrogatepass")


BODIES = st.one_of(
    st.builds(_encode, VALID_CHAT, st.booleans()),
    st.builds(_encode, ONE_WRONG, st.booleans()),
    st.builds(_encode, CHAT, st.booleans()),
    st.builds(_encode, JSON, st.booleans()),
    RAW,
)


# ---- what a well-formed answer is -----------------------------------------------------------------------------------


def assert_openai_answer(r: httpx.Response, stream: bool) -> None:
    assert r.status_code != 500 and r.status_code < 500, r.text[:500]
    if r.status_code == 200 and stream:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line[len("data: "):] for line in r.text.split("\n") if line.startswith("data: ")]
        assert events and events[-1] == "[DONE]", r.text[-300:]
        chunks = [json.loads(e) for e in events[:-1]]
        assert all("error" not in c for c in chunks), chunks
        for c in chunks:
            ChatCompletionChunk.model_validate(c)
        finishes = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
        assert len(finishes) == 1 and finishes[0] in ("stop", "length", "tool_calls")
        return
    assert r.headers["content-type"] == "application/json", r.headers
    body = r.json()
    if r.status_code == 200:
        resp = ChatCompletion.model_validate(body)
        assert resp.object == "chat.completion" and resp.id.startswith("chatcmpl-") and len(resp.choices) == 1
        choice = resp.choices[0]
        assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length", "tool_calls")
        assert (choice.finish_reason == "tool_calls") == bool(choice.message.tool_calls)
        assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens > 0
        return
    assert 400 <= r.status_code < 500, r.status_code
    err = body["error"]
    assert set(err) == ERROR_KEYS and isinstance(err["message"], str) and err["message"], body
    assert isinstance(err["type"], str) and err["type"], body
    assert err["param"] is None or isinstance(err["param"], str)
    assert err["code"] is None or isinstance(err["code"], str)


def _stream_asked(content: bytes) -> bool:
    try:
        body = json.loads(content)
    except (ValueError, RecursionError):
        return False
    return isinstance(body, dict) and body.get("stream") is True


# ---- the tests ------------------------------------------------------------------------------------------------------


def test_the_server_keeps_an_idle_connection_longer_than_clients_do(server):
    """Else a client reusing a connection at the moment the server closes it gets "connection reset by peer" (it
    did, here: httpx and the OpenAI SDK keep idle connections 5 s, as uvicorn did)."""
    assert server.uvicorn.config.timeout_keep_alive > httpx.Limits().keepalive_expiry


def test_fuzzed_chat_bodies_get_an_openai_error_or_a_completion(server, http, engine):
    statuses: list[int] = []

    @settings(FUZZ, max_examples=BODIES_PER_RUN)
    @given(BODIES)
    def post(content: bytes):
        r = http.post("/chat/completions", content=content)
        assert_openai_answer(r, _stream_asked(content))
        statuses.append(r.status_code)

    post()
    assert len(statuses) >= BODIES_PER_RUN >= 500
    # the fuzz reached every kind of answer: completions, validation errors, the size limit, the model check
    assert {200, 400, 404, 413} <= set(statuses), sorted(set(statuses))
    assert statuses.count(200) >= 20
    assert_slots_free(server, http, engine)


def test_fuzzed_requests_on_other_routes_and_methods(server, http, engine):
    sent = []

    @settings(FUZZ, max_examples=80)
    @given(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
           st.sampled_from(["/models", "/chat/completions", "/completions", "/embeddings", "/models/x",
                            "/models/../models", "/chat/completions/"]),
           st.one_of(st.binary(max_size=64), JSON.map(lambda v: json.dumps(v).encode())),
           st.sampled_from([AUTH, {"Authorization": "Bearer wrong"}, {}, {**AUTH, "Content-Type": "text/plain"}]))
    def call(method, path, content, headers):
        r = httpx.request(method, server.url + path, content=content, headers=headers, timeout=30)
        listing = r.request.url.path == "/v1/models" and method == "GET"
        if listing and headers.get("Authorization") == AUTH["Authorization"]:
            assert r.status_code == 200 and r.json()["data"][0]["id"] == MODEL
        elif r.status_code == 307:  # a route with a trailing slash: FastAPI points to the route itself
            assert path.endswith("/") and r.headers["location"] == server.url + path.rstrip("/")
        else:
            assert_openai_answer(r, stream=False)
        sent.append(r.status_code)

    call()
    assert len(sent) >= 50 and {200, 401, 404, 405} <= set(sent), sorted(set(sent))
    assert_slots_free(server, http, engine)


def assert_slots_free(server, http, engine) -> None:
    """A normal request succeeds, then SLOTS requests at once all do: a slot a bad request kept would make one a 429.
    The engine is slowed meanwhile so that they really are in flight together."""
    r = http.post("/chat/completions", json=_valid_chat("Remember: the code word is Lantern."))
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"].startswith("Found: ")
    engine.delay = 0.3
    try:
        with ThreadPoolExecutor(SLOTS) as pool:
            rs = list(pool.map(lambda i: http.post("/chat/completions", json=_valid_chat(f"question {i}")),
                               range(SLOTS)))
    finally:
        engine.delay = 0.0
    assert [r.status_code for r in rs] == [200] * SLOTS, [r.text[:200] for r in rs]


def test_an_engine_error_is_a_500_error_and_frees_the_slot(fmt):
    """Even an exception an asyncio future cannot carry (StopIteration, which a policy's `next()` leaks) ends the
    request with a JSON 500, and its slot is free again (it used to hang the request and keep the slot)."""

    class Leaky(SearchThenAnswer):
        def generate(self, requests):
            if any("boom" in m["content"] for r in requests for m in r.messages):
                return next(iter([]))
            return super().generate(requests)

    engine = Leaky()
    with start(engine, fmt, max_concurrent_requests=1) as s, httpx.Client(base_url=s.url, headers=AUTH,
                                                                          timeout=10) as http:
        for stream in (False, True):
            r = http.post("/chat/completions", json={**_valid_chat("boom"), "stream": stream})
            if stream:  # the stream had started: the error comes as an event, then [DONE]
                assert r.status_code == 200 and '"type": "server_error"' in r.text and r.text.endswith("[DONE]\n\n")
            else:
                assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
        r = http.post("/chat/completions", json=_valid_chat("the code word is Lantern."))
        assert r.status_code == 200  # one slot only: it was freed
