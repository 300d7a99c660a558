"""Chat rendering on token ids: the prompt a rollout step sends to the engine, built from segments.

A prompt is `head + (completion + bridge)*`: `head` is the chat template applied to the rendered task
messages (system + user, with the tool schemas) ending in the generation prompt; each completion is the
exact token ids the engine generated (token-in/token-out); each bridge is the template text between the end
of that completion and the next generation prompt (the tool results). Building prompts this way keeps
earlier turns byte-identical between steps, whatever the template would do when re-rendering a whole chat
(Qwen3's thinking-stripping, for example), so the training samples see exactly what the engine saw.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["ChatFormat"]

# Stand-ins for the turns before a bridge: a bridge is rendered after them and cut after the assistant's
# end-of-turn token, so it does not depend on the real (long) conversation.
_STUB = [{"role": "user", "content": "."}, {"role": "assistant", "content": "."}]


class ChatFormat:
    """Token-level rendering of an agent conversation for one tokenizer and its chat template."""

    def __init__(self, tokenizer, extra_stop_ids: list[int] = ()):
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos token: cannot tell where a completion ends")
        if not tokenizer.chat_template:
            raise ValueError("the tokenizer has no chat template; pass a chat model or set one")
        self.tokenizer = tokenizer
        self.eos_id = tokenizer.eos_token_id
        self.eos = tokenizer.convert_ids_to_tokens(self.eos_id)
        # ids that end an assistant turn (some models list several, e.g. <|im_end|> and <|endoftext|>)
        self.stop_ids = [self.eos_id, *(i for i in extra_stop_ids if i != self.eos_id)]
        self._bridge = lru_cache(maxsize=4096)(self._bridge_uncached)

    @classmethod
    def from_pretrained(cls, model: str) -> "ChatFormat":
        from transformers import AutoTokenizer, GenerationConfig

        try:
            tokenizer = AutoTokenizer.from_pretrained(model)
        except (OSError, ValueError) as e:  # not a model, no tokenizer files, hub unreachable
            raise ValueError(f"model {model}: cannot load its tokenizer ({' '.join(str(e).split())})") from None
        try:
            eos = GenerationConfig.from_pretrained(model).eos_token_id
        except OSError:  # no generation_config.json
            eos = None
        try:
            return cls(tokenizer, [eos] if isinstance(eos, int) else (eos or []))
        except ValueError as e:  # no chat template, no eos token
            raise ValueError(f"model {model}: {e}") from None

    def text(self, messages: list[dict], add_generation_prompt: bool, tools: list[dict] | None = None) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=tools or None, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def head_ids(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        """The task messages (no assistant turn yet) and tool schemas, up to the generation prompt."""
        return self.encode(self.text(messages, add_generation_prompt=True, tools=tools))

    def completion_ids(self, text: str) -> list[int]:
        """Ids of an assistant turn known only as text (a chat endpoint, a scripted teacher, an edited turn)."""
        return self.encode(text) + [self.eos_id]

    def bridge_ids(self, messages: tuple[tuple[str, str], ...]) -> list[int]:
        """What follows a completion's end-of-turn token up to the next generation prompt.

        `messages` are the (role, content) pairs between two assistant turns, usually tool results.
        """
        return self._bridge(messages)

    def _bridge_uncached(self, messages: tuple[tuple[str, str], ...]) -> list[int]:
        before = self.text(_STUB, add_generation_prompt=False)
        after = self.text(_STUB + [{"role": r, "content": c} for r, c in messages], add_generation_prompt=True)
        cut = before.rfind(self.eos)
        if cut < 0 or not after.startswith(before[: cut + len(self.eos)]):
            raise ValueError("this chat template re-renders earlier turns; cannot build incremental prompts")
        return self.encode(after[cut + len(self.eos) :])
