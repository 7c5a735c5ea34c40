"""The pieces of the fixed-n rule of harness/stats/decisions.py (steps 1-4 of its docstring): Lan-DeMets alpha
spending over planned looks, Holm's step-down, the paired t-test and its intervals, and the seeds an undecided
contrast would need."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SPENDING_KINDS = ("obrien_fleming", "pocock")
POWER = 0.8  # power of the difference route of seeds_needed
MAX_SEEDS = 100_000  # seeds_needed beyond this is None


def _check_alpha(alpha: float) -> None:
    if not (isinstance(alpha, int | float) and 0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")


def spending(t: float, alpha: float, kind: str = "obrien_fleming") -> float:
    """Lan-DeMets alpha-spending function: the cumulative alpha spent by information fraction t in [0, 1].

    obrien_fleming: 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)) (spends almost nothing early);
    pocock: alpha ln(1 + (e - 1) t). Both are 0 at t = 0 and exactly alpha at t = 1."""
    # lazy: start-up cost (scipy)
    from scipy.stats import norm

    _check_alpha(alpha)
    if kind not in SPENDING_KINDS:
        raise ValueError(f"spending kind must be one of {', '.join(SPENDING_KINDS)}, got {kind!r}")
    if not (isinstance(t, int | float) and 0 <= t <= 1):
        raise ValueError(f"information fraction must be in [0, 1], got {t!r}")
    if t == 0:
        return 0.0
    if t == 1:
        return float(alpha)
    if kind == "obrien_fleming":
        return float(2 * norm.sf(norm.isf(alpha / 2) / math.sqrt(t)))
    return float(alpha * math.log1p((math.e - 1) * t))


def _check_looks(looks: Sequence[int]) -> list[int]:
    out = list(looks)
    if not out or any(isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1 for n in out) \
            or any(b <= a for a, b in zip(out, out[1:], strict=False)):
        raise ValueError(f"looks must be increasing positive seed counts, got {list(looks)!r}")
    return [int(n) for n in out]


def look_levels(looks: Sequence[int], alpha: float, kind: str = "obrien_fleming") -> list[float]:
    """Per-look significance levels for planned looks at the given seed counts: the increments of
    `spending` between t_{k-1} and t_k = looks[k] / looks[-1] (seeds as the information, t_0 = 0).

    They sum to alpha (the last is alpha minus the others), so by Bonferroni's inequality the chance of any false
    "different" over all looks is at most alpha whatever the correlation between looks. Conservative: exact
    group-sequential boundaries (which use that correlation) would allow somewhat larger levels."""
    looks = _check_looks(looks)
    cumulative = [spending(n / looks[-1], alpha, kind) for n in looks]
    levels = [cumulative[0]] + [b - a for a, b in zip(cumulative, cumulative[1:], strict=False)]
    levels[-1] = float(alpha) - sum(levels[:-1])
    return [float(x) for x in levels]


def _holm(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values (step-down, monotone, capped at 1); NaN stays NaN and does not count."""
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    m = order.size
    if m:
        out[order] = np.minimum(np.maximum.accumulate(p[order] * (m - np.arange(m))), 1.0)
    return out


def _holm_levels(p: np.ndarray, level: float) -> np.ndarray:
    """Per-contrast Holm step level: level / (m - i + 1) for the contrast of rank i (raw p ascending)."""
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    out[order] = level / (order.size - np.arange(order.size))
    return out


def _is_constant(d: np.ndarray) -> bool:
    return bool(np.ptp(d) <= 1e-12 * max(1.0, float(np.abs(d).max())))


@dataclass
class _Stats:
    n: int
    mean: float
    sd: float  # ddof 1; 0 for all-equal differences
    p: float


def _stats(d: np.ndarray) -> _Stats:
    # lazy: start-up cost (scipy)
    from scipy.stats import t

    n = d.size
    mean = float(d.mean()) if n else math.nan
    if n < 2:
        return _Stats(n, mean, math.nan, math.nan)
    if _is_constant(d):
        p = 1.0 if mean == 0 else min(1.0, 2.0 ** (1 - n))  # exact sign-flip test (t undefined)
        return _Stats(n, mean, 0.0, p)
    sd = float(d.std(ddof=1))
    return _Stats(n, mean, sd, float(2 * t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1)))


def _interval(s: _Stats, tail: float) -> tuple[float, float]:
    """mean +- t_{1-tail, n-1} sd / sqrt(n): the two-sided (1 - 2 tail) t-interval."""
    # lazy: start-up cost (scipy)
    from scipy.stats import t

    if s.sd == 0:
        return (s.mean, s.mean)
    half = float(t.isf(tail, s.n - 1)) * s.sd / math.sqrt(s.n)
    return (s.mean - half, s.mean + half)


def _power(n: np.ndarray, level: float, effect_over_sd: float) -> np.ndarray:
    """Power of a two-sided paired t-test at `level` over n pairs for a true mean difference of effect_over_sd
    standard deviations: P(|T'| > t_{1-level/2, n-1}), T' noncentral t(n - 1, effect_over_sd sqrt(n))."""
    # lazy: start-up cost (scipy)
    from scipy.stats import nct, t

    df = n - 1
    crit = t.isf(level / 2, df)
    nc = effect_over_sd * np.sqrt(n)
    return nct.sf(crit, df, nc) + np.nan_to_num(nct.cdf(-crit, df, nc))  # NaN far in the lower tail, ~0 there


def _tost_half(n: np.ndarray, level: float) -> np.ndarray:
    """TOST half-width / sd at n seeds: t_{1-level, n-1} / sqrt(n)."""
    # lazy: start-up cost (scipy)
    from scipy.stats import t

    return t.isf(level, n - 1) / np.sqrt(n)


def _smallest(start: int, decides) -> int | None:
    """Smallest N in [start, MAX_SEEDS] with decides(N) for a predicate monotone in N (vectorised over an int
    array; None if none). start is a lower bound from the normal approximation, usually a few seeds short, so the
    candidates are start, start + 1, start + 3, start + 7, ... and then every N of the last gap."""
    if start > MAX_SEEDS:
        return None
    grid = np.unique(np.minimum(start - 1 + 2 ** np.arange(int(math.log2(MAX_SEEDS)) + 2), MAX_SEEDS))
    ok = decides(grid)
    if not ok.any():
        return None
    k = int(np.argmax(ok))
    lo, hi = (start - 1 if k == 0 else int(grid[k - 1])), int(grid[k])  # decides(lo) is False (or lo < start)
    while hi - lo > 1024:
        mid = (lo + hi) // 2
        if decides(np.array([mid]))[0]:
            hi = mid
        else:
            lo = mid
    span = np.arange(lo + 1, hi + 1)
    return int(span[np.argmax(decides(span))])


def _normal_start(first: int, factor_z: float, ratio: float) -> int:
    """First N worth trying: the t-based factors exceed factor_z / sqrt(N), so factor(N) <= ratio needs
    N >= (factor_z / ratio)^2."""
    bound = (factor_z / ratio) ** 2
    return first if bound <= first else int(min(math.floor(bound), MAX_SEEDS + 1))


def _seeds_needed(s: _Stats, level: float, delta: float) -> int | None:
    # lazy: start-up cost (scipy)
    from scipy.stats import norm

    if s.n < 2 or not math.isfinite(level):
        return None
    first = s.n + 1
    m = abs(s.mean)
    if s.sd == 0:
        if m == 0:
            return None  # cannot happen for undecided: zero-width interval at 0 is equivalent
        n = 2
        while 2.0 ** (1 - n) >= level:
            n += 1
        return max(first, n)
    routes = []
    if m > 0:
        z = float(norm.isf(level / 2) + norm.ppf(POWER))
        start = _normal_start(first, z, m / s.sd)
        routes.append(_smallest(start, lambda n: _power(n, level, m / s.sd) >= POWER))
    if m < delta:
        start = _normal_start(first, float(norm.isf(level)), (delta - m) / s.sd)
        routes.append(_smallest(start, lambda n: m + _tost_half(n, level) * s.sd < delta))
    routes = [r for r in routes if r is not None]
    return min(routes) if routes else None
