"""Statistics over seeds: mean, t-interval, paired test, Holm-Bonferroni, minimum detectable difference.

Definitions (used by every table and figure of the reports; the within-one-seed bootstrap over test reports is
reports/bootstrap.py):

- `summarize(values)`: mean, sample std (ddof = 1) and the 95% Student-t interval of the mean,
  mean ± t_{0.975, n-1} · std / sqrt(n) (scipy.stats.t). n = 1 has no interval (NaN bounds); constant data
  gives a zero-width one. A percentile bootstrap over 2-3 seeds is not used: with n <= 3 its "95%" interval is
  [min, max], which calls a difference real about half the time when there is none.
- `paired_comparison(x, y)`: x and y map seed -> value (arm and baseline arm); only seeds present in both
  count. d = x - y per shared seed; the difference's interval is the t-interval of mean(d) and its p-value is
  the paired t-test (`scipy.stats.ttest_rel`, two-sided). When the differences are all equal (to 1e-12,
  relative; t is undefined there) or scipy is missing, the p-value is the exact two-sided sign-flip
  permutation test: p = share of the 2^n sign vectors s with |mean(s d)| >= |mean(d)| (identity included,
  so p >= 2^(1-n) for all-equal d; 100000 random sign vectors, seeded, when n > 20). Note: with n <= 5 the
  sign-flip test can never reach p < 0.05.
- `within_noise`: p >= alpha (0.05). A table makes many comparisons, so reports/tables/ replaces p by its
  Holm-Bonferroni adjustment over all comparisons of that table (`holm`) before deciding. With fewer than
  2 shared seeds the seeds say nothing (within_noise None); the tables then use the bootstrap over test
  reports where per-report outputs exist, and state only whether its interval excludes 0
  (`report_interval_excludes_0`), no within_noise: test-split noise alone says nothing about seeds (issue 48).
- `mdd_paired_t(n, sd)`: the smallest true mean difference that a two-sided paired t-test at level alpha over
  n pairs whose differences have standard deviation sd detects with the given power (0.8): solves
  P(|T| > t_{1-alpha/2, n-1}) = power for T ~ noncentral t(n - 1, delta sqrt(n) / sd) (scipy.stats.nct).
  `mdd_normal(se)` is the large-sample version for an estimate with standard error se:
  (z_{1-alpha/2} + z_{power}) · se.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

DEFAULT_LEVEL = 0.95
ALPHA = 0.05
POWER = 0.8


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray([v for v in values if v is not None], dtype=np.float64).ravel()
    return arr[np.isfinite(arr)]


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")


def t_interval(values: Sequence[float] | np.ndarray, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """Student-t interval of the mean of the finite values (NaN bounds for n < 2)."""
    # lazy: start-up cost (scipy)
    from scipy.stats import t

    _check_level(level)
    arr = _finite(values)
    if arr.size < 2:
        return (math.nan, math.nan)
    mean = float(arr.mean())
    if np.ptp(arr) <= 1e-12 * max(1.0, float(np.abs(arr).max())):
        return (mean, mean)
    half = float(t.ppf(0.5 + level / 2, arr.size - 1)) * float(arr.std(ddof=1)) / math.sqrt(arr.size)
    return (mean - half, mean + half)


@dataclass
class Summary:
    mean: float
    lo: float  # t-interval; NaN for n < 2
    hi: float
    n: int
    std: float  # sample std (ddof = 1); NaN for n < 2

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(values: Sequence[float] | np.ndarray, level: float = DEFAULT_LEVEL) -> Summary:
    """Mean, t-interval, n and sample std of the finite values."""
    arr = _finite(values)
    if arr.size == 0:
        return Summary(math.nan, math.nan, math.nan, 0, math.nan)
    lo, hi = t_interval(arr, level)
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
        # lazy: start-up cost (scipy)
        from scipy.stats import ttest_rel
    except ImportError:  # pragma: no cover - scipy is a dependency; the fallback keeps the tables usable
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
    diff: float  # mean of (arm - baseline) over shared seeds
    lo: float
    hi: float
    p: float
    test: str
    within_noise: bool | None  # from the unadjusted p; tables re-decide after Holm-Bonferroni
    sd: float = math.nan  # std of the paired differences (ddof = 1), for the MDD

    def as_dict(self) -> dict:
        return asdict(self)


def paired_comparison(arm: Mapping, baseline: Mapping, level: float = DEFAULT_LEVEL, method: str = "auto",
                      alpha: float = ALPHA) -> Comparison:
    """Compare arm to baseline over their shared seeds (dicts seed -> value); see the module docstring."""
    seeds = sorted(s for s in arm if s in baseline and _ok(arm[s]) and _ok(baseline[s]))
    if not seeds:
        return Comparison(0, [], math.nan, math.nan, math.nan, math.nan, "none (no shared seeds)", None)
    x = np.array([float(arm[s]) for s in seeds])
    y = np.array([float(baseline[s]) for s in seeds])
    d = x - y
    lo, hi = t_interval(d, level)
    p, test = paired_test(x, y, method)
    within = None if len(seeds) < 2 else bool(p >= alpha)
    sd = float(d.std(ddof=1)) if d.size > 1 else math.nan
    return Comparison(len(seeds), seeds, float(d.mean()), lo, hi, p, test, within, sd)


def _ok(v) -> bool:
    return v is not None and isinstance(v, int | float) and math.isfinite(float(v))


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (step-down; monotone; capped at 1). NaN entries stay NaN and do not
    count among the m comparisons. The family-wise error rate stays <= alpha when "different" means adjusted
    p < alpha."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if ok.size == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    m = order.size
    scaled = p[order] * (m - np.arange(m))  # p_(i) * (m - i + 1), i from 1
    out[order] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return out


def mdd_paired_t(n: int, sd: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Minimum detectable mean difference of a two-sided paired t-test over n pairs (module docstring)."""
    # lazy: start-up cost (scipy)
    from scipy.optimize import brentq
    from scipy.stats import nct, t

    if n < 2 or not math.isfinite(sd):
        return math.nan
    if sd == 0:
        return 0.0
    df = n - 1
    crit = float(t.ppf(1 - alpha / 2, df))

    def shortfall(nc: float) -> float:
        lower = float(nct.cdf(-crit, df, nc))  # scipy can return NaN far in the tail, where it is ~0
        return float(nct.sf(crit, df, nc)) + (lower if math.isfinite(lower) else 0.0) - power

    hi = crit + 10.0
    while shortfall(hi) < 0:
        hi *= 2
    nc = brentq(shortfall, 0.0, hi, xtol=1e-10)
    return nc * sd / math.sqrt(n)


def mdd_normal(se: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """(z_{1-alpha/2} + z_power) * se: the large-sample minimum detectable difference."""
    # lazy: start-up cost (scipy)
    from scipy.stats import norm

    if not math.isfinite(se):
        return math.nan
    return float(norm.ppf(1 - alpha / 2) + norm.ppf(power)) * se
