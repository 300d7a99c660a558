from sculptor_rl.toolcalls import HermesParser, format_tool_call

parse = HermesParser().parse


def test_round_trip_of_formatted_calls_in_order():
    text = "Let me look.\n" + format_tool_call("fold_fragment", {"fragment_id": "fabc12"}) + "\n" + \
        format_tool_call("search_context", {"query": "x", "max_results": 3})
    p = parse(text)
    assert [c.name for c in p.calls] == ["fold_fragment", "search_context"]
    assert p.calls[1].arguments == {"query": "x", "max_results": 3}
    assert p.content == "Let me look."
    assert all(c.error is None for c in p.calls)


def test_plain_answer_has_no_calls():
    p = parse("The answer is 42.")
    assert p.calls == [] and p.content == "The answer is 42."


def test_malformed_blocks_become_errors_in_place():
    text = ('<tool_call>{"name": "a", "arguments": {}}</tool_call>'
            '<tool_call>{not json}</tool_call>'
            '<tool_call>["list"]</tool_call>'
            '<tool_call>{"name": "b", "arguments": {}}')  # unterminated
    calls = parse(text).calls
    assert [c.name for c in calls] == ["a", None, None, None]
    assert "not valid JSON" in calls[1].error
    assert "string \"name\"" in calls[2].error
    assert "unterminated" in calls[3].error


def test_non_object_arguments_are_kept_for_the_tool_to_reject():
    calls = parse('<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>'
                  '<tool_call>{"name": "b", "arguments": [1, 2]}</tool_call>').calls
    assert calls[0].arguments == '{"x": 1}'
    assert calls[1].arguments == "[1, 2]"
