"""One way to load a config: a dataclass from a YAML file, overrides and (for the TRL-parsed commands) flags.

Every key is checked against the dataclass's fields and every value against the field's type before the
dataclass is built, so a typo or a wrong type fails with one error naming the file and the key:

    ValueError: configs/acm/rl_x.yaml: unknown key 'max_new_token' for SculptorGRPOConfig (did you mean 'max_new_tokens'?)
    ValueError: configs/acm/eval_y.yaml: key 'num': expected int | None, got 'eight' (str)

`load_config(cls, path, overrides)` serves eval, the pipeline and slurm; `parse_command(cls, argv)` the commands
whose flags TRL's `TrlParser` reads (`rl`, `sft`, `serve`): the `--config` file is checked the same way first.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import types
import typing
from pathlib import Path

import yaml

__all__ = ["SOURCE_TREE", "check_values", "load_config", "parse_command", "read_yaml", "shipped"]

# The folder above the package: a clone's (or an editable install's) root, which holds the shipped configs/. A wheel
# installs the package alone (configs/ is not package data), so there it holds none.
SOURCE_TREE = Path(__file__).resolve().parent.parent


def read_yaml(path: str | Path) -> dict:
    with open(path) as f:
        values = yaml.safe_load(f)
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ValueError(f"{path}: a config file must hold a mapping of settings, got {type(values).__name__}")
    return values


def _fits(value, kind) -> bool:
    """Whether a YAML value can stand for a field of type `kind` (unknown kinds accept anything)."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is typing.Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if kind is type(None):
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return value in {m.value for m in kind} or value in kind.__members__
    if origin in (list, tuple) or kind in (list, tuple):
        return isinstance(value, list) and (not args or origin is tuple or all(_fits(v, args[0]) for v in value))
    if origin is dict or kind is dict:
        return isinstance(value, dict)
    if dataclasses.is_dataclass(kind):
        return isinstance(value, dict)
    return True


def _name(kind) -> str:
    text = getattr(kind, "__name__", None) if not typing.get_args(kind) else None
    return text or str(kind).replace("typing.", "").replace("NoneType", "None")


def check_values(cls, values: dict, source: str) -> None:
    """ValueError naming `source` (a file, "flags") and the key when a key is unknown or a value has the wrong type."""
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls) if f.init}
    for key, value in values.items():
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=1) or sorted(f for f in fields
                                                                               if f.startswith(str(key)))
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{source}: unknown key {key!r} for {cls.__name__}{hint}")
        if not _fits(value, hints.get(key, typing.Any)):
            raise ValueError(f"{source}: key {key!r}: expected {_name(hints[key])}, got {value!r} "
                             f"({type(value).__name__})")


def shipped(path: str | Path, what: str = "--config FILE") -> str:
    """A config path as a command names it: as it is where it exists from the current folder (or is absolute); a
    shipped one (`configs/...`) from the source tree of the installed package where it does not, so the commands'
    defaults work outside a clone. ValueError in one line naming what to pass (`what`) where neither holds it."""
    path = Path(path)
    if path.is_absolute() or path.exists():
        return str(path)
    if (SOURCE_TREE / path).exists():
        return str(SOURCE_TREE / path)
    raise ValueError(f"{path}: not found here nor in sculptor-rl's source tree ({SOURCE_TREE}; an install from a "
                     f"wheel ships no configs/): pass {what}, a copy of it from the repository")


def load_config(cls, path: str | Path | None = None, overrides: dict | None = None, source: str = "flags",
                keep_none: bool = False):
    """`cls` from the YAML file at `path` (if any), then `overrides` (None values are left out: unset flags; with
    `keep_none` they are settings, as `--set key=null` asks); `source` names where the overrides come from in
    errors."""
    values = read_yaml(path) if path else {}
    check_values(cls, values, str(path))
    given = {k: v for k, v in (overrides or {}).items() if keep_none or v is not None}
    check_values(cls, given, source)
    try:
        return cls(**{**values, **given})
    except (ValueError, TypeError) as e:  # the config's own checks
        raise ValueError(f"{path or 'config'}: {e}") from None


def parse_command(cls, argv: list[str], prog: str | None = None):
    """The config of a command TrlParser reads (`rl`, `sft`, `serve`): `--config FILE` (checked like
    `load_config`), then flags, which override the file."""
    from trl import TrlParser

    argv = list(argv)
    if "--config" in argv:
        i = argv.index("--config")
        if i + 1 >= len(argv):
            raise ValueError("--config needs a file")
        check_values(cls, read_yaml(argv[i + 1]), argv[i + 1])
    (cfg,) = TrlParser((cls,), prog=prog).parse_args_and_config(argv)
    return cfg
