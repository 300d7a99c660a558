"""Prompts on the embedded model's tokenizer: the chat template's own rendering, extended id by id where it can."""

from sculptor_rl.acm import TOOL_SCHEMAS
from sculptor_rl.toolcalls import assistant_message

Q = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Question?\nLine two."}]
CALL = assistant_message([("search_context", {"query": "two"})])


def test_a_prompt_extends_the_last_prompt_and_completion_where_the_rendering_does(fmt):
    ids, text = fmt.prompt(Q, TOOL_SCHEMAS)
    assert fmt.tokenizer.decode(ids) == text == fmt.text(Q, add_generation_prompt=True, tools=TOOL_SCHEMAS)
    call = {**CALL, "tool_calls": [{**CALL["tool_calls"][0], "id": "call00000"}]}
    completion = fmt.render_completion(Q, TOOL_SCHEMAS, call)
    assert fmt.decode(completion) == '<tool_call>\n{"name": "search_context", "arguments": {"query": "two"}}\n' \
                                     '</tool_call><|im_end|>'
    after = [*Q, {**call, "content": ""}, {"role": "tool", "content": "result", "tool_call_id": "call00000"}]
    ids2, text2 = fmt.prompt(after, TOOL_SCHEMAS, (ids + completion, text + fmt.decode(completion)))
    assert ids2[: len(ids) + len(completion)] == ids + completion  # the completion stays as generated
    assert text2 == fmt.text(after, add_generation_prompt=True, tools=TOOL_SCHEMAS)
    assert fmt.tokenizer.decode(ids2) == text2
    # a rewritten context (an ACM fold) does not extend: the prompt is the rendering tokenized afresh
    folded = [Q[0], {"role": "user", "content": "[folded]"}, *after[2:]]
    ids3, text3 = fmt.prompt(folded, TOOL_SCHEMAS, (ids2, text2))
    assert ids3 == fmt.encode(text3) and ids3[: len(ids)] != ids


def test_tool_schemas_are_in_the_system_turn(fmt):
    text = fmt.text([{"role": "user", "content": "hi"}], add_generation_prompt=True, tools=TOOL_SCHEMAS)
    for schema in TOOL_SCHEMAS:
        assert f'"name": "{schema["function"]["name"]}"' in text
    assert text.index("<tools>") < text.index("<|im_start|>user")


def test_stop_ids_end_with_the_eos_and_the_format_is_hermes(fmt):
    assert fmt.stop_ids[0] == fmt.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert fmt.completion_ids("ok")[-1] == fmt.eos_id
    assert fmt.parser.name == "hermes" and not fmt.one_call_per_turn
    assert fmt.provenance["hash"] and fmt.provenance["name"].endswith("smollm2-135m-instruct")
