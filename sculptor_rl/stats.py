"""95 % intervals and paired tests for evaluation numbers (numpy and the standard library only).

- `wilson(k, n)`: the Wilson score interval of a rate k/n. Unlike the normal (Wald) interval it does not collapse
  to a point at 0/n or n/n, and it keeps close to its nominal coverage down to n ≈ 10.
- `bootstrap_mean(values)`: the percentile bootstrap interval of a mean (partial-credit scores, context
  reduction, reward). A fixed seed makes a report reproducible. It under-covers below n ≈ 20 and is a single
  point when every value is equal: read small-n intervals of means as rough.
- `interval(values)`: Wilson when every value is 0 or 1 (a rate), else the bootstrap of the mean.
- `paired_bootstrap(a, b)`: two checkpoints on the SAME tasks: the mean of b - a, its bootstrap interval and a
  two-sided p-value (the bootstrap distribution shifted to the null mean 0). Pairing removes the task-to-task
  variance, so it detects a difference that two separate intervals (which may overlap) cannot.
- `mcnemar_exact(a, b)`: the exact McNemar test of pass/fail on the same tasks: only the discordant tasks (solved
  by one checkpoint, not the other) carry information, and under "no difference" each is equally likely to go
  either way, so p is a two-sided binomial test of the discordant counts at 1/2.
- How many tasks a claim needs: `mcnemar_tasks_needed` (paired: Connor's 1987 approximation, raised until
  `mcnemar_power`, the exact test's power summed exactly, reaches the target), `wilson_halfwidth` and
  `wilson_tasks_needed` (unpaired: the tasks at which two observed rates get intervals that do not overlap).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Sequence

import numpy as np

__all__ = ["wilson", "wilson_halfwidth", "bootstrap_mean", "interval", "paired_bootstrap", "mcnemar_exact",
           "binomial_two_sided", "mcnemar_power", "mcnemar_tasks_needed", "wilson_tasks_needed"]

RESAMPLES = 4000
SEED = 0


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of k successes in n trials; (0, 1) when n is 0 (nothing is known)."""
    if n == 0:
        return 0.0, 1.0
    z, p = _z(confidence), k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (0.0 if k == 0 else centre - half), (1.0 if k == n else centre + half)


def wilson_halfwidth(p: float, n: int, confidence: float = 0.95) -> float:
    """Half the width of the Wilson interval of an observed rate p over n tasks."""
    lo, hi = wilson(round(p * n), n, confidence)
    return (hi - lo) / 2


def _resampled_means(values: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)


def bootstrap_mean(values: Sequence[float], confidence: float = 0.95, resamples: int = RESAMPLES,
                   seed: int = SEED) -> tuple[float, float] | None:
    """The percentile bootstrap interval of the mean of `values`; None when there are none."""
    x = np.asarray(values, dtype=np.float64)
    if not len(x):
        return None
    means = _resampled_means(x, resamples, seed)
    lo, hi = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(lo), float(hi)


def interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """A rate's Wilson interval when every value is 0 or 1, else the bootstrap interval of the mean."""
    if not len(values):
        return None
    if all(v in (0, 1) for v in values):
        return wilson(int(sum(values)), len(values), confidence)
    return bootstrap_mean(values, confidence)


def paired_bootstrap(a: Sequence[float], b: Sequence[float], confidence: float = 0.95, resamples: int = RESAMPLES,
                     seed: int = SEED) -> dict:
    """{"diff": mean(b - a), "ci": its bootstrap interval, "p": two-sided p-value of "mean(b - a) = 0"}.
    `a[i]` and `b[i]` are the same task's values under the two checkpoints."""
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    if not len(d):
        return {"n": 0, "diff": None, "ci": None, "p": None}
    means = _resampled_means(d, resamples, seed)
    mean = float(d.mean())
    lo, hi = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
    # the null distribution: the resampled means shifted to mean 0; p counts those at least as far from 0
    extreme = int(np.sum(np.abs(means - mean) >= abs(mean) - 1e-12))
    return {"n": len(d), "diff": mean, "ci": [float(lo), float(hi)], "p": (1 + extreme) / (resamples + 1)}


def binomial_two_sided(k: int, n: int) -> float:
    """Two-sided exact binomial p-value of k successes in n trials at p = 1/2 (twice the smaller tail, at most 1)."""
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2**n
    return min(1.0, 2 * tail)


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> dict:
    """The exact McNemar test of two checkpoints' pass/fail on the same tasks (`a[i]`, `b[i]`: task i).
    Returns the 2x2 counts (`both`, `only_a`, `only_b`, `neither`) and `p`."""
    if len(a) != len(b):
        raise ValueError(f"paired results need equal lengths, got {len(a)} and {len(b)}")
    pairs = [(bool(x), bool(y)) for x, y in zip(a, b)]
    only_a = sum(x and not y for x, y in pairs)
    only_b = sum(y and not x for x, y in pairs)
    both = sum(x and y for x, y in pairs)
    return {"n": len(pairs), "both": both, "only_a": only_a, "only_b": only_b,
            "neither": len(pairs) - both - only_a - only_b, "p": binomial_two_sided(only_b, only_a + only_b)}


def mcnemar_power(n: int, p_only_a: float, p_only_b: float, alpha: float = 0.05) -> float:
    """The exact McNemar test's power over n tasks when a task is solved only by checkpoint A with probability
    `p_only_a` and only by B with `p_only_b`: P(p < alpha), summed over the number d of discordant tasks."""
    psi = p_only_a + p_only_b
    q = p_only_b / psi if psi else 0.5
    logfact = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1)))])

    def log_pmf(d: int, p: float) -> np.ndarray:  # Bin(d, p) at k = 0..d
        k = np.arange(d + 1)
        with np.errstate(divide="ignore"):
            return logfact[d] - logfact[k] - logfact[d - k] + k * np.log(p) + (d - k) * np.log1p(-p)

    discordant = np.exp(log_pmf(n, psi)) if 0 < psi < 1 else np.eye(n + 1)[0 if psi == 0 else n]
    power = 0.0
    for d in range(1, n + 1):
        if discordant[d] < 1e-15:
            continue
        null_tail = np.cumsum(np.exp(log_pmf(d, 0.5)))
        below = np.nonzero(2 * null_tail < alpha)[0]  # k <= k_max rejects, and by symmetry k >= d - k_max
        if not len(below):
            continue
        k_max = below[-1]
        alt = np.exp(log_pmf(d, q)) if 0 < q < 1 else np.eye(d + 1)[0 if q == 0 else d]
        power += discordant[d] * (alt[: k_max + 1].sum() + alt[d - k_max :].sum())
    return float(power)


def mcnemar_tasks_needed(p_only_a: float, p_only_b: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Tasks a paired comparison needs so that the exact McNemar test finds the difference p_only_b - p_only_a
    with this power. Starts from the normal approximation (Connor 1987)
    n = (z_{1-α/2} √ψ + z_{power} √(ψ - δ²))² / δ², ψ = p_only_a + p_only_b the discordant rate, δ the difference,
    and goes up to the first n where the exact test's power (`mcnemar_power`) reaches `power` (the exact test is
    conservative: the approximation alone falls a few points short). The more the checkpoints disagree on
    tasks (ψ) for a given net gain (δ), the more tasks it takes."""
    psi, delta = p_only_a + p_only_b, p_only_b - p_only_a
    if delta == 0:
        raise ValueError("no difference to detect")
    za, zb = _z(1 - alpha), NormalDist().inv_cdf(power)
    n = math.ceil((za * math.sqrt(psi) + zb * math.sqrt(psi - delta**2)) ** 2 / delta**2)
    while mcnemar_power(n, p_only_a, p_only_b, alpha) < power:
        n += 1
    return n


def wilson_tasks_needed(p_a: float, p_b: float, confidence: float = 0.95) -> int:
    """The fewest tasks at which observed rates p_a and p_b have Wilson intervals that do not overlap (a claim
    the paired test makes with fewer tasks: this is for checkpoints evaluated on different tasks)."""
    lo_rate, hi_rate = sorted((p_a, p_b))
    if lo_rate == hi_rate:
        raise ValueError("no difference to separate")
    n = 1
    while wilson(round(lo_rate * n), n, confidence)[1] >= wilson(round(hi_rate * n), n, confidence)[0]:
        n += 1
    return n
