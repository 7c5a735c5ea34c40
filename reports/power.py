"""Sizing a study: how many test reports and seeds make a contrast's minimum detectable difference small enough.

A contrast (arm - baseline on one metric) at seed s is d_s = delta + t_s + e_s: t_s, the training noise of that
seed (std `sd_train`, does not shrink with the test split), and e_s, the test split's sampling noise, whose std is
`sd_report / sqrt(n)` for n test reports (`sd_report`: the paired per-report std, read off the within-seed paired
bootstrap as se * sqrt(n)). The paired t-test over S seeds sees sd = sqrt(sd_train^2 + sd_report^2 / n), so its
MDD is `stats.mdd_paired_t(S, sd)`. With several seeds and their bootstrap se, the two parts separate:
var(d_s) - mean(se_s^2) estimates sd_train^2 (floored at 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reports.stats import ALPHA, POWER, mdd_paired_t


@dataclass
class NoiseParts:
    """The two parts of a contrast's seed-to-seed std (see the module docstring)."""

    n_reports: int  # test reports behind each seed's difference
    seeds: int
    sd_seed: float  # observed std of the per-seed differences
    sd_report: float  # paired per-report std: se * sqrt(n_reports)
    sd_train: float  # sqrt(max(0, sd_seed^2 - se^2))

    def sd_at(self, n_reports: int) -> float:
        """Seed-to-seed std of the contrast with a test split of `n_reports`."""
        return math.sqrt(self.sd_train ** 2 + self.sd_report ** 2 / n_reports)

    def mdd(self, seeds: int, n_reports: int, alpha: float = ALPHA, power: float = POWER) -> float:
        return mdd_paired_t(seeds, self.sd_at(n_reports), alpha, power)


def split_noise(diffs: Sequence[float], ses: Sequence[float], n_reports: int) -> NoiseParts:
    """Separate training noise from test-split noise, given each seed's difference and its bootstrap se."""
    d, se = np.asarray(diffs, dtype=float), np.asarray(ses, dtype=float)
    if d.ndim != 1 or d.shape != se.shape or len(d) < 2:
        raise ValueError(f"need one difference and one se per seed, at least 2 seeds; got {d.shape} and {se.shape}")
    if n_reports < 1 or (se < 0).any():
        raise ValueError(f"n_reports must be >= 1 and every se >= 0; got {n_reports} and {se.tolist()}")
    sd_seed = float(d.std(ddof=1))
    mean_var = float((se ** 2).mean())
    return NoiseParts(n_reports, len(d), sd_seed, math.sqrt(mean_var * n_reports),
                      math.sqrt(max(0.0, sd_seed ** 2 - mean_var)))


def reports_needed(parts: NoiseParts, seeds: int, target: float, alpha: float = ALPHA, power: float = POWER,
                   n_max: int = 10 ** 7) -> int | None:
    """Fewest test reports giving MDD <= target at `seeds` seeds; None when the training noise alone (n -> inf)
    already exceeds the target, or more than `n_max` would be needed."""
    if parts.mdd(seeds, n_max, alpha, power) > target:
        return None
    lo, hi = 1, n_max
    while lo < hi:  # the MDD falls as n grows
        mid = (lo + hi) // 2
        if parts.mdd(seeds, mid, alpha, power) <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def seeds_needed(parts: NoiseParts, n_reports: int, target: float, alpha: float = ALPHA, power: float = POWER,
                 max_seeds: int = 200) -> int | None:
    """Fewest seeds giving MDD <= target with `n_reports` test reports; None beyond `max_seeds`."""
    for s in range(2, max_seeds + 1):
        if parts.mdd(s, n_reports, alpha, power) <= target:
            return s
    return None
