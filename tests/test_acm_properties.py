"""Property-based tests of the ACM workspace invariants (design.md, "The ACM workspace").

A state machine drives random valid and invalid tool calls (and appended assistant/tool messages) on random
conversations and checks after every step: message count/order/roles kept, restoring every fragment gives back
the original text, idempotence, fresh unique ids, bad calls change nothing, search counts like Ctrl+F.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
import re

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from sculptor_rl.acm import CONTEXT_MODIFYING, READ_ONLY, TOOL_SCHEMAS, ToolResult, Workspace

TOOL_NAMES = [s["function"]["name"] for s in TOOL_SCHEMAS]
LISTED_ID = re.compile(
    r"^- ([fs][a-z0-9]{5}):", re.MULTILINE
)  # ids as listed in fragment_context / search_context results
ANY_ID = re.compile(r"\b[fs][a-z0-9]{5}\b")
HEADER = re.compile(r"^Fragmented message (\d+) \(\w+\), chars (\d+)-(\d+)")
FRAGMENT_LINE = re.compile(r"^- (f[a-z0-9]{5}): (\d+) chars", re.MULTILINE)
HIT_LINE = re.compile(r"^- (s[a-z0-9]{5}): message (\d+) \((\w+)\) at char (\d+)", re.MULTILINE)
TOTAL = re.compile(r"^(\d+) match")

# Few distinct words so that markers and queries hit often; "İ" and "ß" change length or form when lowered;
# "aaa" and "x x x" hold overlapping occurrences of "aa" and "x x".
VOCAB = ["alpha", "beta", "Gamma", "key", "val", "fish", "İx", "ß", "x", "the", "a1", "7", "aaa"]
ROLES = ["user", "assistant", "all"]

sentences = st.tuples(
    st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6), st.sampled_from([".", "!", "?", "", ","])
)
lines = st.lists(sentences.map(lambda s: " ".join(s[0]) + s[1]), min_size=1, max_size=3).map(" ".join)
texts = st.lists(lines, max_size=6).map("\n".join)
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "user", "assistant", "system", "tool"]), "content": texts}
)
conversations = st.lists(messages, min_size=1, max_size=5)
junk = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from([10**30, -(10**40), 1e308]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
numbers = st.integers(-3, 2100) | junk


def snapshot(ws: Workspace) -> dict:
    """All of the workspace's state, comparable with ==."""
    return {k: v.getstate() if isinstance(v, random.Random) else copy.deepcopy(v) for k, v in vars(ws).items()}


def lower(text: str) -> str:
    return text.replace("İ", "I").lower()


class ACMMachine(RuleBasedStateMachine):
    @initialize(convo=conversations, seed=st.integers(0, 2**32))
    def setup(self, convo: list[dict], seed: int) -> None:
        self.ws = Workspace(convo, seed=seed)
        self.seed, self.convo = seed, copy.deepcopy(convo)
        self.originals = copy.deepcopy(convo)
        self.fragment_ids: list[str] = []
        self.search_ids: set[str] = set()
        self.log: list[tuple] = []  # everything done, to replay for determinism

    def run(self, name, arguments) -> ToolResult:
        before, view = snapshot(self.ws), self.ws.render()
        result = self.ws.execute(name, arguments)
        self.log.append(("call", name, copy.deepcopy(arguments), result))
        after = self.ws.render()
        event(f"{name if name in TOOL_NAMES else 'unknown tool'}: {'ok' if result.ok else 'error'}")
        assert isinstance(result, ToolResult) and isinstance(result.text, str)
        assert result.ok == (not result.text.startswith("Error:"))
        if not result.ok:
            assert not result.modified and snapshot(self.ws) == before and after == view
        elif name in READ_ONLY:
            assert not result.modified and after == view
        else:
            assert name in CONTEXT_MODIFYING and result.modified == (after != view)
        listed = LISTED_ID.findall(result.text) if result.ok else []
        assert len(set(listed)) == len(listed)
        if name == "fragment_context" and result.ok:
            assert not set(listed) & (set(self.fragment_ids) | self.search_ids)  # fresh ids
            self.fragment_ids += listed
            self.check_fragments(result.text)
        if name == "search_context" and result.ok:
            assert not set(listed) & set(self.fragment_ids)
            self.search_ids.update(listed)
        return result

    def check_fragments(self, text: str) -> None:
        """The new fragments tile the span exactly, cut after whitespace, and are shown in their tags."""
        i, start, end = map(int, HEADER.match(text).groups())
        pieces, pos = [], start
        for fid, size in FRAGMENT_LINE.findall(text):
            pieces.append((fid, self.originals[i]["content"][pos : pos + int(size)]))
            pos += int(size)
        assert pos == end
        assert all(piece[-1].isspace() for _, piece in pieces[:-1])
        tagged = "".join(f'<fragment id="{fid}">{piece}</fragment>' for fid, piece in pieces)
        assert tagged in self.ws.render()[i]["content"]

    def some_id(self, data, ids) -> str:
        return data.draw(st.sampled_from(sorted(ids)) if ids and data.draw(st.integers(0, 3)) else st.text(max_size=8))

    @rule(data=st.data())
    def fragment_from_text(self, data) -> None:
        i = data.draw(st.integers(0, len(self.originals) - 1))
        text, role = self.originals[i]["content"], self.originals[i]["role"]
        if len(text) < 2:
            return
        a = data.draw(st.integers(0, len(text) - 2))
        start_marker = text[a : a + data.draw(st.integers(1, min(8, len(text) - 1 - a)))]
        b = data.draw(st.integers(a + len(start_marker), len(text) - 1))
        end_marker = text[b : b + data.draw(st.integers(1, min(8, len(text) - b)))]
        args = {"start_marker": start_marker, "end_marker": end_marker, "num_fragments": data.draw(st.integers(0, 21))}
        if data.draw(st.integers(0, 3)) == 0:
            args["role"] = data.draw(st.sampled_from(ROLES + ["tool"]))
        elif role != "user":
            args["role"] = role if role in ROLES else "all"
        self.run("fragment_context", args)

    @rule(start=st.sampled_from(VOCAB), end=st.sampled_from(VOCAB), n=st.integers(1, 20), role=st.sampled_from(ROLES))
    def fragment_from_vocabulary(self, start, end, n, role) -> None:
        self.run("fragment_context", {"start_marker": start, "end_marker": end, "num_fragments": n, "role": role})

    @rule(data=st.data(), name=st.sampled_from(["fold_fragment", "restore_fragment", "summarize_fragment"]))
    def change_fragment(self, data, name) -> None:
        args = {"fragment_id": self.some_id(data, self.fragment_ids)}
        if name == "summarize_fragment":
            args["focus"] = data.draw(st.sampled_from(VOCAB) | st.text(max_size=10))
        if self.run(name, args).ok:  # doing it again is a successful no-op
            view = self.ws.render()
            again = self.run(name, args)
            assert again.ok and not again.modified and self.ws.render() == view

    @rule(
        data=st.data(),
        role=st.sampled_from(ROLES),
        max_results=st.integers(1, 50) | numbers,
        context_size=st.integers(50, 1000) | numbers,
    )
    def search(self, data, role, max_results, context_size) -> None:
        contents = [m["content"] for m in self.originals if m["content"]]
        query = data.draw(
            st.sampled_from(VOCAB + ["x x", "AA"])
            | st.text(max_size=4)
            | st.sampled_from(contents or [""]).map(lambda t: t[: len(t) // 2].upper())
        )
        args = {"query": query, "role": role}
        for key, value in (("max_results", max_results), ("context_size", context_size)):
            if data.draw(st.booleans()):
                args[key] = value
        result = self.run("search_context", args)
        if not result.ok:
            return
        pool = [m["content"] for m in self.originals if role == "all" or m["role"] == role]
        total = sum(lower(t).count(lower(query)) for t in pool)
        assert int(TOTAL.match(result.text).group(1)) == total if total else result.text.startswith("No matches")
        hits = [(int(i), int(pos)) for _, i, _, pos in HIT_LINE.findall(result.text)]
        assert hits == sorted(hits) and len(hits) == min(total, args.get("max_results", 10))
        assert all(i != j or q - p >= len(lower(query)) for (i, p), (j, q) in itertools.pairwise(hits))  # no overlaps
        for i, pos in hits:
            assert lower(self.originals[i]["content"])[pos : pos + len(lower(query))] == lower(query)
        if hits:
            detail = self.run(
                "get_search_detail", {"search_id": data.draw(st.sampled_from(LISTED_ID.findall(result.text)))}
            )
            assert detail.ok and "«" in detail.text

    @rule(data=st.data(), extended=st.integers(100, 2000) | numbers)
    def detail(self, data, extended) -> None:
        args = {"search_id": self.some_id(data, self.search_ids)}
        if data.draw(st.booleans()):
            args["extended_context"] = extended
        self.run("get_search_detail", args)

    @rule(role=st.sampled_from(["assistant", "tool"]), content=texts)
    def append(self, role, content) -> None:
        self.ws.append({"role": role, "content": content})
        self.originals.append({"role": role, "content": content})
        self.log.append(("append", role, content))

    @rule(data=st.data(), name=st.sampled_from(TOOL_NAMES) | st.text(max_size=20) | junk)
    def fuzz(self, data, name) -> None:
        self.run(name, data.draw(junk | junk.map(json.dumps) | st.text(max_size=30)))

    @invariant()
    def messages_kept(self) -> None:
        view = self.ws.render()
        assert [m["role"] for m in view] == [m["role"] for m in self.originals]
        assert self.ws.original() == self.originals
        text = "".join(m["content"] for m in view)
        assert all(text.count(f'<fragment id="{fid}"') == 1 for fid in self.fragment_ids)

    @invariant()
    def restoring_everything_gives_the_original(self) -> None:
        ws = copy.deepcopy(self.ws)
        for fid in self.fragment_ids:
            assert ws.execute("restore_fragment", {"fragment_id": fid}).ok
        assert ws.render(tags=False) == self.originals

    def teardown(self) -> None:
        """Same seed and same calls give the same results and view."""
        if not hasattr(self, "ws"):
            return
        ws = Workspace(self.convo, seed=self.seed)
        for entry in self.log:
            if entry[0] == "append":
                ws.append({"role": entry[1], "content": entry[2]})
            else:
                assert ws.execute(entry[1], entry[2]) == entry[3]
        assert ws.render() == self.ws.render()


ACMMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestACMMachine = ACMMachine.TestCase


# ---- seeds only pick ids ------------------------------------------------------------------------------------------

refs = st.integers(0, 40).map(lambda k: ("ref", k))  # "the k-th id created so far", resolved at run time
calls = st.one_of(
    st.builds(
        lambda a, b, n, r: ("fragment_context", {"start_marker": a, "end_marker": b, "num_fragments": n, "role": r}),
        st.sampled_from(VOCAB), st.sampled_from(VOCAB), st.integers(1, 8), st.sampled_from(ROLES),
    ),
    st.builds(lambda k, name: (name, {"fragment_id": k}), refs, st.sampled_from(["fold_fragment", "restore_fragment"])),
    st.builds(lambda k, f: ("summarize_fragment", {"fragment_id": k, "focus": f}), refs, st.sampled_from(VOCAB)),
    st.builds(lambda q, r: ("search_context", {"query": q, "role": r}), st.sampled_from(VOCAB), st.sampled_from(ROLES)),
    st.builds(lambda k: ("get_search_detail", {"search_id": k}), refs),
)  # fmt: skip


def play(convo: list[dict], script: list[tuple], seed: int) -> tuple[list[str], list[str]]:
    """Run a script; return (ids in order of creation, every result text plus the final view)."""
    ws, ids, texts = Workspace(convo, seed=seed), [], []
    for name, args in script:
        args = {k: (ids[v[1] % len(ids)] if ids else "fzzzzz") if isinstance(v, tuple) else v for k, v in args.items()}
        text = ws.call(name, args)
        ids += [i for i in LISTED_ID.findall(text) if i not in ids]
        texts.append(text)
    return ids, texts + [json.dumps(ws.render(), ensure_ascii=False)]


@settings(max_examples=100, deadline=None)
@given(
    convo=conversations, script=st.lists(calls, max_size=12), seed=st.integers(0, 2**32), other=st.integers(0, 2**32)
)
def test_ids_are_deterministic_and_only_the_seed_changes_them(convo, script, seed, other):
    ids, texts = play(convo, script, seed)
    assert play(convo, script, seed) == (ids, texts)
    if other == seed:
        return
    other_ids, other_texts = play(convo, script, other)
    assert len(other_ids) == len(ids) and (not ids or ids[0] != other_ids[0])
    rename = dict(zip(ids, other_ids))
    assert [ANY_ID.sub(lambda m: rename.get(m.group(0), m.group(0)), t) for t in texts] == other_texts


# ---- call never raises -----------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(data=st.data(), name=st.sampled_from(TOOL_NAMES) | st.text(max_size=20) | junk)
def test_call_never_raises_and_bad_calls_change_nothing(data, name):
    ws = Workspace([{"role": "user", "content": "alpha beta.\nGamma key val.\nfish 7 the end."}], seed=1)
    ids = LISTED_ID.findall(
        ws.call("fragment_context", {"start_marker": "alpha", "end_marker": "end.", "num_fragments": 3})
    )
    ids += LISTED_ID.findall(ws.call("search_context", {"query": "a"}))
    if name in TOOL_NAMES and data.draw(st.booleans()):  # near-valid: the tool's own keys (and maybe one more)
        keys = list(
            next(s for s in TOOL_SCHEMAS if s["function"]["name"] == name)["function"]["parameters"]["properties"]
        )
        values = junk | numbers | st.sampled_from(ids + VOCAB + ROLES)
        arguments = data.draw(st.dictionaries(st.sampled_from(keys + ["extra"]), values, max_size=len(keys) + 1))
        if data.draw(st.booleans()):
            arguments = json.dumps(arguments)
    else:
        arguments = data.draw(junk | junk.map(json.dumps) | st.text(max_size=40) | st.just('{"x": ' + "9" * 5000 + "}"))
    before, view = snapshot(ws), ws.render()
    result = ws.execute(name, arguments)
    assert isinstance(result.text, str) and result.ok == (not result.text.startswith("Error: "))
    if not result.ok:
        assert not result.modified and snapshot(ws) == before and ws.render() == view
