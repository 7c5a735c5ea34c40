"""Statistics over seeds: mean, 95% percentile bootstrap interval, paired test against a reference arm.

Definitions (used by every table and figure of the reports):

- `bootstrap_ci(values)`: the percentile bootstrap. Draw `B` (10000) resamples of the n per-seed values with
  replacement (numpy `default_rng(seed)`, so the interval is reproducible), take each resample's mean, and
  report the 2.5% and 97.5% quantiles (numpy's default linear interpolation) of those B means. n = 1 gives the
  degenerate interval [x, x]; n = 0 gives NaN. Constant data gives a zero-width interval.
- `paired_comparison(x, y)`: x and y map seed -> value (arm and reference arm); only seeds present in both
  count. d = x - y per shared seed; the difference's interval is the percentile bootstrap of mean(d)
  (resampling seeds, so pairs stay together). The p-value is the paired t-test (`scipy.stats.ttest_rel`,
  two-sided) when scipy is importable and the differences are not all equal (to 1e-12, relative);
  otherwise the exact two-sided sign-flip permutation test: p = share of the 2^n sign vectors s with
  |mean(s * d)| >= |mean(d)| (identity included, so p >= 2^-n; 100000 random sign vectors, seeded, when
  n > 20). With all d equal the t statistic is undefined, so the sign-flip test is used there too.
  The bootstrap is also the interval of the difference, so with scipy the p-value and the within-noise flag
  come from different procedures and can disagree near the boundary; the tables print both.
- `within_noise`: True when the difference's 95% interval contains 0. With fewer than 2 shared seeds nothing
  can be said: within_noise is None (tables print "n<2").
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

DEFAULT_B = 10_000
DEFAULT_LEVEL = 0.95


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray([v for v in values if v is not None], dtype=np.float64).ravel()
    return arr[np.isfinite(arr)]


def bootstrap_means(values: Sequence[float] | np.ndarray, B: int = DEFAULT_B, seed: int = 0) -> np.ndarray:
    """The B bootstrap means of `values` (resampled with replacement), reproducible for a seed."""
    arr = _finite(values)
    if arr.size == 0:
        return np.full(B, np.nan)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, arr.size, size=(B, arr.size))
    return arr[idx].mean(axis=1)


def bootstrap_ci(values: Sequence[float] | np.ndarray, B: int = DEFAULT_B, level: float = DEFAULT_LEVEL,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (see the module docstring)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if B < 1:
        raise ValueError(f"B must be >= 1, got {B}")
    arr = _finite(values)
    if arr.size == 0:
        return (math.nan, math.nan)
    if arr.size == 1 or np.all(arr == arr[0]):
        return (float(arr[0]), float(arr[0]))
    means = bootstrap_means(arr, B, seed)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


@dataclass
class Summary:
    mean: float
    lo: float
    hi: float
    n: int
    std: float  # sample std (ddof = 1); NaN for n < 2

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(values: Sequence[float] | np.ndarray, B: int = DEFAULT_B, level: float = DEFAULT_LEVEL,
              seed: int = 0) -> Summary:
    """Mean, percentile bootstrap interval, n and sample std of the finite values."""
    arr = _finite(values)
    if arr.size == 0:
        return Summary(math.nan, math.nan, math.nan, 0, math.nan)
    lo, hi = bootstrap_ci(arr, B, level, seed)
    std = float(arr.std(ddof=1)) if arr.size > 1 else math.nan
    return Summary(float(arr.mean()), lo, hi, int(arr.size), std)


def sign_flip_pvalue(d: Sequence[float] | np.ndarray, max_exact: int = 20, n_random: int = 100_000,
                     seed: int = 0) -> float:
    """Two-sided sign-flip permutation test of mean(d) = 0 (exact up to `max_exact` pairs)."""
    arr = _finite(d)
    n = arr.size
    if n == 0:
        return math.nan
    observed = abs(arr.mean())
    tol = 1e-12 * max(1.0, float(np.abs(arr).max()))
    if n <= max_exact:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    else:
        rng = np.random.default_rng(seed)
        signs = rng.choice((1.0, -1.0), size=(n_random, n))
        signs[0] = 1.0
    stats = np.abs((signs * arr).mean(axis=1))
    return float(np.mean(stats >= observed - tol))


def _scipy_ttest_rel():
    try:
        from scipy.stats import ttest_rel
    except ImportError:  # pragma: no cover - scipy is installed with scikit-learn
        return None
    return ttest_rel


def paired_test(x: Sequence[float], y: Sequence[float], method: str = "auto") -> tuple[float, str]:
    """(p-value, test name) for paired samples x, y (same order). method: auto | t | sign-flip."""
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if xa.shape != ya.shape:
        raise ValueError(f"paired samples need the same length, got {xa.size} and {ya.size}")
    d = xa - ya
    d = d[np.isfinite(d)]
    if d.size < 2:
        return (math.nan, "none (n<2)")
    if method not in ("auto", "t", "sign-flip"):
        raise ValueError(f"method must be auto, t or sign-flip, got {method!r}")
    constant = bool(np.ptp(d) <= 1e-12 * max(1.0, float(np.abs(d).max())))
    ttest = _scipy_ttest_rel()
    if method in ("auto", "t") and ttest is not None and not constant:
        res = ttest(d, np.zeros_like(d))
        return (float(res.pvalue), "paired t-test")
    if method == "t" and ttest is None:
        raise RuntimeError("method='t' needs scipy")
    name = "sign-flip permutation" + (" (all differences equal)" if constant and method != "sign-flip" else "")
    return (sign_flip_pvalue(d), name)


@dataclass
class Comparison:
    n: int  # shared seeds
    seeds: list
    diff: float  # mean of (arm - reference) over shared seeds
    lo: float
    hi: float
    p: float
    test: str
    within_noise: bool | None

    def as_dict(self) -> dict:
        return asdict(self)


def paired_comparison(arm: Mapping, reference: Mapping, B: int = DEFAULT_B, level: float = DEFAULT_LEVEL,
                      seed: int = 0, method: str = "auto") -> Comparison:
    """Compare arm to reference over their shared seeds (dicts seed -> value); see the module docstring."""
    seeds = sorted(s for s in arm if s in reference and _ok(arm[s]) and _ok(reference[s]))
    if not seeds:
        return Comparison(0, [], math.nan, math.nan, math.nan, math.nan, "none (no shared seeds)", None)
    x = np.array([float(arm[s]) for s in seeds])
    y = np.array([float(reference[s]) for s in seeds])
    d = x - y
    lo, hi = bootstrap_ci(d, B, level, seed)
    p, test = paired_test(x, y, method)
    within = None if len(seeds) < 2 else bool(lo <= 0.0 <= hi)
    return Comparison(len(seeds), seeds, float(d.mean()), lo, hi, p, test, within)


def _ok(v) -> bool:
    return v is not None and isinstance(v, int | float) and math.isfinite(float(v))
