"""Which memory entries a query retrieves: BM25 similarity of queries, fixed top-k, and Dynamic "n".

Dynamic "n" (MemToolAgent, §3.1, Algorithm 1) picks how many entries to take from the shape of the sorted
similarity curve: x = the similarities sorted descending; for j = R .. |x|-R-1 a first-derivative estimate over a
window of radius R,

    y(j) = -sum_{t=-R..R} t * x(j+t) / sum_{t=-R..R} t^2,

is large where the similarity drops suddenly; `scipy.signal.find_peaks(y, prominence=...)` finds those drops,
and the chosen peak (the first by default; the paper used the second on PEToolBench) at j gives n = j + 1
entries (x[0..j], the side before the drop). The paper writes n <- peaks[peak_number] without saying how an index
of y maps to a count; j + 1 is the reading under which a clean step after entry i gives n = i + 1 (a step is a flat
two-point peak of y, which find_peaks reports at its left point). Where the curve is too short for a window
(|x| < 2R + 1) or has no such peak, fixed top-k is used (`fallback`). As written, the algorithm never returns
n <= R + 1 (no window is centred on the first R entries, and find_peaks never reports y's end points): a drop
after the best few entries, frequent with a small memory and sparse lexical scores, is not seen, and the fallback
(or a later knee) decides. The paper's defaults: R = 10, prominence 1e-5; its similarities are embedding
cosines, ours BM25 scores (any scorer's list works).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

__all__ = ["RETRIEVALS", "bm25_scores", "bm25s_module", "dynamic_n", "select", "top_k"]

RETRIEVALS = ("none", "topk", "dynamic")


def bm25s_module():
    """`bm25s`, its logger back at the root's level: on import it sets its own to DEBUG, and every index built
    then logs a line ("Building index from IDs objects"), hundreds per run."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.NOTSET)
    return bm25s


def bm25_scores(query: str, docs: Sequence[str]) -> list[float]:
    """The BM25 score of each of `docs` for `query` (English stop words dropped); 0.0 for every doc when the
    query has no indexed word, [] without docs."""
    bm25s = bm25s_module()

    if not docs:
        return []
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(list(docs), stopwords="en", show_progress=False), show_progress=False)
    words = bm25s.tokenize(query, stopwords="en", return_ids=False, show_progress=False)[0]
    return [float(s) for s in retriever.get_scores(words)] if words else [0.0] * len(docs)


def top_k(scores: Sequence[float], k: int) -> list[int]:
    """Indices of the `k` highest scores, best first (ties: the earlier index first)."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    return sorted(range(len(scores)), key=lambda i: -scores[i])[:k]


def dynamic_n(scores: Sequence[float], radius: int = 10, prominence: float = 1e-5, peak: int = 0,
              fallback: int = 5) -> int:
    """How many entries Dynamic "n" retrieves for these similarities (Algorithm 1, see the module docstring);
    min(fallback, |scores|) when the curve is shorter than 2R + 1 or has fewer than `peak` + 1 peaks."""
    from scipy.signal import find_peaks

    if radius < 1:
        raise ValueError(f"radius must be >= 1, got {radius}")
    x = np.sort(np.asarray(scores, dtype=np.float64))[::-1]
    if len(x) < 2 * radius + 1:
        return min(fallback, len(x))
    t = np.arange(-radius, radius + 1, dtype=np.float64)
    # y[i] is y(j) at j = i + R; correlate slides t over x, one full window per point
    y = -np.correlate(x, t, mode="valid") / float(np.sum(t * t))
    peaks, _ = find_peaks(y, prominence=prominence)
    if len(peaks) <= peak:
        return min(fallback, len(x))
    return int(peaks[peak]) + radius + 1


def select(scores: Sequence[float], retrieval: str, k: int = 5, radius: int = 10, prominence: float = 1e-5,
           peak: int = 0) -> list[int]:
    """Indices of the retrieved entries, best first: none, the fixed top-`k`, or Dynamic "n" (top-k fallback)."""
    if retrieval == "none":
        return []
    if retrieval == "topk":
        return top_k(scores, k)
    if retrieval == "dynamic":
        return top_k(scores, dynamic_n(scores, radius, prominence, peak, fallback=k))
    raise ValueError(f"unknown retrieval {retrieval!r}; choose one of {', '.join(RETRIEVALS)}")
