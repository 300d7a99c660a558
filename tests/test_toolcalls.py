import json
import re

import pytest

from sculptor_rl.toolcalls import HermesParser, format_tool_call, make_parser, parser_for_template

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


# ---- every family's format, on real completions, against vLLM's own parser for it ----

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}
# our format → vLLM's parser of it (vLLM's gpt-oss parser is a stub that refuses to parse)
VLLM_PARSER = {"hermes": "hermes", "llama3_json": "llama3_json", "mistral": "mistral", "qwen3_coder": "qwen3_coder",
               "glm45": "glm45", "deepseek_v3": "deepseek_v3"}


def _family_cases():
    from template_families import FAMILIES

    return [name for name, f in FAMILIES.items() if f.example_completion and f.tool_format not in ("none", "harmony")]


@pytest.mark.parametrize("family", _family_cases())
def test_each_family_completion_parses_as_vllm_parses_it(family):
    """The families' example completions (tests/template_families.py: the official template's own rendering of a
    call, or a real model output quoted from vLLM's parser tests) give the same calls as vLLM's parser."""
    from test_templates import tokenizer
    from template_families import FAMILIES
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParserManager

    from sculptor_rl.agent.chat import ChatFormat

    fam = FAMILIES[family]
    tok = tokenizer(family)
    fmt = ChatFormat(tok, tok.convert_tokens_to_ids(fam.stop))
    text = fmt.strip_stop(fam.example_completion)
    ours = [(c.name, c.arguments) for c in fmt.parser.parse(text, [WEATHER]).calls]
    assert ours == [("get_weather", {"city": "Paris"})] and all(c.error is None for c in fmt.parser.parse(text).calls)
    name = "deepseek_v31" if family == "deepseek_v3_1" else VLLM_PARSER[fmt.parser.name]
    if family == "mistral_small_3_2":  # the template's history form; the model writes name[ARGS]{...}
        text = re.sub(r"\[CALL_ID\]\w+", "", text)
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}], tools=[WEATHER])
    got = ToolParserManager.get_tool_parser(name)(tok).extract_tool_calls(text, request)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in got.tool_calls] == ours


@pytest.mark.parametrize("parser, text", [
    ("llama3_json", '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1'),
    ("mistral", '[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{"x": '),
    ("qwen3_coder", "<tool_call>\n<function=a>\n</function>\n</tool_call><tool_call>\nb\n</tool_call>"),
    ("glm45", "<tool_call>a\n</tool_call><tool_call>b\n<arg_key>x</arg_key>"),
    ("deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>{}<｜tool▁call▁end｜>"
                    "<｜tool▁call▁begin｜>b<｜tool▁sep｜>{oops}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    ("harmony", "<|channel|>commentary to=functions.a <|constrain|>json<|message|>{}<|call|>"
                "<|start|>assistant<|channel|>commentary to=functions.b <|constrain|>json<|message|>{oops"),
])
def test_a_malformed_call_is_its_own_format_error_after_a_good_one(parser, text):
    calls = make_parser(parser).parse(text).calls
    assert calls[0].name == "a" and calls[0].error is None
    assert calls[1].name is None and calls[1].error


def test_reasoning_is_split_from_the_content():
    p = make_parser("hermes").parse("<think>\nlet me see\n</think>\n\nThe answer is 4.")
    assert p.reasoning == "let me see" and p.content == "The answer is 4." and not p.calls
    h = make_parser("harmony").parse("<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final"
                                     "<|message|>4")
    assert h.reasoning == "think" and h.content == "4"


def test_auto_picks_the_format_from_the_template_or_says_it_cannot():
    assert parser_for_template("{{ '<tool_call>' }}") == "hermes"
    assert parser_for_template("<tool_call>{{ '<function=' }}") == "qwen3_coder"
    with pytest.raises(ValueError, match="set `parser`"):
        parser_for_template("{{ messages }}")


def test_harmony_reads_the_template_form_and_the_model_card_form():
    """gpt-oss's template writes the recipient before the channel, the model (its model card) after it."""
    from template_families import FAMILIES

    fam = FAMILIES["gpt_oss"]
    for text in (fam.example_completion, fam.extra["model_completion"]):
        p = make_parser("harmony").parse(text.removesuffix("<|call|>"))
        assert [(c.name, c.arguments) for c in p.calls] == [("get_weather", {"city": "Paris"})]
    assert make_parser("harmony").parse(fam.extra["model_completion"]).reasoning == "Need to use function get_weather."
