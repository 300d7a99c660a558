"""Intervals and paired tests (sculptor_rl.stats) against values computed by hand, the formulas written out, and
their coverage / error rates by simulation with fixed seeds."""

import math

import numpy as np
import pytest

from sculptor_rl.stats import (binomial_two_sided, bootstrap_mean, interval, mcnemar_exact, mcnemar_power,
                               mcnemar_tasks_needed, paired_bootstrap, wilson, wilson_halfwidth, wilson_tasks_needed)

Z = 1.959963984540054  # the 97.5 % normal quantile


@pytest.mark.parametrize("k,n,expected", [
    (0, 20, (0.0, Z**2 / (20 + Z**2))),  # 0/n: the upper bound is z²/(n + z²) = 0.16113
    (20, 20, (20 / (20 + Z**2), 1.0)),  # n/n: the mirror image
    (10, 20, (0.29930, 0.70070)),  # centre 0.5, half-width z √(1/80 + z²/1600) / (1 + z²/20), by hand
    (3, 10, (0.10778, 0.60322)),  # by hand: centre 0.35550, half-width 0.24772
])
def test_wilson_known_values(k, n, expected):
    lo, hi = wilson(k, n)
    assert lo == pytest.approx(expected[0], abs=5e-5) and hi == pytest.approx(expected[1], abs=5e-5)


@pytest.mark.parametrize("k,n", [(1, 20), (7, 30), (45, 50), (130, 400)])
def test_wilson_bounds_solve_the_score_equation(k, n):
    """The Wilson bounds are the p where the score statistic |k/n - p| / √(p(1-p)/n) equals z."""
    for p in wilson(k, n):
        assert abs(k / n - p) / math.sqrt(p * (1 - p) / n) == pytest.approx(Z, rel=1e-9)


def test_wilson_coverage_is_near_nominal():
    """The exact coverage (summed over k) at n = 20 and 100 for several true rates: between 92 % and 98 %."""
    for n in (20, 100):
        for p in (0.1, 0.3, 0.5):
            coverage = sum(math.comb(n, k) * p**k * (1 - p) ** (n - k)
                           for k in range(n + 1) if wilson(k, n)[0] <= p <= wilson(k, n)[1])
            assert 0.92 <= coverage <= 0.98, (n, p, coverage)


def test_wilson_halfwidth_shrinks_like_one_over_root_n():
    assert wilson_halfwidth(0.5, 100) == pytest.approx(0.0960, abs=1e-3)
    assert wilson_halfwidth(0.5, 400) == pytest.approx(wilson_halfwidth(0.5, 100) / 2, rel=0.02)
    assert wilson(0, 0) == (0.0, 1.0)


def test_bootstrap_interval_covers_the_mean_about_95_percent():
    """400 samples of 40 skewed values (exponential, mean 1): the interval holds the true mean 91-98 % of the time."""
    rng = np.random.default_rng(7)
    hits = sum(lo <= 1.0 <= hi for lo, hi in (bootstrap_mean(rng.exponential(1.0, 40), resamples=1000)
                                              for _ in range(400)))
    assert 0.89 <= hits / 400 <= 0.98, hits


def test_bootstrap_is_reproducible_and_centred():
    values = [0.0, 0.25, 0.5, 0.5, 1.0, 0.75, 0.25, 0.0, 1.0, 0.5]
    lo, hi = bootstrap_mean(values)
    assert (lo, hi) == bootstrap_mean(values)  # the fixed seed
    assert lo < np.mean(values) < hi
    # the normal approximation's interval, mean ± 1.96 s/√n, is about the same for this symmetric sample
    half = Z * np.std(values) / math.sqrt(len(values))
    assert (hi - lo) / 2 == pytest.approx(half, rel=0.12)
    assert bootstrap_mean([]) is None and bootstrap_mean([0.3] * 5) == pytest.approx((0.3, 0.3))


def test_interval_uses_wilson_for_rates_and_the_bootstrap_for_means():
    assert interval([1, 0, 0, 1, 0]) == wilson(2, 5)
    assert interval([0.5, 0, 1, 1]) == bootstrap_mean([0.5, 0, 1, 1])
    assert interval([]) is None


def test_exact_binomial_by_hand():
    # 1 of 10 discordant pairs went one way: 2 (C(10,0) + C(10,1)) / 2^10 = 22 / 1024
    assert binomial_two_sided(1, 10) == pytest.approx(22 / 1024)
    assert binomial_two_sided(9, 10) == binomial_two_sided(1, 10)
    assert binomial_two_sided(5, 10) == 1.0 and binomial_two_sided(0, 0) == 1.0
    assert binomial_two_sided(0, 5) == pytest.approx(2 / 32)


def test_mcnemar_exact_counts_the_discordant_tasks():
    a = [1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]
    b = [1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0]
    r = mcnemar_exact(a, b)
    assert (r["both"], r["only_a"], r["only_b"], r["neither"], r["n"]) == (2, 1, 9, 2, 14)
    assert r["p"] == pytest.approx(22 / 1024)  # only the 10 discordant tasks count: a binomial test at 1/2
    assert mcnemar_exact(b, a)["p"] == r["p"]
    assert mcnemar_exact([1, 0, 1], [1, 0, 1])["p"] == 1.0  # no discordant task: no evidence
    with pytest.raises(ValueError, match="equal lengths"):
        mcnemar_exact([1], [1, 0])


def test_paired_bootstrap_sees_a_difference_that_task_variance_hides():
    """A small, consistent gain on tasks of very different difficulty: the paired test finds it (p < 0.01) while
    the two unpaired intervals overlap."""
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 0.9, 30)
    b = a + 0.05 + rng.normal(0, 0.02, 30)
    r = paired_bootstrap(a, b)
    assert r["n"] == 30 and r["diff"] == pytest.approx(np.mean(b - a))
    assert r["ci"][0] < r["diff"] < r["ci"][1] and r["ci"][0] > 0 and r["p"] < 0.01
    (_, a_hi), (b_lo, _) = bootstrap_mean(a), bootstrap_mean(b)
    assert b_lo < a_hi
    offset = paired_bootstrap(a + 5, b + 5)  # adding a per-task constant to both changes nothing
    assert offset["p"] == r["p"] and offset["ci"] == pytest.approx(r["ci"])
    assert paired_bootstrap([0, 1, 1], [0, 1, 1])["p"] == 1.0


def test_paired_bootstrap_false_positive_rate_is_near_alpha():
    """No true difference (symmetric noise), 300 experiments of 40 tasks: p < 0.05 in 2-10 % of them."""
    rng = np.random.default_rng(11)
    rejections = 0
    for _ in range(300):
        a = rng.uniform(0, 1, 40)
        rejections += paired_bootstrap(a, a + rng.normal(0, 0.1, 40), resamples=1000)["p"] < 0.05
    assert 0.02 <= rejections / 300 <= 0.10, rejections


def test_mcnemar_power_matches_simulation():
    rng = np.random.default_rng(5)
    n, p_only_a, p_only_b = 60, 0.05, 0.2
    kinds = rng.choice(3, size=(2000, n), p=[p_only_a, p_only_b, 1 - p_only_a - p_only_b])
    simulated = np.mean([binomial_two_sided(int((k == 1).sum()), int((k < 2).sum())) < 0.05 for k in kinds])
    assert mcnemar_power(n, p_only_a, p_only_b) == pytest.approx(simulated, abs=0.03)


@pytest.mark.parametrize("p_only_a,p_only_b", [(0.05, 0.15), (0.0, 0.1), (0.1, 0.3)])
def test_tasks_needed_reach_the_power(p_only_a, p_only_b):
    n = mcnemar_tasks_needed(p_only_a, p_only_b)
    psi, delta = p_only_a + p_only_b, p_only_b - p_only_a  # Connor's normal approximation, written out
    approx = (Z * math.sqrt(psi) + 0.8416212335729143 * math.sqrt(psi - delta**2)) ** 2 / delta**2
    assert math.ceil(approx) <= n <= 1.15 * approx  # the exact test is conservative: a few more tasks
    assert mcnemar_power(n, p_only_a, p_only_b) >= 0.8 > mcnemar_power(n - 1, p_only_a, p_only_b)
    assert mcnemar_tasks_needed(p_only_a, p_only_b, power=0.9) > n


def test_readme_sample_size_tables_are_what_stats_computes():
    from pathlib import Path

    text = Path(__file__).parents[1].joinpath("docs", "statistics.md").read_text()
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| ")}
    for label, rate in [("± Wilson half-width (points) at a rate of 5 %", 0.05), ("… at 20 %", 0.2),
                        ("… at 50 %", 0.5)]:
        assert rows[label] == [f"{100 * wilson_halfwidth(rate, n):.1f}" for n in (20, 50, 100, 200, 500)]
    paired = {"0 % → 10 % (0 / 10 %)": (0, 0.1), "0 % → 20 % (0 / 20 %)": (0, 0.2),
              "+10 points, the checkpoints disagreeing on 20 % of tasks (5 / 15 %)": (0.05, 0.15),
              "+20 points, disagreeing on 30 % (5 / 25 %)": (0.05, 0.25),
              "+5 points, disagreeing on 15 % (5 / 10 %)": (0.05, 0.1)}
    for label, (p_only_a, p_only_b) in paired.items():
        assert rows[label] == [str(mcnemar_tasks_needed(p_only_a, p_only_b))]
    unpaired = " ".join(text.split("Without pairing")[1].split())
    assert (f"need {wilson_tasks_needed(0, 0.1)} tasks for 0 % vs 10 %, {wilson_tasks_needed(0.1, 0.2)} for 10 % vs "
            f"20 % and {wilson_tasks_needed(0.3, 0.5)} for 30 % vs 50 %") in unpaired


def test_wilson_tasks_needed_is_the_first_n_where_the_intervals_part():
    n = wilson_tasks_needed(0.1, 0.3)
    assert wilson(round(0.1 * n), n)[1] < wilson(round(0.3 * n), n)[0]
    assert wilson(round(0.1 * (n - 1)), n - 1)[1] >= wilson(round(0.3 * (n - 1)), n - 1)[0]
    assert wilson_tasks_needed(0.3, 0.1) == n


# ---- the statistics in an evaluation report (sculptor_rl.eval.report) ----


def _run(model, scores, reductions, mode="acm"):
    """One (model, mode) run over pi_llm tasks pi_llm-0..n-1, summarized as `evaluate` summarizes it."""
    from sculptor_rl.metrics import per_rollout, summarize, summarize_by
    from sculptor_rl.trajectory import Step, Trajectory

    trajs = [Trajectory(task_id=f"pi_llm-{i}", task="pi_llm", messages=[], answer="x", score=s, stop_reason="answer",
                        steps=[Step(prompt_ids=[1], completion_ids=[2], logprobs=None, text="x")],
                        context_tokens_before=1000, context_tokens_after=round(1000 * (1 - r)), reward=s)
             for i, (s, r) in enumerate(zip(scores, reductions))]
    family = {**summarize(trajs), "wall_time": 1.0,
              "buckets": summarize_by(trajs, lambda t: "32/3" if int(t.task_id.split("-")[1]) % 2 else "16/3")}
    return {"model": model, "mode": mode, "tasks": {"pi_llm": family}, "average": family["accuracy"],
            "overall": summarize(trajs), "wall_time": 1.0, "rollouts": per_rollout(trajs)}


def test_report_has_intervals_paired_comparisons_and_error_bars(tmp_path):
    import json

    from sculptor_rl.eval.report import write_report

    n = 40
    base = [0.0] * n
    sft = [1.0 if i % 4 == 0 else 0.0 for i in range(n)]  # 10 tasks right
    rl = [1.0 if i % 4 == 0 or i % 5 == 1 else 0.0 for i in range(n)]  # 6 more right, none lost
    rng = np.random.default_rng(0)
    runs = [_run("base", base, [0.0] * n), _run("sft", sft, rng.uniform(0.2, 0.4, n)),
            _run("rl", rl, rng.uniform(0.5, 0.7, n))]
    runs[2]["rollouts"] = runs[2]["rollouts"][::-1]  # pairing is by task id, not by order
    full = [_run(m, [0.0] * n, [0.0] * n, mode="full") for m in ("base", "sft", "rl")]
    full[2]["rollouts"][0].update(score=1.0, correct=1)
    results = {"env": "acm", "tasks": ["pi_llm"], "models": ["base", "sft", "rl"], "modes": ["acm", "full"],
               "runs": [*runs, *full], "config": {}}
    write_report(results, tmp_path)
    saved = json.loads((tmp_path / "results.json").read_text())
    first, second, third, *in_full = saved["comparisons"]  # consecutive models, then the third against the first
    assert [(c["mode"], c["a"], c["b"], c["correct"]["only_b"]) for c in in_full] == [
        ("full", "base", "sft", 0), ("full", "sft", "rl", 1), ("full", "base", "rl", 1)]
    assert (third["a"], third["b"], third["correct"]["only_b"]) == ("base", "rl", 16)
    assert (first["a"], first["b"], first["task"], first["n"]) == ("base", "sft", "pi_llm", n)
    assert (first["correct"]["only_a"], first["correct"]["only_b"]) == (0, 10)
    assert first["correct"]["p"] == pytest.approx(2 / 2**10)
    assert (second["correct"]["only_a"], second["correct"]["only_b"], second["correct"]["both"]) == (0, 6, 10)
    assert second["correct"]["p"] == pytest.approx(2 / 2**6)
    assert second["accuracy"]["diff"] == pytest.approx(6 / n) and second["accuracy"]["p"] < 0.05
    assert second["context_reduction"]["diff"] == pytest.approx(
        np.mean([r["context_reduction"] for r in runs[2]["rollouts"]]) - runs[1]["overall"]["context_reduction"])
    assert saved["runs"][1]["tasks"]["pi_llm"]["ci"]["accuracy"] == pytest.approx(list(wilson(10, n)))
    md = (tmp_path / "results.md").read_text()
    table = md.split("## Accuracy (%)\n\n")[1].split("\n\n")[0].splitlines()
    lo, hi = wilson(10, n)
    assert table[3] == f"| sft | acm | 25.0 [{100 * lo:.1f}, {100 * hi:.1f}] | 25.0 |"
    paired = md.split("## Paired comparisons (same tasks)\n\n")[1].split("\n\n")[0].splitlines()
    assert paired[3].startswith("| acm | sft → rl | PI-LLM | 40 | +15.0 [") and "| 0 / 6 | 0.031 |" in paired[3]
    assert (tmp_path / "accuracy_vs_length.png").read_bytes()[:4] == b"\x89PNG"


def test_report_of_runs_saved_without_per_rollout_values_has_no_comparisons(tmp_path):
    from sculptor_rl.eval.report import write_report

    runs = [_run("base", [0.0, 1.0], [0.0, 0.0]), _run("sft", [1.0, 1.0], [0.5, 0.5])]
    for run in runs:
        del run["rollouts"], run["tasks"]["pi_llm"]["ci"]  # as an older evaluation saved them
    results = {"env": "acm", "tasks": ["pi_llm"], "models": ["base", "sft"], "modes": ["acm"], "runs": runs,
               "config": {}}
    write_report(results, tmp_path)
    md = (tmp_path / "results.md").read_text()
    assert results["comparisons"] == [] and "Paired comparisons" not in md
    assert "| sft | acm | 100.0 | 100.0 |" in md


def test_summaries_carry_intervals_of_their_per_rollout_values():
    from sculptor_rl.metrics import per_rollout, summarize

    runs = _run("m", [1.0, 0.0, 0.5, 1.0], [0.5, 0.0, 0.25, 0.75])
    s = runs["overall"]
    assert [r["score"] for r in runs["rollouts"]] == [1.0, 0.0, 0.5, 1.0]
    assert [r["correct"] for r in runs["rollouts"]] == [1, 0, 0, 1]
    assert s["ci"]["correct"] == pytest.approx(list(wilson(2, 4)))  # a rate: Wilson
    assert s["ci"]["accuracy"] == pytest.approx(list(bootstrap_mean([1.0, 0.0, 0.5, 1.0])))  # partial credit
    assert s["ci"]["context_reduction"] == pytest.approx(list(bootstrap_mean([0.5, 0.0, 0.25, 0.75])))
    assert s["ci"]["format_error_rate"] == pytest.approx(list(wilson(0, 4)))
    zero = _run("m", [0.0, 0.0], [0.0, 0.0])["overall"]["ci"]
    assert zero["accuracy"] == pytest.approx(list(wilson(0, 2)))  # 0/1 scores: a rate, never a point
    assert zero["context_reduction"] == [0.0, 0.0]  # a mean stays a bootstrap mean
    assert per_rollout([]) == [] and summarize([]) == {"n": 0}
