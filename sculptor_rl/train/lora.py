"""LoRA for SFT and RL through TRL's own `ModelConfig` and `get_peft_config`.

`LoraSettings` is a mixin of the training configs holding `ModelConfig`'s PEFT fields (`use_peft`, `lora_r`,
`lora_alpha`, `lora_dropout`, `lora_target_modules`, ... with TRL's help texts), built from that class rather
than copied, so both configs take exactly TRL's names. The one default we change: the adapters go on every
linear layer (`lora_target_modules: [all-linear]`), not only on the architecture's attention projections.
"""

from __future__ import annotations

import dataclasses
import typing

from trl import ModelConfig, get_peft_config

__all__ = ["LoraSettings", "peft_config"]

_NAMES = [f.name for f in dataclasses.fields(ModelConfig)
          if f.name in ("use_peft", "use_rslora", "use_dora") or f.name.startswith("lora_")]
_DEFAULTS = {"lora_target_modules": ["all-linear"]}


def _field(f: dataclasses.Field):
    if f.name in _DEFAULTS:
        value = _DEFAULTS[f.name]
        return dataclasses.field(default_factory=lambda: list(value), metadata=f.metadata)
    if f.default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=f.default_factory, metadata=f.metadata)
    return dataclasses.field(default=f.default, metadata=f.metadata)


_HINTS = typing.get_type_hints(ModelConfig)
LoraSettings = dataclasses.make_dataclass(
    "LoraSettings", [(f.name, _HINTS[f.name], _field(f)) for f in dataclasses.fields(ModelConfig) if f.name in _NAMES])
LoraSettings.__module__ = __name__
LoraSettings.__doc__ = "TRL's `ModelConfig` PEFT fields (the LoRA adapters a training config asks for)."


def peft_config(cfg):
    """The `peft.LoraConfig` a config's `LoraSettings` ask for (TRL's `get_peft_config`), or None."""
    values = {name: getattr(cfg, name) for name in _NAMES}
    if values["lora_target_modules"] == ["all-linear"]:
        values["lora_target_modules"] = "all-linear"  # peft's keyword for every linear layer is a string
    return get_peft_config(ModelConfig(**values))
