"""Real chat-template families for agent-loop tests.

One ``Family`` per template saved under ``tests/data/templates/<family>.jinja``
(provenance: ``tests/data/templates/PROVENANCE.md``).  No heavy imports: tests
build a tiny tokenizer per family from ``special_tokens`` / ``bos`` / ``eos``
and render ``template`` with jinja2 / transformers.

Field meanings
--------------
special_tokens   strings that must be single (added/special) tokens: those the
                 template emits literally plus those the model generates.  Where
                 ``tokens_verified`` is False they were derived from the template
                 and from knowledge of the model's tokenizer_config.json, not
                 checked against a stored copy of it.
bos / eos        the tokenizer's bos_token / eos_token (None = not set).
stop             token strings that end an assistant turn in generation
                 (generation_config.json eos_token_id list and/or template).
tool_format      hermes | llama3_json | mistral | mistral_args | qwen3_coder_xml |
                 glm45 | deepseek_v3 | deepseek_v31 | harmony | none
tools_via        how tool schemas reach the template.
kwargs_variants  extra apply_chat_template kwargs worth testing.
example_completion
                 ONE assistant completion with a tool call (get_weather,
                 {"city": "Paris"}), i.e. the text after the generation prompt
                 up to and including the stop token.  ``example_source`` says
                 whether it is the template's own rendering of a structured
                 call ("template") or a real model output quoted from a public
                 test ("vllm-test: ...").
official         "yes" = byte-exact copy of the HF template; "modified" = a
                 third-party edit (see notes / PROVENANCE.md).

Conventions all templates were rendered with (see PROVENANCE.md): assistant
tool call ``{"id": "abc123XYZ", "type": "function", "function": {"name": ...,
"arguments": {...}}}``; tool message ``{"role": "tool", "tool_call_id": ...,
"name": ..., "content": "..."}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

TEMPLATE_DIR = "tests/data/templates"


@dataclass(frozen=True)
class Family:
    name: str
    template: str
    hf_model: str
    special_tokens: List[str]
    bos: Optional[str]
    eos: Optional[str]
    stop: List[str]
    tool_format: str
    tools_via: str
    kwargs_variants: List[Dict[str, Any]]
    notes: str
    example_completion: str
    example_source: str
    official: str = "yes"
    tokens_verified: bool = False
    # Arguments shape the template needs for assistant tool calls:
    # "dict" (OpenAI-parsed), "str" (JSON string, as on the OpenAI wire), "any".
    arguments_type: str = "dict"
    # What assistant ``content`` must be on a tool-call turn for the call to render.
    tool_call_content: str = '""'
    extra: Dict[str, Any] = field(default_factory=dict)


_QWEN3_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
    "<think>", "</think>",
]

_LLAMA3_TOKENS = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|eot_id|>", "<|eom_id|>", "<|python_tag|>",
]

_DEEPSEEK_TOKENS = [
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>",
    "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>", "<think>", "</think>",
]

FAMILIES: Dict[str, Family] = {}


def _add(f: Family) -> None:
    FAMILIES[f.name] = f


_add(Family(
    name="qwen3",
    template="qwen3.jinja",
    hf_model="Qwen/Qwen3-0.6B (same template as Qwen3-8B)",
    special_tokens=_QWEN3_TOKENS,
    bos=None,
    eos="<|im_end|>",
    stop=["<|im_end|>", "<|endoftext|>"],
    tool_format="hermes",
    tools_via="tools= argument (rendered as JSON lines inside <tools></tools> in the system turn)",
    kwargs_variants=[{"enable_thinking": True}, {"enable_thinking": False}],
    notes=("Re-renders tool calls from structure (arguments dict -> tojson, str passed through). "
           "Strips reasoning of assistant turns before the last real user query; keeps "
           "reasoning_content (or <think> parsed out of content) only after it, and ALWAYS emits "
           "'<think>\\n\\n</think>\\n\\n' for the last assistant turn, so a tool-call turn renders "
           "differently once a later user turn exists (not prefix-stable across turns). "
           "Tool messages become <|im_start|>user <tool_response>..</tool_response>, consecutive "
           "ones merged. enable_thinking=False puts an empty think block in the generation prompt. "
           "content=None on an assistant turn raises TypeError (uses `in message.content`): pass ''. "
           "Several calls per turn OK; ids ignored. <tool_call>/<think>/... are added tokens with "
           "special=False in the real tokenizer."),
    example_completion=('<think>\n\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
                        '{"city": "Paris"}}\n</tool_call><|im_end|>'),
    example_source="template (enable_thinking=True; real model puts its reasoning inside <think>)",
    arguments_type="any",
))

_add(Family(
    name="qwen3_coder",
    template="qwen3_coder.jinja",
    hf_model="Qwen/Qwen3-Coder-30B-A3B-Instruct (Qwen3-Coder family)",
    special_tokens=_QWEN3_TOKENS,
    bos=None,
    eos="<|im_end|>",
    stop=["<|im_end|>", "<|endoftext|>"],
    tool_format="qwen3_coder_xml",
    tools_via="tools= argument (rendered as <tools><function><name>..<parameters>.. XML in the system turn)",
    kwargs_variants=[{}],
    notes=("No thinking. Re-renders calls from structure as <tool_call>\\n<function=NAME>\\n"
           "<parameter=K>\\nV\\n</parameter>\\n</function>\\n</tool_call>; arguments MUST be a "
           "mapping (a JSON string raises 'Can only get item pairs from a mapping.'); non-string "
           "values are tojson'd. '<function=' / '<parameter=' are plain text, not tokens. Tool "
           "messages -> user turn with <tool_response>. Several calls per turn OK; ids ignored."),
    example_completion=("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                        "</parameter>\n</function>\n</tool_call><|im_end|>"),
    example_source="template",
))

_add(Family(
    name="qwen2_5",
    template="qwen2_5.jinja",
    hf_model="Qwen/Qwen2.5-7B-Instruct",
    special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"],
    bos=None,
    eos="<|im_end|>",
    stop=["<|im_end|>", "<|endoftext|>"],
    tool_format="hermes",
    tools_via="tools= argument (JSON lines in <tools></tools>, default system prompt 'You are Qwen...' if none)",
    kwargs_variants=[{}],
    notes=("Re-renders calls from structure (arguments | tojson, so a JSON *string* gets "
           "double-encoded). Injects a default system prompt when none is given. Tool messages -> "
           "<|im_start|>user <tool_response>..</tool_response> (plain text in Qwen2.5's vocab: "
           "<tool_response> is NOT an added token there, unlike Qwen3). No reasoning handling. "
           "Several calls per turn OK; ids ignored."),
    example_completion=('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                        '</tool_call><|im_end|>'),
    example_source="template",
))

_add(Family(
    name="qwen3_5",
    template="qwen3_5.jinja",
    hf_model="Qwen/Qwen3.5-4B (copy named Qwen3.5-4B.jinja in llama.cpp)",
    special_tokens=_QWEN3_TOKENS + ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"],
    bos=None,
    eos="<|im_end|>",
    stop=["<|im_end|>", "<|endoftext|>"],
    tool_format="qwen3_coder_xml",
    tools_via="tools= argument (JSON lines in <tools></tools> in the system turn)",
    kwargs_variants=[{"enable_thinking": True}, {"enable_thinking": False}],
    notes=("Thinking ON by default: generation prompt ends with '<think>\\n'. Tool calls use the "
           "Qwen3-Coder XML format; arguments must be a mapping. Strips reasoning before the last "
           "user query like Qwen3 (variant qwen3_5_append_only keeps it). Raises on: no user "
           "message ('No user query found in messages.'), "
           "system message not first, unknown role, unexpected content types."),
    example_completion=("\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                        "</parameter>\n</function>\n</tool_call><|im_end|>"),
    example_source="template (enable_thinking=True: the generation prompt already holds '<think>\\n')",
))

_add(Family(
    name="hermes3",
    template="hermes3.jinja",
    hf_model="NousResearch/Hermes-3-Llama-3.1-8B (chat_template variant 'tool_use')",
    special_tokens=["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>",
                    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                    "<tools>", "</tools>"],
    bos="<|begin_of_text|>",
    eos="<|im_end|>",
    stop=["<|im_end|>", "<|end_of_text|>"],
    tool_format="hermes",
    tools_via="tools= argument (REQUIRED: the tool_use variant raises \"'NoneType' object is not iterable\" without tools)",
    kwargs_variants=[{}],
    notes=("ChatML over the Llama-3.1 vocab; bos emitted by the template. Tools rendered as "
           "pythonic signatures + JSON schema inside <tools>. Re-renders calls from structure "
           "(arguments dict -> tojson, str kept). Tool messages -> <|im_start|>tool with "
           "<tool_response>. A user-supplied system message becomes a SECOND system turn after "
           "the tools system turn. The last tool response closes '\\n</tool_response><|im_end|>', but "
           "'\\n</tool_response>\\n<|im_end|>' once a message follows, so a step after a read-only call re-renders "
           "(variant hermes3_append_only). Which of <tool_call>/<tools>/... are single tokens in the real "
           "vocabulary is unverified."),
    example_completion=('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                        '</tool_call><|im_end|>'),
    example_source="template",
    arguments_type="any",
))

_LLAMA_NOTES = ("Tools passed via tools= go into the FIRST user message by default "
                "(tools_in_user_message=True; raises if there is no user message). Re-renders a "
                "call from structure as bare {\"name\": .., \"parameters\": ..} + <|eot_id|>; raises "
                "'This model only supports single tool-calls at once!' on >1 call per turn. Tool "
                "results are rendered as role 'ipython' and their content is tojson'd (a string content "
                "gets quoted/escaped: \"{\\\"temp\\\": 18}\"). No reasoning. ids ignored. ")

_add(Family(
    name="llama3_1",
    template="llama3_1.jinja",
    hf_model="meta-llama/Llama-3.1-8B-Instruct",
    special_tokens=_LLAMA3_TOKENS,
    bos="<|begin_of_text|>",
    eos="<|eot_id|>",
    stop=["<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"],
    tool_format="llama3_json",
    tools_via="tools= argument (into first user message) or builtin_tools= (brave_search, wolfram_alpha, code_interpreter -> <|python_tag|>..<|eom_id|>)",
    kwargs_variants=[{}, {"tools_in_user_message": False}],
    notes=_LLAMA_NOTES + ("System header always has 'Cutting Knowledge Date: December 2023' and "
                          "'Today Date: 26 Jul 2024' (date_string default). Built-in tool calls "
                          "render <|python_tag|>...<|eom_id|>."),
    example_completion='{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>',
    example_source="template",
    tokens_verified=False,
    arguments_type="any",
))

_add(Family(
    name="llama3_2",
    template="llama3_2.jinja",
    hf_model="meta-llama/Llama-3.2-3B-Instruct",
    special_tokens=_LLAMA3_TOKENS,
    bos="<|begin_of_text|>",
    eos="<|eot_id|>",
    stop=["<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"],
    tool_format="llama3_json",
    tools_via="tools= argument (into first user message)",
    kwargs_variants=[{}, {"tools_in_user_message": False}],
    notes=_LLAMA_NOTES + ("Uses strftime_now('%d %b %Y') for Today Date when date_string is "
                          "not given (output depends on the date: pass date_string in tests). No "
                          "builtin_tools / <|python_tag|> branch in this template."),
    example_completion='{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>',
    example_source="template",
    arguments_type="any",
))

_add(Family(
    name="llama3_3",
    template="llama3_3.jinja",
    hf_model="meta-llama/Llama-3.3-70B-Instruct",
    special_tokens=_LLAMA3_TOKENS,
    bos="<|begin_of_text|>",
    eos="<|eot_id|>",
    stop=["<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"],
    tool_format="llama3_json",
    tools_via="tools= argument (into first user message) or builtin_tools=",
    kwargs_variants=[{}, {"tools_in_user_message": False}],
    notes=_LLAMA_NOTES + "Byte-identical to llama3_1.jinja.",
    example_completion='{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>',
    example_source="template",
    arguments_type="any",
))

_add(Family(
    name="mistral_nemo",
    template="mistral_nemo.jinja",
    hf_model="mistralai/Mistral-Nemo-Instruct-2407",
    special_tokens=["<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                    "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"],
    bos="<s>",
    eos="</s>",
    stop=["</s>"],
    tool_format="mistral",
    tools_via="tools= argument ([AVAILABLE_TOOLS] placed right before the LAST user message)",
    kwargs_variants=[{}],
    notes=("Re-renders calls from structure as [TOOL_CALLS][{name, arguments, \"id\"}]</s>; "
           "raises 'Tool call IDs should be alphanumeric strings with length 9!' for call ids AND "
           "tool_call_id of tool messages. Raises unless user/assistant alternate (tool-call and "
           "tool messages skipped in that check). SURPRISE: the system message is only emitted "
           "(prepended to the user text) when the last user message is the LAST message of the "
           "conversation, so it vanishes from a conversation that ends with the model's reply and "
           "the generation prompt is not a prefix of the rendered tool-call turn (variant "
           "mistral_nemo_append_only keeps both with the first user message). Tool result: "
           "[TOOL_RESULTS]{\"content\": <raw content>, \"call_id\": ..}[/TOOL_RESULTS]. Several "
           "calls per turn OK."),
    example_completion=('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, '
                        '"id": "abc123XYZ"}]</s>'),
    example_source="template (rendered without a system message)",
))

_add(Family(
    name="mistral_small_3_2",
    template="mistral_small_3_2.jinja",
    hf_model="mistralai/Mistral-Small-3.2-24B-Instruct-2506",
    special_tokens=["<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
                    "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[CALL_ID]", "[ARGS]",
                    "[TOOL_RESULTS]", "[TOOL_CONTENT]", "[/TOOL_RESULTS]", "[IMG]"],
    bos="<s>",
    eos="</s>",
    stop=["</s>"],
    tool_format="mistral_args",
    tools_via="tools= argument ([AVAILABLE_TOOLS] before the last user message)",
    kwargs_variants=[{}],
    notes=("Default system prompt with strftime_now date when none given (date-dependent output). "
           "[AVAILABLE_TOOLS] goes before the LAST user message, so it moves once a second one follows "
           "(variant mistral_small_3_2_append_only keeps it with the first, and text before [TOOL_CALLS]). "
           "Re-renders a call as [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{json}; 9-char alphanumeric "
           "ids required (raises otherwise) for calls and tool messages; roles must alternate "
           "(raises). Tool result: [TOOL_RESULTS]ID[TOOL_CONTENT]content[/TOOL_RESULTS]. vLLM's "
           "parser tests show v11-tokenizer generation WITHOUT [CALL_ID]: "
           "'[TOOL_CALLS]add_this_and_that[ARGS]{\"a\": 3.5, \"b\": 4}' "
           "(tests/tool_parsers/test_mistral_tool_parser.py). Added to llama.cpp by a community "
           "PR; not verified byte-identical to the HF chat_template.json."),
    example_completion='[TOOL_CALLS]get_weather[CALL_ID]abc123XYZ[ARGS]{"city": "Paris"}</s>',
    example_source="template",
    arguments_type="any",
))

_add(Family(
    name="gpt_oss",
    template="gpt_oss.jinja",
    hf_model="openai/gpt-oss-120b (same template as gpt-oss-20b)",
    special_tokens=["<|startoftext|>", "<|endoftext|>", "<|start|>", "<|end|>", "<|message|>",
                    "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"],
    bos="<|startoftext|>",
    eos="<|return|>",
    stop=["<|return|>", "<|call|>", "<|endoftext|>"],
    tool_format="harmony",
    tools_via="tools= argument (rendered as a TypeScript 'namespace functions' in the developer message; system message content becomes '# Instructions' of the developer message)",
    kwargs_variants=[{}, {"reasoning_effort": "low"}, {"reasoning_effort": "high"}],
    notes=("System message always rendered with strftime_now date (date-dependent). Only the "
           "FIRST tool call of an assistant message is rendered (tool_calls[0]); the rest are "
           "silently dropped. Reasoning goes in message['thinking'] (analysis channel) and is "
           "dropped for turns before the last final answer; a final answer ends in <|return|> only as the "
           "conversation's last message (<|end|> in history). Variant gpt_oss_append_only keeps both, and "
           "reads reasoning_content where thinking is absent. Raises if both content and thinking "
           "are set on a tool-call message, if content/thinking contains <|channel|>, or if a "
           "tool message has no preceding tool call; content=None raises TypeError. Template "
           "renders '<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>' "
           "whereas the model generates '<|channel|>commentary to=functions.NAME <|constrain|>json"
           "<|message|>' (OpenAI harmony docs / model card) -- not prefix-identical. Tool result "
           "content is tojson'd (a string gets quoted)."),
    example_completion=(' to=functions.get_weather<|channel|>commentary json<|message|>'
                        '{"city": "Paris"}<|call|>'),
    example_source="template (generation prompt ends '<|start|>assistant')",
    extra={"model_completion": ('<|channel|>analysis<|message|>Need to use function get_weather.<|end|>'
                                '<|start|>assistant<|channel|>commentary to=functions.get_weather '
                                '<|constrain|>json<|message|>{"city": "Paris"}<|call|>'),
           "model_completion_source": "gpt-oss model card Figure 18 / harmony format (typical real output)"},
))

_add(Family(
    name="deepseek_v3",
    template="deepseek_v3.jinja",
    hf_model="deepseek-ai/DeepSeek-V3 (original Dec-2024 template)",
    special_tokens=[t for t in _DEEPSEEK_TOKENS if t not in ("<think>", "</think>")],
    bos="<｜begin▁of▁sentence｜>",
    eos="<｜end▁of▁sentence｜>",
    stop=["<｜end▁of▁sentence｜>"],
    tool_format="deepseek_v3",
    tools_via="ignored: the template never renders tools= (put schemas in the system prompt yourself)",
    kwargs_variants=[{}],
    notes=("Tool calls render ONLY when assistant content is None (content '' silently drops the "
           "call) and arguments must be a JSON string (dict -> TypeError). Bug: with ONE call the "
           "template never emits <｜tool▁calls▁end｜><｜end▁of▁sentence｜> (only the 2nd+ call "
           "branch does). Tool outputs wrapped in <｜tool▁outputs▁begin｜>..; the final answer "
           "after tools has no <｜Assistant｜>. Reasoning (</think> in content) stripped."),
    example_completion=('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n'
                        '```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
                        '<｜end▁of▁sentence｜>'),
    example_source=("vllm-test: tests/tool_parsers/test_deepseekv3_tool_parser.py single_tool_call_output "
                    "(args changed to Paris) + eos; the template itself renders only up to "
                    "<｜tool▁call▁end｜>"),
    arguments_type="str",
    tool_call_content="None",
))

_add(Family(
    name="deepseek_v3_1",
    template="deepseek_v3_1.jinja",
    hf_model="deepseek-ai/DeepSeek-V3.1",
    special_tokens=_DEEPSEEK_TOKENS,
    bos="<｜begin▁of▁sentence｜>",
    eos="<｜end▁of▁sentence｜>",
    stop=["<｜end▁of▁sentence｜>"],
    tool_format="deepseek_v31",
    tools_via="ignored by this template (tools= not rendered; DeepSeek documents a tool prompt in the system message)",
    kwargs_variants=[{"thinking": False}, {"thinking": True}],
    notes=("Thinking switch is the kwarg `thinking` (not enable_thinking): generation prompt ends "
           "'<｜Assistant｜></think>' (non-thinking) or '<｜Assistant｜><think>'. Format "
           "<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜> (no 'function' type, no "
           "```json fence). arguments must be a JSON string (dict -> TypeError). Reasoning of "
           "earlier turns stripped. Tool outputs: <｜tool▁output▁begin｜>..<｜tool▁output▁end｜>."),
    example_completion=('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>'
                        '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>'),
    example_source="template (thinking=False)",
    arguments_type="str",
    tool_call_content="None or ''",
))

_add(Family(
    name="deepseek_r1",
    template="deepseek_r1.jinja",
    hf_model="deepseek-ai/DeepSeek-R1-Distill-Qwen-32B (official distill; same family of template as DeepSeek-R1)",
    special_tokens=_DEEPSEEK_TOKENS,
    bos="<｜begin▁of▁sentence｜>",
    eos="<｜end▁of▁sentence｜>",
    stop=["<｜end▁of▁sentence｜>"],
    tool_format="deepseek_v3",
    tools_via="ignored (tools= not rendered)",
    kwargs_variants=[{}],
    notes=("Generation prompt is '<｜Assistant｜><think>\\n' (forced thinking). Tool calls render "
           "only when content is None and need string arguments; the rendered call turn starts "
           "with '<｜Assistant｜><｜tool▁calls▁begin｜>' (no <think>), so the generation prompt is "
           "NOT a prefix of the rendered call turn. Same single-call bug as deepseek_v3 (no "
           "<｜tool▁calls▁end｜><｜end▁of▁sentence｜> after one call). Reasoning stripped from "
           "history (content split on </think>). Distill uses the Qwen2.5 vocab with DeepSeek "
           "tokens added."),
    example_completion=('Let me check the weather.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'
                        'function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```'
                        '<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>'),
    example_source=("constructed: template's call rendering + closing tokens of the vLLM deepseek_v3 "
                    "parser test, after a short reasoning block closing the prompt's '<think>\\n'"),
    arguments_type="str",
    tool_call_content="None",
))

_add(Family(
    name="glm4_6",
    template="glm4_6.jinja",
    hf_model="zai-org/GLM-4.6 (llama.cpp-edited copy; GLM-4.5's official template is nearly the same)",
    special_tokens=["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
                    "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
                    "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
                    "<tool_response>", "</tool_response>"],
    bos=None,
    eos="<|endoftext|>",
    stop=["<|endoftext|>", "<|user|>", "<|observation|>"],
    tool_format="glm45",
    tools_via="tools= argument (JSON lines in <tools></tools> in a <|system|> turn)",
    kwargs_variants=[{"enable_thinking": True}, {"enable_thinking": False}],
    notes=("Emits '[gMASK]<sop>' literally (no bos). Re-renders calls as '<tool_call>NAME\\n"
           "<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n</tool_call>' (string values raw, "
           "others tojson); arguments must be a mapping -- this llama.cpp edit raises "
           "'Invalid tool call arguments passed: ...' for a string (the official one fails in "
           ".items()). Assistant turn always gets '<think></think>' unless it follows the last "
           "user message and has reasoning_content (variant glm4_6_append_only keeps every turn's). "
           "content=None renders the literal text 'None' "
           "(pass ''). enable_thinking=False appends '/nothink' to user messages and '<think>"
           "</think>' to the generation prompt. Tool messages -> <|observation|> + "
           "<tool_response>. The model ends a call turn by generating <|observation|>."),
    example_completion=('\n<think></think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n'
                        '<arg_value>Paris</arg_value>\n</tool_call><|observation|>'),
    example_source="template (enable_thinking=True) + the <|observation|> stop token the model generates",
    official="modified",
))

_add(Family(
    name="phi4_mini",
    template="phi4_mini.jinja",
    hf_model="microsoft/Phi-4-mini-instruct",
    special_tokens=["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>",
                    "<|tool|>", "<|/tool|>", "<|tool_call|>", "<|/tool_call|>", "<|tool_response|>"],
    bos="<|endoftext|>",
    eos="<|endoftext|>",
    stop=["<|end|>", "<|endoftext|>"],
    tool_format="none",
    tools_via="ONLY as a JSON string in the system message's own 'tools' key (messages[0]['tools']); tools= is ignored",
    kwargs_variants=[{}],
    notes=("Official one-line template: '<|role|>' + content + '<|end|>' for every message; it "
           "cannot render assistant tool_calls (dropped: an empty '<|assistant|><|end|>') and a "
           "tool message renders as '<|tool|>content<|end|>'. content=None raises TypeError. "
           "Without add_generation_prompt it appends eos_token. The model's own call tokens are "
           "<|tool_call|>..<|/tool_call|> per the model card; vLLM's phi4_mini_json parser instead "
           "expects 'functools[...]' (a format from vLLM's example template, not this one)."),
    example_completion='functools[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|end|>',
    example_source=("vllm-test: tests/tool_parsers/test_phi4mini_tool_parser.py single_tool_call_output "
                    "(city changed) + <|end|>; the official template has no call format"),
    arguments_type="n/a",
))

_add(Family(
    name="smollm3",
    template="smollm3.jinja",
    hf_model="HuggingFaceTB/SmolLM3-3B (UNSLOTH-EDITED copy shipped by llama.cpp, not the HF original)",
    special_tokens=["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"],
    bos=None,
    eos="<|im_end|>",
    stop=["<|im_end|>"],
    tool_format="none",
    tools_via="ignored in this copy (the HF original takes xml_tools= / python_tools= / tools= into '### XML Tools')",
    kwargs_variants=[{"enable_thinking": True}, {"enable_thinking": False}],
    notes=("Assistant tool_calls are never rendered (content only) -- true of the HF original "
           "too; tool messages become plain user turns. The llama.cpp copy is Unsloth's edit "
           "('Edits made by Unsloth'): no tools section, no 'Today Date', no /system_override, "
           "no {% generation %} markers. enable_thinking=False (or /no_think in the system "
           "message) adds '<think>\\n\\n</think>\\n' to assistant turns and the generation prompt. "
           "The model writes calls as <tool_call>{json}</tool_call> inside content."),
    example_completion=('<think>\nI should call the weather tool.\n</think>\n<tool_call>\n{"name": '
                        '"get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'),
    example_source=("constructed from the HF original's tool instruction ('return a json object with "
                    "function name and arguments within <tool_call></tool_call> XML tags'); not "
                    "renderable from this template"),
    official="modified",
    arguments_type="n/a",
))


def template_path(name: str, root: str = "") -> str:
    """Path of a family's .jinja file relative to the repository root ``root``."""
    import os

    return os.path.join(root or os.path.dirname(os.path.dirname(os.path.abspath(__file__))), TEMPLATE_DIR,
                        FAMILIES[name].template)


def load_template(name: str, root: str = "") -> str:
    with open(template_path(name, root), encoding="utf-8", newline="") as fh:
        return fh.read()


# Families asked for but NOT saved (no byte-exact public copy found); see PROVENANCE.md.
MISSING = {
    "mistral_v0_3": "mistralai/Mistral-7B-Instruct-v0.3: only re-indented or re-typed copies found",
    "glm4_5": "zai-org/GLM-4.5: only llama.cpp's edited glm_4_5.jinja found (ggml-org/llama.cpp); glm4_6 saved instead",
}
