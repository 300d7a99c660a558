"""Incremental prompts on the embedded model's tokenizer decode to the chat template's own rendering."""

from sculptor_rl.acm import TOOL_SCHEMAS


def test_head_plus_completions_and_bridges_equal_the_template(fmt):
    q = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Question?\nLine two."}]
    turns = [("I will search.\n<tool_call>\n{}\n</tool_call>", [("tool", "result one"), ("tool", "result 2")]),
             ("Done: 42", [])]
    ids = fmt.head_ids(q, TOOL_SCHEMAS)
    messages = list(q)
    for text, tools in turns[:1]:
        ids += fmt.completion_ids(text) + fmt.bridge_ids(tuple(tools))
        messages += [{"role": "assistant", "content": text}] + [{"role": r, "content": c} for r, c in tools]
    expected = fmt.text(messages, add_generation_prompt=True, tools=TOOL_SCHEMAS)
    assert fmt.tokenizer.decode(ids) == expected
    assert expected.endswith("<|im_start|>assistant\n")
    assert "<tool_response>\nresult one\n</tool_response>\n<tool_response>\nresult 2\n</tool_response>" in expected


def test_tool_schemas_are_in_the_system_turn(fmt):
    text = fmt.text([{"role": "user", "content": "hi"}], add_generation_prompt=True, tools=TOOL_SCHEMAS)
    for schema in TOOL_SCHEMAS:
        assert f'"name": "{schema["function"]["name"]}"' in text
    assert text.index("<tools>") < text.index("<|im_start|>user")


def test_stop_ids_end_with_the_eos(fmt):
    assert fmt.stop_ids[0] == fmt.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert fmt.completion_ids("ok")[-1] == fmt.eos_id
