"""Tasks of any family by name: generate, load, score, render the ideal answer.

A family is a module with `generate(num, seed, **params) -> list[dict]`, `score(record, response) -> float` in
[0, 1] and `render_answer(answer)` (the ideal response; a family whose ideal response depends on more than the gold
defines `render_record(record)` too). The families belong to the environments that run them (the registry names
them: the long-context ones of `sculptor_rl.longcontext`, memtool, tamem,
workbench, nestful, toolmem); records are `sculptor_rl.records`. Records of the published long-context benchmarks
(`meta.benchmark`) are scored by that benchmark's own rule.
"""

from __future__ import annotations

import inspect

from .. import longcontext
from ..longcontext import benchmark_scoring, official
from ..records import load_tasks as load_records
from . import registry

__all__ = ["family", "family_names", "generate", "load_tasks", "render_answer", "score"]

family, family_names = registry.family, registry.family_names


def generate(task: str, num: int, seed: int = 0, format: str = "native", **params) -> list[dict]:
    """`num` records of family `task`; the same (task, seed, params) always gives the same records.
    `format="official"`: in the published benchmark's own format, scored by its rule (`official`)."""
    generator = family(task).generate
    known = [p for p in inspect.signature(generator).parameters if p not in ("num", "seed")]
    unknown = [p for p in params if p not in known]
    if unknown:
        raise ValueError(f"unknown {task} parameter {unknown[0]!r} (known: {', '.join(known)})")
    if format not in ("native", "official") or (format == "official" and task not in official.ROWS):
        raise ValueError(f"format must be native or official (official for {', '.join(official.ROWS)}), "
                         f"got {format!r} for {task}")
    records = generator(num, seed, **params)
    return [official.convert(r) for r in records] if format == "official" else records


def _long_context(record: dict) -> bool:
    return bool(benchmark_scoring.benchmark(record)) or record["task"] in longcontext.FAMILIES


def score(record: dict, response_text: str) -> float:
    """How correct a final response is, in [0, 1]: by its benchmark's own rule for an imported record
    (`meta.benchmark`), else by its family's."""
    if _long_context(record):
        return longcontext.score(record, response_text)
    return family(record["task"]).score(record, response_text)


def render_answer(record: dict) -> str:
    """The ideal final response for a record (scores 1.0)."""
    if _long_context(record):
        return longcontext.render_answer(record)
    module = family(record["task"])
    if hasattr(module, "render_record"):  # the ideal answer depends on more than the gold (tamem's open-domain)
        return module.render_record(record)
    return module.render_answer(record["answer"])


def load_tasks(source, split: str = "train", limit: int | None = None, environment: str | None = None) -> list[dict]:
    """`records.load_tasks`, each record's task checked: a built-in family, a published benchmark, or one of
    `environment`'s own `task_families` (a user's environment names its own)."""
    known = {*family_names(), *benchmark_scoring.BENCHMARKS}
    if environment:
        known |= set(registry.env_class(environment).task_families)
    return load_records(source, split, limit, known)
