"""Hand-written cases for the ACM workspace: each tool, each error type, exact renders on a small example."""

from __future__ import annotations

import copy
import json
import random
import re

import pytest

from sculptor_rl.acm import CONTEXT_MODIFYING, READ_ONLY, TOOL_SCHEMAS, ToolResult, Workspace, extractive_summarizer

FRAGMENT_ID = re.compile(r"\bf[a-z0-9]{5}\b")
SEARCH_ID = re.compile(r"\bs[a-z0-9]{5}\b")

NOTES = "Notes:\nalpha is 1.\nbeta is 2.\ngamma is 3.\ndelta is 4.\nQuestion: what is gamma?"
CONVO = [{"role": "system", "content": "You are a careful assistant."}, {"role": "user", "content": NOTES}]


def snapshot(ws: Workspace) -> dict:
    """All of the workspace's state, comparable with ==."""
    return {k: v.getstate() if isinstance(v, random.Random) else copy.deepcopy(v) for k, v in vars(ws).items()}


def fragment(ws: Workspace, start_marker: str, end_marker: str, num_fragments: int) -> list[str]:
    """The ids of the new fragments."""
    args = {"start_marker": start_marker, "end_marker": end_marker, "num_fragments": num_fragments}
    return FRAGMENT_ID.findall(ws.call("fragment_context", args))


def fragmented() -> tuple[Workspace, list[str]]:
    """CONVO with its notes cut into two fragments."""
    ws = Workspace(CONVO)
    return ws, fragment(ws, "alpha", "delta is 4.", 2)


# ---- schemas -------------------------------------------------------------------------------------------------


def params(name: str) -> dict:
    return next(s["function"]["parameters"] for s in TOOL_SCHEMAS if s["function"]["name"] == name)


def test_schemas_match_the_paper():
    assert [s["function"]["name"] for s in TOOL_SCHEMAS] == [
        "fragment_context", "fold_fragment", "summarize_fragment", "restore_fragment", "search_context", "get_search_detail",
    ]  # fmt: skip
    for s in TOOL_SCHEMAS:
        assert s["type"] == "function" and s["function"]["description"]
        assert s["function"]["parameters"]["type"] == "object"
        json.dumps(s)
    p = params("fragment_context")["properties"]
    assert params("fragment_context")["required"] == ["start_marker", "end_marker"]
    assert (p["num_fragments"]["default"], p["num_fragments"]["minimum"], p["num_fragments"]["maximum"]) == (5, 1, 20)
    assert (p["role"]["default"], p["role"]["enum"]) == ("user", ["user", "assistant", "all"])
    assert params("fold_fragment")["required"] == ["fragment_id"]
    assert params("summarize_fragment")["required"] == ["fragment_id", "focus"]
    assert params("restore_fragment")["required"] == ["fragment_id"]
    p = params("search_context")["properties"]
    assert params("search_context")["required"] == ["query"]
    assert (p["role"]["default"], p["role"]["enum"]) == ("user", ["user", "assistant", "all"])
    assert (p["max_results"]["default"], p["max_results"]["minimum"], p["max_results"]["maximum"]) == (10, 1, 50)
    assert (p["context_size"]["default"], p["context_size"]["minimum"], p["context_size"]["maximum"]) == (200, 50, 1000)
    p = params("get_search_detail")["properties"]
    assert params("get_search_detail")["required"] == ["search_id"]
    assert (p["extended_context"]["default"], p["extended_context"]["minimum"], p["extended_context"]["maximum"]) == (
        500,
        100,
        2000,
    )


def test_tool_classes():
    assert CONTEXT_MODIFYING == {"fragment_context", "fold_fragment", "summarize_fragment", "restore_fragment"}
    assert READ_ONLY == {"search_context", "get_search_detail"}


# ---- messages -------------------------------------------------------------------------------------------------


def test_messages_are_copied_and_renders_are_fresh():
    convo = copy.deepcopy(CONVO) + [{"role": "tool", "content": "x", "tool_call_id": "c1", "meta": {"a": [1]}}]
    ws = Workspace(convo)
    convo[1]["content"] = "changed"
    convo[2]["meta"]["a"].append(2)
    assert ws.original()[1]["content"] == NOTES
    assert ws.original()[2] == {"role": "tool", "content": "x", "tool_call_id": "c1", "meta": {"a": [1]}}
    view = ws.render()
    view[1]["content"] = "mutated"
    view[2]["meta"]["a"].append(3)
    assert (
        ws.render()
        == ws.original()
        == [*CONVO, {"role": "tool", "content": "x", "tool_call_id": "c1", "meta": {"a": [1]}}]
    )


def test_append():
    ws = Workspace(CONVO)
    message = {"role": "assistant", "content": "Let me look."}
    ws.append(message)
    message["content"] = "changed"
    assert [m["role"] for m in ws.render()] == ["system", "user", "assistant"]
    assert ws.render()[2]["content"] == "Let me look."
    with pytest.raises(TypeError):
        ws.append({"role": "tool", "content": None})
    with pytest.raises(TypeError):
        ws.append("hello")  # type: ignore[arg-type]


# ---- fragment_context ----------------------------------------------------------------------------------------


def test_fragment_context_exact_result_and_render():
    ws = Workspace(CONVO, seed=0)
    result = ws.execute("fragment_context", {"start_marker": "alpha", "end_marker": "delta is 4.", "num_fragments": 2})
    assert result == ToolResult(
        "Fragmented message 1 (user), chars 7-53, into 2 fragments:\n"
        '- f41pjs: 23 chars (~6 tokens) "alpha is 1. beta is 2."\n'
        '- fo2krv: 23 chars (~6 tokens) "gamma is 3. delta is 4."',
        ok=True,
        modified=True,
    )  # the ids are pinned: seed 0 must keep producing them
    assert ws.render() == [
        CONVO[0],
        {
            "role": "user",
            "content": 'Notes:\n<fragment id="f41pjs">alpha is 1.\nbeta is 2.\n</fragment>'
            '<fragment id="fo2krv">gamma is 3.\ndelta is 4.</fragment>\nQuestion: what is gamma?',
        },
    ]
    assert ws.render(tags=False) == ws.original() == CONVO


def test_fragment_splits_at_lines_then_sentences_then_words():
    ws = Workspace([{"role": "user", "content": "a1\nb2\nc3\nd4\n"}])
    ids = fragment(ws, "a1", "d4\n", 4)
    assert ws.render()[0]["content"] == "".join(
        f'<fragment id="{i}">{t}</fragment>' for i, t in zip(ids, ["a1\n", "b2\n", "c3\n", "d4\n"])
    )

    ws = Workspace([{"role": "user", "content": "One fish. Two fish. Red fish. Blue fish."}])
    ids = fragment(ws, "One", "Blue fish.", 2)
    assert (
        ws.render()[0]["content"]
        == f'<fragment id="{ids[0]}">One fish. Two fish. </fragment><fragment id="{ids[1]}">Red fish. Blue fish.</fragment>'
    )

    ws = Workspace([{"role": "user", "content": "one two three four five six"}])
    ids = fragment(ws, "one", "six", 3)
    pieces = ["one two ", "three four ", "five six"]
    assert ws.render()[0]["content"] == "".join(f'<fragment id="{i}">{t}</fragment>' for i, t in zip(ids, pieces))


def test_fragment_prefers_line_boundaries_over_nearer_sentence_ends():
    text = "First. Second. Third.\nFourth. Fifth. Sixth."
    ws = Workspace([{"role": "user", "content": text}])
    ids = fragment(ws, "First", "Sixth.", 2)
    assert (
        ws.render()[0]["content"]
        == f'<fragment id="{ids[0]}">First. Second. Third.\n</fragment><fragment id="{ids[1]}">Fourth. Fifth. Sixth.</fragment>'
    )


def test_fragment_fewer_pieces_when_span_is_short():
    ws = Workspace([{"role": "user", "content": "xx Supercalifragilistic yy"}])
    result = ws.execute("fragment_context", {"start_marker": "Super", "end_marker": "istic", "num_fragments": 5})
    assert result.ok and result.modified
    assert (
        "into 1 fragment (5 requested; the span has too few line, sentence or word boundaries for more):" in result.text
    )
    (fid,) = FRAGMENT_ID.findall(result.text)
    assert ws.render()[0]["content"] == f'xx <fragment id="{fid}">Supercalifragilistic</fragment> yy'


def test_fragment_defaults_and_sizes_roughly_equal():
    text = "".join(f"line {i:03d} of the long document.\n" for i in range(100))
    ws = Workspace([{"role": "user", "content": text}])
    result = ws.execute(
        "fragment_context", {"start_marker": "line 000", "end_marker": "line 099 of the long document.\n"}
    )
    sizes = [int(s) for s in re.findall(r": (\d+) chars", result.text)]
    assert len(sizes) == 5 and sum(sizes) == len(text)
    assert max(sizes) - min(sizes) <= len("line 000 of the long document.\n")
    assert ws.render(tags=False) == ws.original()


def test_fragment_roles_and_first_matching_message():
    convo = [
        {"role": "user", "content": "START only here"},
        {"role": "assistant", "content": "START assistant END"},
        {"role": "user", "content": "prefix START user END suffix"},
        {"role": "tool", "content": "START tool END"},
    ]
    ws = Workspace(convo)
    assert "message 2 (user), chars 7-21" in ws.call(
        "fragment_context", {"start_marker": "START", "end_marker": "END", "num_fragments": 1}
    )
    ws = Workspace(convo)
    assert "message 1 (assistant)" in ws.call(
        "fragment_context", {"start_marker": "START", "end_marker": "END", "role": "assistant"}
    )
    ws = Workspace(convo)
    assert "message 1 (assistant)" in ws.call(
        "fragment_context", {"start_marker": "START", "end_marker": "END", "role": "all"}
    )
    ws = Workspace(convo)
    assert "message 3 (tool)" in ws.call(
        "fragment_context", {"start_marker": "START tool", "end_marker": "END", "role": "all"}
    )


def test_several_fragment_calls_in_one_message():
    ws = Workspace(CONVO)
    b = fragment(ws, "\nbeta", "2.", 1)
    a = fragment(ws, "alpha", "1.", 1)
    assert len(a) == len(b) == 1 and a != b  # adjacent spans are fine, in any order
    assert ws.render()[1]["content"] == (
        f'Notes:\n<fragment id="{a[0]}">alpha is 1.</fragment><fragment id="{b[0]}">\nbeta is 2.</fragment>'
        "\ngamma is 3.\ndelta is 4.\nQuestion: what is gamma?"
    )
    assert ws.render(tags=False) == ws.original()


# ---- fold / summarize / restore --------------------------------------------------------------------------------


def test_fold_and_restore_exact_and_idempotent():
    ws, (a, b) = fragmented()
    result = ws.execute("fold_fragment", {"fragment_id": a})
    assert result == ToolResult(
        f"Folded fragment {a}: 23 chars (~6 tokens) hidden; restore_fragment shows them again.", True, True
    )
    folded = f'Notes:\n<fragment id="{a}" folded chars=23 /><fragment id="{b}">gamma is 3.\ndelta is 4.</fragment>\nQuestion: what is gamma?'
    assert ws.render()[1]["content"] == folded
    assert (
        ws.render(tags=False)[1]["content"]
        == f'Notes:\n<fragment id="{a}" folded chars=23 />gamma is 3.\ndelta is 4.\nQuestion: what is gamma?'
    )
    again = ws.execute("fold_fragment", {"fragment_id": a})
    assert again == ToolResult(f"Fragment {a} is already folded; nothing changed.", True, False)
    assert ws.render()[1]["content"] == folded

    assert ws.execute("restore_fragment", {"fragment_id": a}) == ToolResult(
        f"Restored fragment {a}: its 23 chars are shown again.", True, True
    )
    assert ws.execute("restore_fragment", {"fragment_id": a}) == ToolResult(
        f"Fragment {a} is already shown in full; nothing changed.", True, False
    )
    assert ws.render(tags=False) == ws.original() == CONVO


def test_summarize_with_default_extractive_summarizer():
    ws, (a, b) = fragmented()
    result = ws.execute("summarize_fragment", {"fragment_id": b, "focus": "gamma"})
    assert result == ToolResult(
        f'Summarized fragment {b}: 23 chars shown as a 24-char summary (focus "gamma"); restore_fragment shows the full text again.',
        True,
        True,
    )
    summarized = f'<fragment id="{b}" summary focus="gamma">[extractive] gamma is 3.</fragment>'
    assert (
        ws.render()[1]["content"]
        == f'Notes:\n<fragment id="{a}">alpha is 1.\nbeta is 2.\n</fragment>{summarized}\nQuestion: what is gamma?'
    )
    assert ws.execute("summarize_fragment", {"fragment_id": b, "focus": "gamma"}).modified is False
    assert ws.execute("summarize_fragment", {"fragment_id": b, "focus": "delta"}).modified is True
    assert 'focus="delta">[extractive] delta is 4.</fragment>' in ws.render()[1]["content"]
    assert ws.execute("fold_fragment", {"fragment_id": b}).modified  # summarized -> folded
    assert ws.execute("summarize_fragment", {"fragment_id": b, "focus": "delta"}).modified  # folded -> summarized
    assert ws.execute("restore_fragment", {"fragment_id": b}).modified
    assert ws.render(tags=False) == ws.original()


def test_custom_summarizer_and_its_failures():
    calls = []

    def summarizer(text: str, focus: str) -> str:
        calls.append((text, focus))
        return f"S({focus})"

    ws = Workspace(CONVO, summarizer=summarizer)
    (a, _) = fragment(ws, "alpha", "delta is 4.", 2)
    ws.call("summarize_fragment", {"fragment_id": a, "focus": 'the "values"\n'})
    ws.call("summarize_fragment", {"fragment_id": a, "focus": 'the "values"\n'})  # same focus: not summarized again
    assert calls == [("alpha is 1.\nbeta is 2.\n", 'the "values"\n')]
    assert (
        f'<fragment id="{a}" summary focus="the \'values\'">S(the "values"\n)</fragment>' in ws.render()[1]["content"]
    )

    for bad in (lambda text, focus: 1 / 0, lambda text, focus: None):
        ws = Workspace(CONVO, summarizer=bad)
        (a, _) = fragment(ws, "alpha", "delta is 4.", 2)
        before = snapshot(ws)
        result = ws.execute("summarize_fragment", {"fragment_id": a, "focus": "x"})
        assert result.text.startswith("Error: the summarizer") and not result.ok and not result.modified
        assert snapshot(ws) == before


def test_extractive_summarizer():
    text = "The sky is blue. Key 7 holds value 42.\nNothing else here. The end."
    assert extractive_summarizer(text, "value of key 7") == "[extractive] Key 7 holds value 42."
    assert extractive_summarizer(text, "zebra") == "[extractive] The sky is blue. The end."
    assert extractive_summarizer("Only one.", "zebra") == "[extractive] Only one."
    long = extractive_summarizer("word " * 1000 + ".", "word")
    assert len(long) == len("[extractive] ") + 400 and long.endswith("…")


# ---- search ---------------------------------------------------------------------------------------------------


def test_search_exact_result():
    ws, (_, b) = fragmented()
    result = ws.execute("search_context", {"query": "GAMMA", "context_size": 50})
    assert result.ok and not result.modified
    s1, s2 = SEARCH_ID.findall(result.text)
    assert result.text == (
        '2 matches for "GAMMA" in user messages (all shown):\n'
        f"- {s1}: message 1 (user) at char 30, in fragment {b} (shown): "
        '"Notes:\\nalpha is 1.\\nbeta is 2.\\n«gamma» is 3.\\ndelta is 4.\\nQuestion: what is gamma?"\n'
        f'- {s2}: message 1 (user) at char 72: "…a is 2.\\ngamma is 3.\\ndelta is 4.\\nQuestion: what is «gamma»?"\n'
        "get_search_detail(search_id) shows more text around a match."
    )
    assert ws.call("get_search_detail", {"search_id": s2, "extended_context": 100}) == (
        f"{s2}: message 1 (user) at char 72:\n" + json.dumps(NOTES[:72] + "«gamma»?", ensure_ascii=False)
    )


def test_search_finds_folded_text_and_counts_all_hits():
    text = "\n".join(f"row {i}: needle" for i in range(30))
    ws = Workspace([{"role": "user", "content": text}, {"role": "assistant", "content": "NEEDLE in assistant"}])
    (fid,) = fragment(ws, "row 0", "row 29: needle", 1)
    ws.call("fold_fragment", {"fragment_id": fid})
    result = ws.call("search_context", {"query": "Needle", "max_results": 3})
    assert result.startswith(
        '30 matches for "Needle" in user messages (showing the first 3; raise max_results (up to 50) or refine the query):'
    )
    assert result.count(f"in fragment {fid} (folded)") == 3
    assert ws.call("search_context", {"query": "needle", "role": "assistant"}).startswith(
        '1 match for "needle" in assistant messages (all shown):'
    )
    assert ws.call("search_context", {"query": "needle", "role": "all", "max_results": 50}).startswith("31 matches")
    assert (
        ws.call("search_context", {"query": "zebra"})
        == 'No matches for "zebra" in user messages (exact substring, any case); try a shorter query or role="all".'
    )
    assert ws.call("search_context", {"query": "zebra", "role": "all"}).endswith("try a shorter query.")


def test_search_matches_do_not_overlap():
    ws = Workspace([{"role": "user", "content": "aaaaa"}])
    result = ws.call("search_context", {"query": "AA"})
    assert result.startswith('2 matches for "AA" in user messages (all shown):')
    assert re.findall(r"at char (\d+)", result) == ["0", "2"]


def test_search_ids_are_stable_per_hit_and_distinct_from_fragment_ids():
    ws, ids = fragmented()
    first = SEARCH_ID.findall(ws.call("search_context", {"query": "is"}))
    second = SEARCH_ID.findall(ws.call("search_context", {"query": "is"}))
    assert first == second and len(set(first)) == len(first) == 5
    assert not set(first) & set(ids)


def test_search_and_detail_windows():
    text = "x" * 1000 + "TARGET" + "y" * 1000
    ws = Workspace([{"role": "user", "content": text}])
    result = ws.call("search_context", {"query": "target", "context_size": 50})
    assert json.dumps("…" + "x" * 50 + "«TARGET»" + "y" * 50 + "…", ensure_ascii=False) in result
    (sid,) = SEARCH_ID.findall(result)
    detail = ws.call("get_search_detail", {"search_id": sid})
    assert detail == f"{sid}: message 0 (user) at char 1000:\n" + json.dumps(
        "…" + "x" * 500 + "«TARGET»" + "y" * 500 + "…", ensure_ascii=False
    )


def test_search_offsets_with_characters_whose_lowercase_is_longer():
    ws = Workspace([{"role": "user", "content": "İİİ Needle"}])
    result = ws.call("search_context", {"query": "needle"})
    assert "at char 4" in result and "«Needle»" in result
    assert "at char 0" in ws.call("search_context", {"query": "i̇"[0]})  # "i" matches "İ" (Ctrl+F style)


# ---- errors ---------------------------------------------------------------------------------------------------

BAD_CALLS = [
    ("nope", {}, "unknown tool"),
    (None, {}, "unknown tool"),
    ("fold_fragment", "{not json", "not valid JSON"),
    ("fold_fragment", "[1, 2]", "must be a JSON object"),
    ("fold_fragment", 42, "must be a JSON object"),
    ("fold_fragment", None, "must be a JSON object"),
    ("fold_fragment", "", 'missing required argument "fragment_id"'),
    ("fold_fragment", {}, 'missing required argument "fragment_id"'),
    ("fold_fragment", {"fragment_id": "f00000"}, 'no fragment with id "f00000"'),
    ("fold_fragment", {"fragment_id": 7}, '"fragment_id" must be a string'),
    ("fold_fragment", {"fragment_id": "f00000", "extra": 1}, 'unknown argument "extra"'),
    ("restore_fragment", {"fragment_id": "f00000"}, "no fragment with id"),
    ("summarize_fragment", {"fragment_id": "f00000"}, 'missing required argument "focus"'),
    ("summarize_fragment", {"fragment_id": "f00000", "focus": ""}, '"focus" must not be empty'),
    ("fragment_context", {"start_marker": "alpha"}, 'missing required argument "end_marker"'),
    ("fragment_context", {"start_marker": "", "end_marker": "x"}, '"start_marker" must not be empty'),
    (
        "fragment_context",
        {"start_marker": "ALPHA", "end_marker": "beta"},
        'start_marker "ALPHA" not found in any user message',
    ),
    (
        "fragment_context",
        {"start_marker": "alpha", "end_marker": "omega"},
        'end_marker "omega" not found in any user message',
    ),
    ("fragment_context", {"start_marker": "beta", "end_marker": "alpha"}, "does not come after start_marker"),
    ("fragment_context", {"start_marker": "careful", "end_marker": "assistant"}, 'set role="all"'),
    (
        "fragment_context",
        {"start_marker": "alpha", "end_marker": "beta", "role": "system"},
        '"role" must be one of user, assistant, all',
    ),
    (
        "fragment_context",
        {"start_marker": "alpha", "end_marker": "beta", "num_fragments": 0},
        "between 1 and 20, got 0",
    ),
    (
        "fragment_context",
        {"start_marker": "alpha", "end_marker": "beta", "num_fragments": 21},
        "between 1 and 20, got 21",
    ),
    (
        "fragment_context",
        {"start_marker": "alpha", "end_marker": "beta", "num_fragments": "5"},
        'must be a JSON integer such as 5, not "5"',
    ),
    (
        "fragment_context",
        {"start_marker": "alpha", "end_marker": "beta", "num_fragments": 5.0},
        "must be a JSON integer",
    ),
    ("fragment_context", {"start_marker": "alpha", "end_marker": "beta", "num_fragments": True}, "not true"),
    ("fragment_context", '{"start_marker": "alpha", "end_marker": "beta", "num_fragments": 1e999}', "not inf"),
    ("search_context", {"query": ""}, '"query" must not be empty'),
    ("search_context", {"query": "a", "max_results": 51}, "between 1 and 50"),
    ("search_context", {"query": "a", "context_size": 49}, "between 50 and 1000"),
    ("search_context", {"query": "a", "max_results": 10**5000}, "got a huge integer"),
    ("search_context", {"query": "a", "role": None}, '"role" must be a string, not null'),
    ("search_context", {"query": ["a"]}, '"query" must be a string, not an array'),
    ("get_search_detail", {"search_id": "s00000"}, 'no search result with id "s00000"'),
    ("get_search_detail", {"search_id": "s00000", "extended_context": 99}, "between 100 and 2000"),
    ("get_search_detail", '{"search_id": ' + "[" * 100000, "not valid JSON"),
]


@pytest.mark.parametrize("name,arguments,message", BAD_CALLS)
def test_bad_calls_change_nothing(name, arguments, message):
    ws, _ = fragmented()
    ws.call("search_context", {"query": "is"})
    before, view = snapshot(ws), ws.render()
    result = ws.execute(name, arguments)
    assert result.text.startswith("Error: ") and not result.ok and not result.modified
    assert message in result.text
    assert snapshot(ws) == before and ws.render() == view


def test_overlap_and_cross_id_hints():
    ws, (a, b) = fragmented()
    sid = SEARCH_ID.findall(ws.call("search_context", {"query": "alpha"}))[0]
    before = snapshot(ws)
    overlap = ws.call("fragment_context", {"start_marker": "beta", "end_marker": "gamma"})
    assert overlap.startswith("Error: that span (message 1, chars 19-35) overlaps existing fragment(s) ")
    assert a in overlap and b in overlap
    assert "That is a search id" in ws.call("fold_fragment", {"fragment_id": sid})
    assert "That is a fragment id" in ws.call("get_search_detail", {"search_id": a})
    assert f"Fragment ids: {a}, {b}." in ws.call("restore_fragment", {"fragment_id": "fzzzzz"})
    assert "There are no fragments yet" in Workspace(CONVO).call("fold_fragment", {"fragment_id": "fzzzzz"})
    assert snapshot(ws) == before


def test_arguments_as_json_string():
    ws, (a, _) = fragmented()
    assert ws.execute("fold_fragment", json.dumps({"fragment_id": a})).modified
    assert ws.call("search_context", '{"query": "beta", "max_results": 1}').startswith('1 match for "beta"')
