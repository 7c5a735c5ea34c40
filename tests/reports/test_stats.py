"""reports/stats.py: bootstrap intervals, paired tests, the within-noise flag."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reports.stats import bootstrap_ci, paired_comparison, paired_test, sign_flip_pvalue, summarize


def test_constant_data_gives_zero_width_interval():
    assert bootstrap_ci([0.3, 0.3, 0.3, 0.3]) == (0.3, 0.3)
    s = summarize([0.25] * 5)
    assert (s.mean, s.lo, s.hi, s.n, s.std) == (0.25, 0.25, 0.25, 5, 0.0)


def test_degenerate_sizes():
    assert bootstrap_ci([0.7]) == (0.7, 0.7)
    lo, hi = bootstrap_ci([])
    assert math.isnan(lo) and math.isnan(hi)
    s = summarize([None, float("nan"), 0.5])  # non-finite values are dropped
    assert s.n == 1 and s.mean == 0.5 and math.isnan(s.std)


def test_three_seeds_interval_by_hand():
    # n = 3: P(resample = all the minimum) = 1/27 > 2.5%, so the 2.5% quantile is the minimum (same for max)
    assert bootstrap_ci([0.10, 0.12, 0.14]) == pytest.approx((0.10, 0.14), abs=1e-12)


def test_seeded_reproducibility():
    x = np.random.default_rng(1).normal(size=12)
    assert bootstrap_ci(x, seed=3) == bootstrap_ci(x, seed=3)
    a, b = bootstrap_ci(x, seed=3), bootstrap_ci(x, seed=4)
    assert a != b and a == pytest.approx(b, abs=0.1)
    lo, hi = bootstrap_ci(x)
    assert lo < x.mean() < hi


def test_coverage_sanity():
    rng = np.random.default_rng(0)
    hits, reps = 0, 300
    for r in range(reps):
        x = rng.normal(1.0, 2.0, size=25)
        lo, hi = bootstrap_ci(x, B=1000, seed=r)
        hits += lo <= 1.0 <= hi
    assert 0.88 <= hits / reps <= 0.99  # nominal 95%; the percentile bootstrap under-covers a little at n = 25


def test_paired_t_test_matches_scipy():
    from scipy.stats import ttest_rel

    x, y = [0.31, 0.35, 0.33, 0.36], [0.30, 0.32, 0.33, 0.31]
    p, name = paired_test(x, y)
    assert name == "paired t-test"
    assert p == pytest.approx(ttest_rel(x, y).pvalue)


def test_sign_flip_exact():
    # all differences equal and positive: only the identity and the all-flip reach |mean| -> 2 / 2^n
    assert sign_flip_pvalue([0.01, 0.01, 0.01]) == pytest.approx(2 / 8)
    # d = (1, 2, 3): |mean(s d)| >= 2 only for (+,+,+) and (-,-,-)
    assert sign_flip_pvalue([1.0, 2.0, 3.0]) == pytest.approx(2 / 8)
    # d = (1, -1): every sign vector gives |mean| in {0, 1}; observed 0 -> p = 1
    assert sign_flip_pvalue([1.0, -1.0]) == 1.0
    p, name = paired_test([0.2, 0.3, 0.4], [0.1, 0.2, 0.3])  # constant difference: t undefined -> sign flip
    assert name.startswith("sign-flip") and p == pytest.approx(0.25)
    p, name = paired_test([1, 2, 4], [0, 0, 1], method="sign-flip")
    assert name == "sign-flip permutation" and p == pytest.approx(sign_flip_pvalue([1, 2, 3]))


def test_paired_comparison_and_within_noise():
    ref = {0: 0.10, 1: 0.12, 2: 0.14}
    c = paired_comparison({0: 0.09, 1: 0.11, 2: 0.13}, ref)
    assert c.n == 3 and c.diff == pytest.approx(-0.01)
    assert (c.lo, c.hi) == pytest.approx((-0.01, -0.01)) and c.within_noise is False and c.p == pytest.approx(0.25)
    c = paired_comparison({0: 0.12, 1: 0.10, 2: 0.14}, ref)
    assert c.diff == pytest.approx(0.0, abs=1e-12) and c.within_noise is True
    assert (c.lo, c.hi) == pytest.approx((-0.02, 0.02)) and c.p == pytest.approx(1.0)
    # only shared seeds count; one shared seed: no verdict
    c = paired_comparison({0: 0.2, 7: 0.5}, ref)
    assert c.n == 1 and c.seeds == [0] and c.within_noise is None and math.isnan(c.p)
    c = paired_comparison({5: 0.2}, ref)
    assert c.n == 0 and c.within_noise is None
