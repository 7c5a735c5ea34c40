"""reports/stats.py: t-intervals, paired tests, Holm-Bonferroni, MDD; calibration and power by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from reports.stats import (
    holm,
    mdd_normal,
    mdd_paired_t,
    paired_comparison,
    paired_test,
    sign_flip_pvalue,
    summarize,
    t_interval,
)


def test_t_interval_equals_scipy():
    x = [0.131, 0.142, 0.127, 0.150, 0.139]
    expected = sps.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=sps.sem(x))
    assert t_interval(x) == pytest.approx(expected, abs=1e-12)
    s = summarize(x)
    assert (s.lo, s.hi, s.n) == (pytest.approx(expected[0]), pytest.approx(expected[1]), 5)
    assert s.std == pytest.approx(np.std(x, ddof=1))


def test_degenerate_sizes_and_constant_data():
    assert t_interval([0.3, 0.3, 0.3]) == (0.3, 0.3)
    s = summarize([None, float("nan"), 0.5])  # non-finite values are dropped; n = 1 has no interval
    assert s.n == 1 and s.mean == 0.5 and math.isnan(s.lo) and math.isnan(s.std)
    assert summarize([]).n == 0
    with pytest.raises(ValueError, match="level"):
        t_interval([1.0, 2.0], level=1.5)


def test_paired_t_test_matches_scipy():
    x, y = [0.31, 0.35, 0.33, 0.36], [0.30, 0.32, 0.33, 0.31]
    p, name = paired_test(x, y)
    assert name == "paired t-test"
    assert p == pytest.approx(sps.ttest_rel(x, y).pvalue, abs=1e-14)


def test_sign_flip_exact():
    # all differences equal and positive: only the identity and the all-flip reach |mean| -> 2 / 2^n
    assert sign_flip_pvalue([0.01, 0.01, 0.01]) == pytest.approx(2 / 8)
    assert sign_flip_pvalue([1.0, 2.0, 3.0]) == pytest.approx(2 / 8)
    assert sign_flip_pvalue([1.0, -1.0]) == 1.0
    p, name = paired_test([0.2, 0.3, 0.4], [0.1, 0.2, 0.3])  # constant difference: t undefined -> sign flip
    assert name.startswith("sign-flip") and p == pytest.approx(0.25)


def test_sign_flip_fallback_without_scipy(monkeypatch):
    import reports.stats as st

    monkeypatch.setattr(st, "_scipy_ttest_rel", lambda: None)
    p, name = paired_test([1, 2, 4], [0, 0, 1])
    assert name == "sign-flip permutation" and p == pytest.approx(sign_flip_pvalue([1, 2, 3]))
    with pytest.raises(RuntimeError, match="needs scipy"):
        paired_test([1, 2, 4], [0, 0, 1], method="t")


def test_paired_comparison():
    ref = {0: 0.10, 1: 0.12, 2: 0.14}
    c = paired_comparison({0: 0.09, 1: 0.11, 2: 0.13}, ref)  # -0.01 on every seed: sign-flip p = 0.25
    assert c.n == 3 and c.diff == pytest.approx(-0.01) and c.p == pytest.approx(0.25) and c.within_noise is True
    c = paired_comparison({0: 0.131, 1: 0.152, 2: 0.170}, ref)
    d = np.array([0.031, 0.032, 0.030])
    assert c.p == pytest.approx(sps.ttest_1samp(d, 0).pvalue) and c.within_noise is False
    assert (c.lo, c.hi) == pytest.approx(sps.t.interval(0.95, 2, loc=d.mean(), scale=sps.sem(d)))
    assert c.sd == pytest.approx(d.std(ddof=1))
    c = paired_comparison({0: 0.2, 7: 0.5}, ref)
    assert c.n == 1 and c.seeds == [0] and c.within_noise is None and math.isnan(c.p)
    assert paired_comparison({5: 0.2}, ref).n == 0


def test_holm_by_hand():
    # sorted p = 0.01, 0.02, 0.03, 0.2 with m = 4 -> 0.04, 0.06, 0.06 (monotone), 0.2; NaN is not counted
    adj = holm([0.03, 0.01, float("nan"), 0.2, 0.02])
    assert adj[[1, 4, 0, 3]] == pytest.approx([0.04, 0.06, 0.06, 0.2])
    assert math.isnan(adj[2])
    assert holm([0.6, 0.7]).tolist() == [1.0, 1.0]


@pytest.mark.parametrize("seed", range(5))
def test_holm_equals_the_step_down_rule(seed):
    """Adjusted p < alpha exactly for the hypotheses Holm's sequential procedure rejects."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 0.08, size=12) ** rng.uniform(0.5, 2)
    for alpha in (0.01, 0.05, 0.1):
        order = np.argsort(p)
        rejected = np.zeros(p.size, dtype=bool)
        for i, j in enumerate(order):
            if p[j] >= alpha / (p.size - i):
                break
            rejected[j] = True
        assert np.array_equal(holm(p) < alpha, rejected)


def test_holm_equals_statsmodels():
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    p = np.random.default_rng(0).uniform(size=20) ** 3
    assert holm(p) == pytest.approx(multitest.multipletests(p, method="holm")[1], abs=1e-12)


# ------------------------------------------------------------------------------------ simulations

REPS = 1500


def _simulate(n: int, delta: float, reps: int = REPS, seed: int = 0) -> float:
    """Share of `reps` experiments (n seeds, a seed effect shared by both arms, per-arm noise 0.01) in which the
    paired comparison calls arm and reference different (p < 0.05)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        seed_effect = rng.normal(0.3, 0.02, n)
        arm = dict(enumerate(seed_effect + delta + rng.normal(0, 0.01, n)))
        ref = dict(enumerate(seed_effect + rng.normal(0, 0.01, n)))
        hits += paired_comparison(arm, ref).within_noise is False
    return hits / reps


@pytest.mark.parametrize("n", [2, 3, 5])
def test_null_flagged_at_most_5_percent(n):
    rate = _simulate(n, 0.0, seed=n)
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / REPS), rate


@pytest.mark.parametrize("n", [2, 3, 5])
def test_planted_mdd_detected_at_80_percent(n):
    sd_d = 0.01 * math.sqrt(2)  # the paired difference's true std
    rate = _simulate(n, mdd_paired_t(n, sd_d), seed=10 + n)
    assert rate == pytest.approx(0.8, abs=3 * math.sqrt(0.8 * 0.2 / REPS)), rate


def test_holm_keeps_a_null_table_at_5_percent():
    """A table of 10 null comparisons at n = 3 seeds: any "different" after Holm in at most ~5% of tables."""
    rng = np.random.default_rng(4)
    reps, m, n = 400, 10, 3
    any_flag = 0
    raw_flag = 0
    for _ in range(reps):
        d = rng.normal(0, 0.01, size=(m, n))
        p = np.array([paired_test(row, np.zeros(n))[0] for row in d])
        any_flag += bool((holm(p) < 0.05).any())
        raw_flag += bool((p < 0.05).any())
    assert any_flag / reps <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)
    assert raw_flag / reps > 0.3  # without the correction most such tables would show a "difference"


def test_mdd_values():
    assert mdd_normal(1.0) == pytest.approx(sps.norm.ppf(0.975) + sps.norm.ppf(0.8))
    assert mdd_paired_t(400, 1.0) == pytest.approx(mdd_normal(1 / 20), rel=0.01)  # large n: the normal one
    assert mdd_paired_t(3, 1.0) > mdd_paired_t(5, 1.0) > mdd_paired_t(10, 1.0)
    assert math.isnan(mdd_paired_t(1, 1.0)) and mdd_paired_t(5, 0.0) == 0.0
