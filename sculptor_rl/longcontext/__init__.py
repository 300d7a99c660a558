"""The long-context task families and the published long-context benchmarks, shared by the environments that read
long contexts (ACM and the no-tool baselines; ToolMem's experiences are built from them).

Five families, generated offline and deterministic by seed: `pi_llm` (proactive interference), `needlebench`
(multi-needle reasoning), `mrcr` (multi-round co-reference), `babilong` (bAbI facts in filler) and `gsm_infinite`
(a graph of quantities among noise statements). Each family module has `generate(num, seed, **params) ->
list[dict]`, `score(record, response) -> float` in [0, 1] and `render_answer(answer) -> str` (the ideal response).
Records (`sculptor_rl.records`) carry `meta.context`, where the long context lies (`records.context_spans` reads
it): the baselines and the teachers take it from there, never from the layout. Records of the published
benchmarks (`importers`, or generated with `format="official"`: `official`) have `meta.benchmark` too, and are
scored by that benchmark's own rule (`benchmark_scoring`). Token counts are chars/4 estimates (no tokenizer
dependency); `context_tokens` params are in the same unit.
"""

from __future__ import annotations

from . import babilong, benchmark_scoring, gsm_infinite, mrcr, needlebench, pi_llm

__all__ = ["FAMILIES", "render_answer", "score"]

FAMILIES = {module.NAME: module for module in (pi_llm, needlebench, mrcr, babilong, gsm_infinite)}


def score(record: dict, response_text: str) -> float:
    """How correct a final response to a long-context record is, in [0, 1]: by its benchmark's own rule for an
    imported record (`meta.benchmark`, see benchmark_scoring), else by its family's."""
    if benchmark_scoring.benchmark(record):
        return benchmark_scoring.score(record, response_text)
    return FAMILIES[record["task"]].score(record, response_text)


def render_answer(record: dict) -> str:
    """The ideal final response to a long-context record (scores 1.0)."""
    if benchmark_scoring.benchmark(record):
        return benchmark_scoring.render_answer(record)
    return FAMILIES[record["task"]].render_answer(record["answer"])
