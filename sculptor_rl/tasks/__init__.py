"""Long-context tasks: generators, scorers and dataset IO.

Five families, generated offline and deterministic by seed: `pi_llm` (proactive interference),
`needlebench` (multi-needle reasoning), `mrcr` (multi-round co-reference), `babilong` (bAbI facts in
filler) and `gsm_infinite` (a graph of quantities among noise statements). Each family module has
`generate(num, seed, **params) -> list[dict]`, `score(record, response) -> float` in [0, 1] and
`render_answer(answer) -> str` (the ideal response; a family whose ideal response depends on more than the gold
defines `render_record(record)` too).

A record (one JSON object per line in files):

    {"id": "pi_llm-s0-00012", "task": "pi_llm",
     "messages": [{"role": "user", "content": <intro>\\n\\n<long context>\\n\\n<question with answer format>}],
     "answer": <JSON value: a str, or {key: value} for pi_llm>,
     "meta": {"bucket": "4/64", "approx_tokens": 1443, <generation params>, <what the question asks about:
              asked_keys (pi_llm), person (needlebench, babilong), request and occurrence (mrcr)>,
              "question": <the question>, "context": [{"message": 0, "start": 83, "end": 5712}]}}

`meta.context` says where the long context lies (character spans of messages; `common.context_spans` reads
it): the baselines and the teachers take it from there, never from the layout. Records carry no system message:
the environment a record runs in gives its own (`sculptor_rl.envs`). Records of the published benchmarks
(`importers`, `sculptor-rl data import`, or generated with `format="official"`: `official`) have
`meta.benchmark` too, and are scored by that benchmark's own rule (`benchmark_scoring`).
Token counts are chars/4 estimates (no tokenizer dependency); `context_tokens` params are in the same unit.
"""

from __future__ import annotations

from ..memtool import sessions as memtool_sessions
from ..tamem import conversations as tamem_conversations
from ..toolmem import family as toolmem_family
from ..workbench import nestful
from ..workbench import tasks as workbench_tasks
from . import babilong, gsm_infinite, mrcr, needlebench, pi_llm

# long-context: the ACM env's
FAMILIES = {module.NAME: module for module in (pi_llm, needlebench, mrcr, babilong, gsm_infinite)}
# ... and the other environments' families (memtool sessions, toolmem predictions; scored by their env): all that
# generate/load accept
ALL_FAMILIES = {**FAMILIES, memtool_sessions.NAME: memtool_sessions, toolmem_family.NAME: toolmem_family,
               tamem_conversations.NAME: tamem_conversations, workbench_tasks.NAME: workbench_tasks,
               nestful.NAME: nestful}

from ..jsonl import write_jsonl  # noqa: E402
from . import benchmark_scoring  # noqa: E402 (imports pi_llm)
from .io import load_tasks, write_parquet  # noqa: E402 (io needs FAMILIES)

__all__ = ["ALL_FAMILIES", "FAMILIES", "generate", "load_tasks", "render_answer", "score", "write_jsonl",
           "write_parquet"]


def family(task: str):
    if task not in ALL_FAMILIES:
        raise ValueError(f"unknown task {task!r} (known: {', '.join(sorted(ALL_FAMILIES))})")
    return ALL_FAMILIES[task]


def generate(task: str, num: int, seed: int = 0, format: str = "native", **params) -> list[dict]:
    """`num` records of family `task`; the same (task, seed, params) always gives the same records.
    `format="official"`: in the published benchmark's own format, scored by its rule (`official`)."""
    import inspect

    from . import official

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


def score(record: dict, response_text: str) -> float:
    """How correct a final response is, in [0, 1]: by its benchmark's own rule for an imported record
    (`meta.benchmark`, see benchmark_scoring), else by its family's."""
    if benchmark_scoring.benchmark(record):
        return benchmark_scoring.score(record, response_text)
    return family(record["task"]).score(record, response_text)


def render_answer(record: dict) -> str:
    """The ideal final response for a record (scores 1.0)."""
    if benchmark_scoring.benchmark(record):
        return benchmark_scoring.render_answer(record)
    module = family(record["task"])
    if hasattr(module, "render_record"):  # the ideal answer depends on more than the gold (tamem's open-domain)
        return module.render_record(record)
    return module.render_answer(record["answer"])
