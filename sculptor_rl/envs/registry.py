"""The environments by name, each imported when first named (importing the registry loads none of them).

A name is one of
- a built-in (`BUILTIN`: the packages under `sculptor_rl/envs/`),
- an import path `package.module:Class` (a user's environment; every process of an `accelerate launch`, a Ray
  worker or a SLURM job imports it the same way),
- an installed package's entry point in the group `sculptor_rl.environments` (`name = "package.module:Class"`),
- or a class added in this process with `register_env`.
A name that does not import, or names something that is not an `Env`, is one ValueError naming it, raised before
any engine starts.

A built-in's entry also names what the rest of the house looks up by name, all as import paths: its task families
(`family`: generate/score/render_answer modules), the scripted teacher of those families (`teacher`) and the
importers of its benchmarks' published files (`importer`, for `sculptor-rl data import`).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from dataclasses import dataclass, field
from importlib.metadata import entry_points

from .base import Env

__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "env_class", "env_names", "family", "family_env", "family_names",
           "import_records", "importer_names", "missing_family", "params_of", "register_env", "teacher"]

ENTRY_POINT_GROUP = "sculptor_rl.environments"
LONG_CONTEXT = ("pi_llm", "needlebench", "mrcr", "babilong", "gsm_infinite")
LONG_CONTEXT_BENCHMARKS = (*LONG_CONTEXT, "longbench_v2", "frames")


@dataclass(frozen=True)
class Entry:
    """A built-in environment: its class, and what it owns that others look up by name (import paths)."""

    env: str  # "module:Class"
    families: dict[str, str] = field(default_factory=dict)  # task family -> its module
    teacher: str | None = None  # "module:function", the scripted teacher of its families
    importers: dict[str, str] = field(default_factory=dict)  # format -> "module:function(format, source, **options)"


_ACM_FAMILIES = {name: f"sculptor_rl.longcontext.{name}" for name in LONG_CONTEXT}
BUILTIN: dict[str, Entry] = {
    "acm": Entry("sculptor_rl.envs.acm:AcmEnv", _ACM_FAMILIES, "sculptor_rl.envs.acm.teacher:teach",
                 {fmt: "sculptor_rl.longcontext.importers:import_benchmark" for fmt in LONG_CONTEXT_BENCHMARKS}),
    "full": Entry("sculptor_rl.envs.baselines:FullEnv"),
    "truncate": Entry("sculptor_rl.envs.baselines:TruncateEnv"),
    "bm25": Entry("sculptor_rl.envs.baselines:Bm25Env"),
    "memtool": Entry("sculptor_rl.envs.memtool:MemToolEnv", {"memtool": "sculptor_rl.envs.memtool.sessions"},
                     "sculptor_rl.envs.memtool.teacher:teach"),
    "tamem": Entry("sculptor_rl.envs.tamem:TamemEnv", {"tamem": "sculptor_rl.envs.tamem.conversations"},
                   "sculptor_rl.envs.tamem.teacher:teach", {"locomo": "sculptor_rl.envs.tamem.locomo:import_records"}),
    "memtoolagent": Entry("sculptor_rl.envs.memtoolagent:MemToolAgentEnv",
                          {"workbench": "sculptor_rl.envs.memtoolagent.tasks",
                           "nestful": "sculptor_rl.envs.memtoolagent.nestful"},
                          "sculptor_rl.envs.memtoolagent.teacher:teach",
                          {fmt: "sculptor_rl.envs.memtoolagent.importers:import_records"
                           for fmt in ("workbench", "nestful")}),
    "toolmem": Entry("sculptor_rl.envs.toolmem:ToolMemEnv", {"toolmem": "sculptor_rl.envs.toolmem.family"},
                     "sculptor_rl.envs.toolmem.teacher:teach",
                     {"biggen": "sculptor_rl.envs.toolmem.biggen:import_records"}),
    # the other context-management paradigms, on the long-context families (their teachers: the `teach` hooks)
    "fold": Entry("sculptor_rl.envs.fold:FoldEnv"),
    "memact": Entry("sculptor_rl.envs.memact:MemActEnv"),
    "resum": Entry("sculptor_rl.envs.resum:ReSumEnv"),
    "mem1": Entry("sculptor_rl.envs.mem1:Mem1Env"),
    "memagent": Entry("sculptor_rl.envs.memagent:MemAgentEnv"),
}
_REGISTERED: dict[str, type[Env]] = {}  # register_env's, this process only


def _load(path: str, what: str):
    """The object at import path "module:attr" (ValueError naming `what` and the path when it does not import)."""
    module, _, attr = path.partition(":")
    try:
        obj = importlib.import_module(module)
        for part in attr.split(".") if attr else []:
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{what} {path!r} does not import: {type(e).__name__}: {e}") from None
    return obj


def _entry_points() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def env_names() -> list[str]:
    """Every environment name known without importing one: built-ins, registered, installed entry points."""
    return [*BUILTIN, *(n for n in _REGISTERED if n not in BUILTIN),
            *(n for n in _entry_points() if n not in BUILTIN and n not in _REGISTERED)]


def env_class(name: str) -> type[Env]:
    """The environment class `name` stands for (see the module docstring), imported now."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"an environment is a name or an import path 'package.module:Class', got {name!r}")
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name in BUILTIN:
        path = BUILTIN[name].env
    elif ":" in name:
        path = name
    elif name in (points := _entry_points()):
        path = points[name]
    else:
        raise ValueError(f"unknown environment {name!r}; choose one of {', '.join(env_names())}, or give an import "
                         f"path 'package.module:Class' or an entry point of group {ENTRY_POINT_GROUP}")
    cls = _load(path, "environment")
    if not (isinstance(cls, type) and issubclass(cls, Env)):
        raise ValueError(f"environment {name!r} ({path}) is {cls!r}, not a subclass of sculptor_rl.envs.Env")
    return cls


def register_env(cls: type[Env]) -> type[Env]:
    """Add an environment class under its `name` in this process (a class decorator). Other processes (an
    `accelerate launch`'s ranks, Ray workers) do not see it: name it by import path or entry point there."""
    if not (isinstance(cls, type) and issubclass(cls, Env)):
        raise TypeError(f"an environment is a subclass of sculptor_rl.envs.Env, got {cls!r}")
    taken = _REGISTERED.get(cls.name) or (cls.name in BUILTIN and env_class(cls.name))
    if taken and taken is not cls:
        raise ValueError(f"environment name {cls.name!r} is taken by {taken.__qualname__}")
    _REGISTERED[cls.name] = cls
    return cls


def params_of(name: str, params: dict | None = None):
    """Environment `name`'s parameters as its `Params` dataclass (ValueError naming the unknown environment, the
    unknown parameter, or the value its checks reject)."""
    kind = env_class(name).Params
    known = [f.name for f in dataclasses.fields(kind)]
    for key in params or {}:
        if key not in known:
            takes = f"takes {', '.join(known)}" if known else "takes no parameters"
            raise ValueError(f"unknown parameter {key!r} of the {name} environment (it {takes})")
    return kind(**(params or {}))


# BUILTIN read by what is looked up: task family -> its module, family -> its teacher, format -> its importer
_FAMILIES = {fam: module for entry in BUILTIN.values() for fam, module in entry.families.items()}
_TEACHERS = {fam: entry.teacher for entry in BUILTIN.values() if entry.teacher for fam in entry.families}
_IMPORTERS = {fmt: path for entry in BUILTIN.values() for fmt, path in entry.importers.items()}


def family_names() -> list[str]:
    """Every built-in task family (generate/score/render_answer), without importing one."""
    return list(_FAMILIES)


def family(name: str):
    """Task family `name`'s module (generate, score, render_answer), imported now."""
    if name not in _FAMILIES:
        raise ValueError(f"unknown task {name!r} (known: {', '.join(sorted(_FAMILIES))})")
    return _load(_FAMILIES[name], "task family")


def family_env(task_family: str, environment: str | None = None) -> type[Env] | None:
    """The user's environment whose `task_families` lists `task_family` (a family no built-in owns):
    `environment` where given, else the first installed entry point's (each imported now); None if none does."""
    if environment:
        cls = env_class(environment)
        return cls if task_family in cls.task_families else None
    for name in _entry_points():
        cls = env_class(name)
        if task_family in cls.task_families:
            return cls
    return None


def missing_family(task_family: str, environment: str | None) -> str:
    """What to do about a family that neither a built-in nor `environment` owns, as the end of an error message."""
    if environment and environment not in BUILTIN:
        cls = env_class(environment)
        return (f"add {task_family!r} to {cls.__qualname__}.task_families (now: "
                f"{', '.join(cls.task_families) or 'none'}) in {cls.__module__}")
    return ("name the environment that owns it with --environment (a built-in, package.module:Class or an entry "
            f"point of group {ENTRY_POINT_GROUP}), whose class lists it in `task_families`")


def teacher(task_family: str, environment: str | None = None):
    """The scripted teacher of a task family: `teach(task, messages, tools=None) -> dict | str`: the `teach` hook of
    `environment` where it has one and runs the family (the paradigms that run the long-context families each teach
    them their own way), else a built-in's, or the `teach` hook of the user's environment that owns the family
    (`family_env`)."""
    if environment and (own := env_class(environment)).teach is not None and task_family in own.task_families:
        return own.teach
    if task_family in _TEACHERS:
        return _load(_TEACHERS[task_family], "teacher")
    owner = family_env(task_family, environment)
    if owner is not None and owner.teach is not None:
        return owner.teach
    if owner is not None:
        raise ValueError(f"no scripted teacher for task {task_family!r}: {owner.__qualname__} has no `teach` hook "
                         "(docs/writing-an-environment.md)")
    raise ValueError(f"no scripted teacher for task {task_family!r} (have: {', '.join(sorted(_TEACHERS))}); "
                     + missing_family(task_family, environment))


def importer_names() -> list[str]:
    """Every format `sculptor-rl data import` reads."""
    return list(_IMPORTERS)


def import_records(fmt: str, source, **options) -> list[dict]:
    """The records (or experiences) of a benchmark's published file `source` in format `fmt`."""
    if fmt not in _IMPORTERS:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(_IMPORTERS)})")
    function = _load(_IMPORTERS[fmt], "importer")
    taken = [p.name for p in list(inspect.signature(function).parameters.values())[2:]
             if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD]
    if not any(p.kind is p.VAR_KEYWORD for p in inspect.signature(function).parameters.values()):
        unknown = sorted(set(options) - set(taken))
        if unknown:
            raise ValueError(f"unknown {fmt} option {unknown[0]!r} (known: {', '.join(taken) or 'none'})")
    return function(fmt, source, **options)
