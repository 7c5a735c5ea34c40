"""Decisions on declared primary contrasts: better / worse / equivalent / undecided, by one of two rules (`RULES`):

- "anytime" (the studies' default, issue 48): a confidence sequence for the mean paired difference, valid whenever
  and however seeds are added (harness/stats/anytime.py);
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

from harness.stats.anytime import MIXTURE_G, _anytime_seeds_needed, anytime_path
from harness.stats.fixed_n import (
    _check_alpha,
    _check_looks,
    _holm,
    _holm_levels,
    _interval,
    _seeds_needed,
    _stats,
    look_levels,
)

OUTCOMES = ("better", "worse", "equivalent", "undecided")
RULES = ("anytime", "fixed_n")
OUTLIER_Z = 3.5  # seed_check: modified z-score beyond which a seed is flagged (Iglewicz & Hoaglin 1993)


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
