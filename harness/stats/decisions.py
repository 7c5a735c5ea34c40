"""Decisions on declared primary contrasts: better / worse / equivalent / undecided, by one of two rules (`RULES`):

- "anytime" (the studies' default, issue 48): a confidence sequence for the mean paired difference, valid whenever
  and however seeds are added (section "The anytime rule" below);
- "fixed_n": the paired t-test and TOST over a fixed number of seeds, or over planned looks with the significance
  level spent across them (steps 1-4 below). Its error rates hold only if the seed count (or the looks and the
  maximum) was fixed before any result was seen.

Pure statistics (numpy and scipy, no other part of the project), so that the experiment runner
(harness/experiments/sequential.py) and the reports can both import it. The seed-level conventions are those of
reports/stats.py (paired t over seeds, Holm-Bonferroni, minimum detectable difference at power 0.8), reimplemented
here in the few lines needed.

A contrast is "arm - baseline on one metric" with the smallest difference that matters, delta > 0 (in the metric's
units). Its data are the per-seed paired differences d_1..d_n (arm - baseline, same seed). For a family of
contrasts decided together at one look (`decide_family`):

1. Level of the look. A fixed-n analysis uses alpha. With planned looks (seed counts n_1 < ... < n_K) look k uses
   alpha_k, the increment of the Lan & DeMets (1983) alpha-spending function between the information fractions
   t_{k-1} and t_k = n_k / n_K (`spending`, `look_levels`). The increments sum to alpha, so by Bonferroni's
   inequality the chance of any false "better"/"worse" over all looks is at most alpha. This is conservative:
   the classical group-sequential boundaries use the correlation between looks to spend more at each.
2. Difference test. p_c is the two-sided paired-t p-value of mean(d) = 0 over the n differences (an exact
   sign-flip p, 2^(1-n), when the differences are all equal and nonzero, where t is undefined; p = 1 when all are
   zero; as in reports/stats.py). Holm (1979) over the contrasts of the family that have n >= 2, at level
   alpha_k: p_adjusted is the Holm-adjusted p and the contrast is "better" or "worse" (by the sign of mean(d)
   and `higher_is_better`) when p_adjusted < alpha_k. The contrast of rank i (1-based, raw p ascending, ties in
   the order given) among the m tested has the Holm level level_c = alpha_k / (m - i + 1).
3. Equivalence. Otherwise it is "equivalent" when the two one-sided tests (Schuirmann 1987 TOST) at level
   level_c reject both |true difference| >= delta: the (1 - 2 level_c) t-interval, mean(d) +- t_{1-level_c, n-1}
   sd / sqrt(n), lies strictly inside (-delta, +delta). (All-equal differences: the interval has zero width.)
   A contrast whose true difference is at least delta is called equivalent with chance at most level_c <= alpha_k
   at a look, so at most alpha over all looks (the levels sum to alpha); this bound is per contrast, the
   family-wise guarantee of step 1 is for "better"/"worse".
4. Otherwise "undecided", with `seeds_needed` (below). One seed (n < 2) never decides: undecided, NaN interval
   and p, seeds_needed None.

Decision.lo / hi is the interval that decided: for better / worse the two-sided (1 - level_c) t-interval (it
excludes 0); for equivalent the (1 - 2 level_c) TOST interval (inside the band); for undecided the (1 - level_c)
interval, which is wider than the TOST one, so it is not inside the band either, and contains 0 unless Holm's
step-down stopped at a contrast of smaller p.

seeds_needed (undecided only): the smallest seed count N > n at which the measured mean m = mean(d) and standard
deviation s (ddof 1) would decide at this contrast's level level_c, by either route, whichever needs fewer seeds:

- difference: the paired-t minimum detectable difference at N seeds, level level_c and power 0.8 is at most |m|
  (the MDD of reports/stats.py mdd_paired_t, at level level_c); equivalently the power at a true difference |m|,
  P(|T'| > t_{1-level_c/2, N-1}) for T' noncentral t(N - 1, |m| sqrt(N) / s), is at least 0.8;
- equivalence (only when |m| < delta): the TOST margin decides, |m| + t_{1-level_c, N-1} s / sqrt(N) < delta;
  i.e. the interval would lie inside the band if the mean and sd stayed as measured (about a 50% chance, not 80%).

With all-equal differences (s = 0, undecided only when |m| >= delta) it is the smallest N with 2^(1-N) < level_c,
where the exact sign-flip test could reject. It is None when n < 2 or when neither route decides within
100,000 seeds (MAX_SEEDS). It is a guide at the measured spread and at this look's level, not a promise: a later
look spends a different level, the contrast's Holm rank can change, and the spread is estimated from n seeds.

The anytime rule (rule="anytime"). The same contrasts, Holm and outcome words, with the t-test replaced by an
e-process: at every prefix of m seeds (in seed order, the order seeds are added) the Bayes factor of a normal
mean with unknown variance, a N(0, g) prior on the standardized effect mu / sigma and the right-Haar prior 1/sigma
on sigma (Rouder et al. 2009, eq. 6 before its integration over g):

    E_m(mu0) = (1 + m g)^(-1/2) [(1 + t^2 / nu) / (1 + t^2 / (nu (1 + m g)))]^((nu + 1) / 2),

t = (mean_m - mu0) sqrt(m) / s_m, nu = m - 1 (m >= 2). With the Haar prior on the scale, E_m(mu0) is the
likelihood ratio of the scale-invariant reduction of the data, hence a nonnegative martingale of mean 1 under every
N(mu0, sigma^2) (Perez-Ortiz, Lardy, de Heide and Grunwald 2024, "E-statistics, group invariance and anytime-valid
testing", Ann. Statist.; Grunwald, de Heide and Koolen 2024, "Safe testing", JRSS B; the confidence sequence it
gives is Lai's 1976 t-mixture). By Ville's inequality P(sup_m E_m(mu) >= 1 / level) <= level, so

- the anytime p of mean = 0 at n seeds is p_n = min(1, 1 / max_{m<=n} E_m(0)): P(p_n <= level for some n) <= level,
  whatever rule chose to stop, continue or add seeds after looking; Holm over the family at level alpha on these
  (the first true null Holm rejects has p <= alpha / |true nulls|), so the family-wise chance of any false
  "better" / "worse" over every analysis ever made is at most alpha;
- the confidence sequence at level L is the running intersection over m <= n of {mu0: E_m(mu0) < 1 / L}, i.e.
  mean_m +- t*_m s_m / sqrt(m) with t*_m in closed form (`mixture_t_crit`); it covers the true mean at every n at
  once with chance >= 1 - L. "equivalent" when the sequence at the contrast's Holm level lies inside
  (-delta, +delta): a true difference of at least delta is then outside it, chance at most alpha ever.
  The decided interval (Decision.lo / hi) is that sequence for every outcome.

seeds_needed (anytime): the smallest N > n at which the measured mean and sd would decide (the mean would be
outside the sequence's half-width, or mean +- half-width inside the band): about an even chance, not 80%. Adding
seeds up to it, or to any other count, keeps alpha, since the rule holds at every n.

Assumption: the paired seed differences are roughly normal (the guarantee is exact for normal data; heavy
symmetric tails such as t with 3 df keep it in simulation). `seed_check` flags a seed far from the others (a run
that collapsed); benchmarks/calibration_sim.py and docs/calibration.md give the error rates when one seed in ten
collapses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

OUTCOMES = ("better", "worse", "equivalent", "undecided")
RULES = ("anytime", "fixed_n")
MIXTURE_G = 0.25  # prior variance of the standardized effect (chosen by simulation: benchmarks/calibration_sim.py)
OUTLIER_Z = 3.5  # seed_check: modified z-score beyond which a seed is flagged (Iglewicz & Hoaglin 1993)
SPENDING_KINDS = ("obrien_fleming", "pocock")
POWER = 0.8  # power of the difference route of seeds_needed
MAX_SEEDS = 100_000  # seeds_needed beyond this is None


@dataclass(frozen=True)
class Contrast:
    """A declared primary contrast: arm vs baseline on one metric; delta (> 0, metric units) is the smallest
    difference that matters."""

    arm: str
    baseline: str
    metric: str
    delta: float
    higher_is_better: bool = True

    def __post_init__(self):
        if not (isinstance(self.delta, int | float) and math.isfinite(self.delta) and self.delta > 0):
            raise ValueError(f"delta of {self.arm} - {self.baseline} on {self.metric} must be a number > 0, "
                             f"got {self.delta!r}")


@dataclass(frozen=True)
class Decision:
    """The decision on one contrast at one look (module docstring)."""

    contrast: Contrast
    outcome: str  # one of OUTCOMES
    n: int  # seeds (paired differences) used
    diff: float  # mean of arm - baseline (NaN for n = 0)
    lo: float  # the interval used for the decision (module docstring); NaN for n < 2
    hi: float
    p: float  # two-sided paired-t p of diff != 0 (raw); NaN for n < 2
    p_adjusted: float  # Holm-adjusted over the family at this look; NaN for n < 2
    alpha_look: float  # the family's level at this look: "better"/"worse" when p_adjusted < alpha_look
    seeds_needed: int | None  # undecided only: seeds at which the measured spread would decide (or None)
    look: int  # 1-based look index (1 for a fixed-n analysis)
    rule: str = "fixed_n"  # RULES: which guarantee the decision has


def _check_alpha(alpha: float) -> None:
    if not (isinstance(alpha, int | float) and 0 < alpha < 1):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")


def spending(t: float, alpha: float, kind: str = "obrien_fleming") -> float:
    """Lan-DeMets alpha-spending function: the cumulative alpha spent by information fraction t in [0, 1].

    obrien_fleming: 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)) (spends almost nothing early);
    pocock: alpha ln(1 + (e - 1) t). Both are 0 at t = 0 and exactly alpha at t = 1."""
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
    from scipy.stats import t

    if s.sd == 0:
        return (s.mean, s.mean)
    half = float(t.isf(tail, s.n - 1)) * s.sd / math.sqrt(s.n)
    return (s.mean - half, s.mean + half)


def _power(n: np.ndarray, level: float, effect_over_sd: float) -> np.ndarray:
    """Power of a two-sided paired t-test at `level` over n pairs for a true mean difference of effect_over_sd
    standard deviations: P(|T'| > t_{1-level/2, n-1}), T' noncentral t(n - 1, effect_over_sd sqrt(n))."""
    from scipy.stats import nct, t

    df = n - 1
    crit = t.isf(level / 2, df)
    nc = effect_over_sd * np.sqrt(n)
    return nct.sf(crit, df, nc) + np.nan_to_num(nct.cdf(-crit, df, nc))  # NaN far in the lower tail, ~0 there


def _tost_half(n: np.ndarray, level: float) -> np.ndarray:
    """TOST half-width / sd at n seeds: t_{1-level, n-1} / sqrt(n)."""
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


# ------------------------------------------------------------------------------------------ the anytime rule


def mixture_log_e(t, n, g: float = MIXTURE_G):
    """log E_m of the module docstring for t-statistics t at m = n seeds (arrays broadcast; n >= 2). An infinite t
    (all differences equal, mean != mu0) gives the supremum, (nu / 2) log(1 + n g)."""
    t, n = np.asarray(t, dtype=np.float64), np.asarray(n, dtype=np.float64)
    nu, a = n - 1.0, 1.0 + n * g
    t2 = np.square(t)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        out = -0.5 * np.log(a) + (nu + 1) / 2 * (np.log1p(t2 / nu) - np.log1p(t2 / (nu * a)))
    return np.where(np.isinf(t), nu / 2 * np.log(a), out)


def mixture_t_crit(n, level: float, g: float = MIXTURE_G):
    """t* with E_n = 1 / level at |t| = t* (E_n increases with |t|): solving the docstring's formula for t,
    t*^2 = nu (A - 1) / (1 - A / (1 + n g)), A = (sqrt(1 + n g) / level)^(2 / (nu + 1)); infinite when
    A >= 1 + n g (the largest E_n, (1 + n g)^(nu / 2), stays below 1 / level: n seeds cannot decide)."""
    n = np.asarray(n, dtype=np.float64)
    nu, a = n - 1.0, 1.0 + n * g
    big = np.exp((2.0 / (nu + 1)) * (math.log(1.0 / level) + 0.5 * np.log(a)))
    with np.errstate(invalid="ignore", divide="ignore"):
        x = (big - 1.0) / (1.0 - big / a)
    return np.where(big < a, np.sqrt(np.maximum(nu * x, 0.0)), np.inf)


def anytime_path(d, level, g: float = MIXTURE_G):
    """The anytime rule along the seeds: d [..., N] differences in seed order (a leading axis of replications
    for simulations); level a scalar or [...] array. Returns (mean, sd, p, lo, hi), each [..., N]: at each prefix
    of n seeds the mean, sd (ddof 1; NaN for n = 1), the anytime p of mean = 0 and the confidence sequence at
    `level` (running intersection; +-inf before it can exclude anything)."""
    d = np.asarray(d, dtype=np.float64)
    n = np.arange(1, d.shape[-1] + 1, dtype=np.float64)
    mean = np.cumsum(d, axis=-1) / n
    # the spread about each prefix's mean (two passes: stable when the differences sit far from 0)
    dev = np.cumsum(np.square(d - mean[..., -1:]), axis=-1) - n * np.square(mean - mean[..., -1:])
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.where(n >= 2, np.maximum(dev, 0.0) / (n - 1), np.nan)
        sd = np.sqrt(var)
        scale = np.maximum(np.abs(mean), 1.0)
        sd = np.where(sd <= 1e-12 * scale, 0.0, sd)  # all-equal differences: t is infinite (or 0 / 0)
        t = np.where(sd > 0, mean * np.sqrt(n) / np.where(sd > 0, sd, 1.0), np.where(mean == 0, 0.0, np.inf))
    log_e = np.where(n >= 2, mixture_log_e(t, np.maximum(n, 2.0), g), 0.0)
    p = np.minimum(1.0, np.exp(-np.maximum.accumulate(log_e, axis=-1)))
    level = np.asarray(level, dtype=np.float64)[..., None] if np.ndim(level) else level
    crit = mixture_t_crit(np.maximum(n, 2.0), level, g)
    with np.errstate(invalid="ignore"):
        half = np.where(n >= 2, np.where(sd > 0, crit * sd / np.sqrt(n), np.where(np.isinf(crit), np.inf, 0.0)),
                        np.inf)
    lo = np.maximum.accumulate(mean - half, axis=-1)
    hi = np.minimum.accumulate(mean + half, axis=-1)
    return mean, sd, p, lo, hi


def _anytime_seeds_needed(mean: float, sd: float, n: int, level: float, delta: float, g: float) -> int | None:
    """Smallest N in (n, MAX_SEEDS] at which mean and sd as measured would decide by the anytime rule."""
    big_n = np.arange(n + 1, MAX_SEEDS + 1, dtype=np.float64)
    crit = mixture_t_crit(big_n, level, g)
    m = abs(mean)
    if sd == 0:
        ok = np.isfinite(crit) & ((m > 0) | (m < delta))
    else:
        half = crit * sd / np.sqrt(big_n)
        ok = (m > half) | (m + half < delta)
    return int(big_n[np.argmax(ok)]) if ok.any() else None


def seed_check(d: Sequence[float]) -> str | None:
    """A seed distribution the rule does not cover: a seed whose modified z-score 0.6745 (d - median) / MAD
    exceeds OUTLIER_Z (Iglewicz & Hoaglin 1993), e.g. an RL run that collapsed. Needs n >= 5 and MAD > 0; returns
    a short phrase naming the seeds' positions and direction, or None."""
    x = np.asarray(list(d), dtype=np.float64)
    if x.size < 5:
        return None
    med = float(np.median(x))
    mad = float(np.median(np.abs(x - med)))
    if mad <= 0:
        return None
    z = 0.6745 * (x - med) / mad
    far = np.flatnonzero(np.abs(z) > OUTLIER_Z)
    if not far.size:
        return None
    sides = {"lower" if z[i] < 0 else "higher" for i in far}
    return (f"{far.size} of {x.size} seeds far {'/'.join(sorted(sides))} than the others (modified z "
            f"{', '.join(f'{z[i]:+.1f}' for i in far)} beyond +-{OUTLIER_Z:g}): a skewed seed distribution, "
            f"outside the normal assumption")


def _decide_anytime(contrasts: list[Contrast], data: list[np.ndarray], alpha: float, g: float) -> list[Decision]:
    p = np.array([anytime_path(d, alpha, g)[2][-1] if d.size >= 2 else np.nan for d in data])
    p_adj = _holm(p)
    levels_c = _holm_levels(p, alpha)
    out = []
    for c, d, pv, padj, lc in zip(contrasts, data, p, p_adj, levels_c, strict=True):
        mean = float(d.mean()) if d.size else math.nan
        if d.size < 2:
            out.append(Decision(c, "undecided", int(d.size), mean, math.nan, math.nan, math.nan, math.nan, alpha,
                                None, 1, "anytime"))
            continue
        _, sd, _, lo, hi = anytime_path(d, float(lc), g)
        lo, hi, sd = float(lo[-1]), float(hi[-1]), float(sd[-1])
        needed = None
        if padj < alpha:
            outcome = "better" if (mean > 0) == c.higher_is_better else "worse"
        elif -c.delta < lo and hi < c.delta:
            outcome = "equivalent"
        else:
            outcome = "undecided"
            needed = _anytime_seeds_needed(mean, sd, int(d.size), float(lc), c.delta, g)
        out.append(Decision(c, outcome, int(d.size), mean, lo, hi, float(pv), float(padj), alpha, needed, 1,
                            "anytime"))
    return out


def _resolve_level(n_data: int, alpha: float, looks: Sequence[int] | None, look: int | None,
                   spending_kind: str) -> tuple[float, int]:
    if looks is None:
        if look not in (None, 1):
            raise ValueError(f"look={look!r} needs the planned looks (looks=[...])")
        return float(alpha), 1
    looks = _check_looks(looks)
    levels = look_levels(looks, alpha, spending_kind)
    if look is None:
        if n_data not in looks:
            raise ValueError(f"{n_data} seeds is none of the planned looks {looks}: pass look= (1-based)")
        look = looks.index(n_data) + 1
    if isinstance(look, bool) or not isinstance(look, int | np.integer) or not 1 <= look <= len(looks):
        raise ValueError(f"look must be 1..{len(looks)} for looks {looks}, got {look!r}")
    return levels[int(look) - 1], int(look)


def decide_family(contrasts: Sequence[Contrast], diffs: Mapping[Contrast, Sequence[float]], *, alpha: float = 0.05,
                  looks: Sequence[int] | None = None, look: int | None = None,
                  spending: str = "obrien_fleming", rule: str = "fixed_n",
                  g: float = MIXTURE_G) -> list[Decision]:
    """Decide every contrast of a family at one look (module docstring), in the order given.

    rule "anytime": the confidence-sequence rule at level alpha (looks, look and spending are not used: every
    analysis may spend the full alpha); the differences must be in the order the seeds were added.

    diffs: per contrast, the per-seed paired differences arm - baseline (seed-aligned, finite). Fixed n (looks
    None): level alpha. Sequential: looks = the planned seed counts (e.g. [3, 5, 8]), look = the 1-based index of
    the current look (default: the look whose count equals the largest n among the contrasts), level =
    look_levels(looks, alpha, spending)[look - 1]; a contrast with fewer seeds than planned (a failed run) is
    decided on what it has, at the planned level."""
    _check_alpha(alpha)
    contrasts = list(contrasts)
    if len(set(contrasts)) != len(contrasts):
        raise ValueError("a contrast is listed twice in the family")
    data = []
    for c in contrasts:
        if not isinstance(c, Contrast):
            raise TypeError(f"contrasts must be Contrast, got {type(c).__name__}")
        if c not in diffs:
            raise ValueError(f"no differences given for {c.arm} - {c.baseline} on {c.metric}")
        d = np.asarray(list(diffs[c]), dtype=np.float64).ravel()
        if not np.all(np.isfinite(d)):
            raise ValueError(f"differences of {c.arm} - {c.baseline} on {c.metric} must be finite, got {d.tolist()}")
        data.append(d)
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
    if rule == "anytime":
        if not (isinstance(g, int | float) and math.isfinite(g) and g > 0):
            raise ValueError(f"the mixture's g must be a number > 0, got {g!r}")
        return _decide_anytime(contrasts, data, float(alpha), float(g))
    level, look = _resolve_level(max((d.size for d in data), default=0), alpha, looks, look, spending)
    stats = [_stats(d) for d in data]
    p = np.array([s.p for s in stats], dtype=np.float64)
    p_adj = _holm(p)
    levels_c = _holm_levels(p, level)
    out = []
    for c, s, pa, lc in zip(contrasts, stats, p_adj, levels_c, strict=True):
        if s.n < 2:
            out.append(Decision(c, "undecided", s.n, s.mean, math.nan, math.nan, math.nan, math.nan, level, None,
                                look))
            continue
        needed = None
        if pa < level:
            outcome = "better" if (s.mean > 0) == c.higher_is_better else "worse"
            lo, hi = _interval(s, lc / 2)
        else:
            lo, hi = _interval(s, lc)
            if -c.delta < lo and hi < c.delta:
                outcome = "equivalent"
            else:
                outcome = "undecided"
                lo, hi = _interval(s, lc / 2)
                needed = _seeds_needed(s, float(lc), c.delta)
        out.append(Decision(c, outcome, s.n, s.mean, lo, hi, s.p, float(pa), level, needed, look))
    return out


def stop_rule(decisions: Sequence[Decision]) -> bool:
    """True when every contrast is decided (none undecided); vacuously True for no decisions. The last planned
    look ends the search whatever this says (the runner's job)."""
    return all(d.outcome != "undecided" for d in decisions)
