"""reports/power.py: the noise split by hand and by simulation, and the sizing checked by a planted study."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from scipy.stats import t as t_dist

from reports.power import NoiseParts, reports_needed, seeds_needed, split_noise
from reports.stats import mdd_paired_t


def test_split_noise_by_hand():
    diffs, ses, n = [0.013, -0.021, 0.007], [0.011, 0.012, 0.013], 300
    parts = split_noise(diffs, ses, n)
    sd_seed = statistics.stdev(diffs)
    mean_var = (0.011 ** 2 + 0.012 ** 2 + 0.013 ** 2) / 3
    assert parts.sd_seed == pytest.approx(sd_seed, rel=1e-12)
    assert parts.sd_report == pytest.approx(math.sqrt(mean_var * 300), rel=1e-12)
    assert parts.sd_train == pytest.approx(math.sqrt(sd_seed ** 2 - mean_var), rel=1e-12)
    # All the spread explained by the test split: no training part left.
    assert split_noise([0.01, 0.012], [0.3, 0.3], 100).sd_train == 0.0


@pytest.mark.parametrize(("sd_train", "sd_report", "n"), [(0.02, 0.3, 200), (0.0, 0.25, 120), (0.05, 0.1, 400)])
def test_split_noise_recovers_planted_parts(sd_train, sd_report, n):
    rng = np.random.default_rng(7)
    est_train2, est_report = [], []
    for _ in range(400):
        d = 0.013 + rng.normal(0, sd_train, size=(5, 1)) + rng.normal(0, sd_report, size=(5, n))
        diffs, ses = d.mean(1), d.std(1, ddof=1) / math.sqrt(n)
        parts = split_noise(diffs, ses, n)
        est_train2.append(parts.sd_seed ** 2 - (ses ** 2).mean())  # unfloored: unbiased
        est_report.append(parts.sd_report)
    assert np.mean(est_report) == pytest.approx(sd_report, rel=0.02)
    assert np.mean(est_train2) == pytest.approx(sd_train ** 2, abs=0.15 * sd_train ** 2 + 3e-5)


def _study_rejects(rng, delta, parts, seeds, n, trials):
    """Share of simulated `seeds`-seed studies whose paired t-test (vs 0) has p < 0.05."""
    per_seed = (delta + rng.normal(0, parts.sd_train, (trials, seeds))
                + rng.normal(0, parts.sd_report / math.sqrt(n), (trials, seeds)))
    tstat = per_seed.mean(1) / (per_seed.std(1, ddof=1) / math.sqrt(seeds))
    return float((2 * t_dist.sf(np.abs(tstat), seeds - 1) < 0.05).mean())


def test_sized_study_has_its_power_and_size():
    parts = NoiseParts(n_reports=300, seeds=3, sd_seed=math.nan, sd_report=0.21, sd_train=0.002)
    target = 0.0137
    n = reports_needed(parts, 3, target)
    assert n is not None
    assert parts.mdd(3, n) <= target < parts.mdd(3, n - 1)
    rng = np.random.default_rng(11)
    assert _study_rejects(rng, target, parts, 3, n, 20000) == pytest.approx(0.8, abs=0.015)
    assert _study_rejects(rng, 0.0, parts, 3, n, 20000) == pytest.approx(0.05, abs=0.008)


def test_training_noise_sets_a_floor():
    parts = NoiseParts(300, 3, math.nan, sd_report=0.2, sd_train=0.01)
    floor = mdd_paired_t(3, 0.01)
    assert reports_needed(parts, 3, 0.9 * floor) is None
    assert reports_needed(parts, 3, 1.1 * floor) is not None
    s = seeds_needed(parts, 300, 0.03)
    assert parts.mdd(s, 300) <= 0.03 < parts.mdd(s - 1, 300)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="one difference and one se per seed"):
        split_noise([0.1, 0.2, 0.3], [0.01, 0.02], 100)
    with pytest.raises(ValueError, match="every se >= 0"):
        split_noise([0.1, 0.2], [0.01, -0.02], 100)
