"""Error rates of the decision rules on the routes a study actually takes (issue 48), by simulation.

    python benchmarks/calibration_sim.py [--reps 20000] [--seed 0] [--markdown]

Each replication draws one contrast's per-seed paired differences with both noise sources of the testbed: a
training part per seed (sd SD_TRAIN: normal, t with 3 df scaled to that sd, or a normal part plus a collapse, one
seed in ten far lower, the whole difference's skewness -1.5) and the test-report part, the mean over N_REPORTS
reports of the arm's per-report noise minus the baseline's (sd SD_REPORT each; drawn as that mean's exact normal
distribution). For every route (below) and rule ("anytime", the default since issue 48, and "fixed_n", the paired
t / TOST of before) it reports

- null: a planted zero difference called better or worse at any analysis the route reads (one contrast), and the
  same for a family of 6 null contrasts decided with Holm (any false better / worse in the family);
- at +delta: a true difference of exactly delta called "equivalent" at any analysis read;
- power: a true difference of 1.5 x MDD (the fixed-n paired t's minimum detectable difference at the route's
  largest seed count, alpha 0.05, power 0.8) called "better" at some analysis, before any other decision.

Routes (analyses at these seed counts; "until decided" stops at the first analysis that decides):
- fixed n 5, fixed n 10: one analysis;
- looks 3-5-8: `--until-decided` with planned looks [3, 5, 8] (fixed_n spends alpha over them, O'Brien-Fleming);
- continued 3-5 -> 8-12: `--until-decided --max-seeds 5`, then rerun with `--max-seeds 12` (fixed_n: the new
  plan's levels [3, 5, 8, 12] at the later looks, as the runner did before issue 48);
- Table 4 history: until decided over [3, 5], then analyses at 6, 10, 14 and 20 seeds, every one read;
- compare 10 -> 14 -> 20: a comparison repeated as seeds grow until "equivalent";
- about N followed: an analysis at 5 seeds, then (if undecided) one at the "about N seeds" it printed (capped at
  40);
- every n to 20: an analysis after every seed from 2 to 20 (the anytime rule's worst case over n <= 20; any route
  within 20 seeds reads a subset of it).

The anytime rule comes from harness/stats/decisions.py (`anytime_path`, `mixture_t_crit`, the same functions the rule
decides with); the fixed_n rule is the paired t / TOST of `decide_family`, vectorised here (tests check both
against decide_family row by row).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np
from scipy.optimize import brentq
from scipy.stats import nct, t

from harness.stats.anytime import anytime_path, mixture_t_crit
from harness.stats.fixed_n import look_levels

ALPHA = 0.05
SD_TRAIN, SD_REPORT, N_REPORTS = 0.02, 0.25, 300
SD_REP_MEAN = math.sqrt(2) * SD_REPORT / math.sqrt(N_REPORTS)  # the report part of one seed's difference
SIGMA = math.sqrt(SD_TRAIN**2 + SD_REP_MEAN**2)
DELTA = 0.7 * SIGMA  # about 0.02 gold F1 against a seed sd of about 0.03, as in the studies
COLLAPSE_P, SKEW = 0.1, -1.5
MAX_N = 40
FAMILY = 6

ROUTES = {  # name -> (analyses, stop at the first decided analysis, fixed_n levels per analysis or None = alpha)
    "fixed n 5": ([5], False, None),
    "fixed n 10": ([10], False, None),
    "looks 3-5-8": ([3, 5, 8], True, look_levels([3, 5, 8], ALPHA)),
    "continued 3-5 -> 8-12": ([3, 5, 8, 12], True, look_levels([3, 5], ALPHA) + look_levels([3, 5, 8, 12],
                                                                                          ALPHA)[2:]),
    "Table 4 history": ([3, 5, 6, 10, 14, 20], False, look_levels([3, 5], ALPHA) + [ALPHA] * 4),
    "compare 10 -> 14 -> 20": ([10, 14, 20], "equivalent", None),
    "about N followed": ([5, None], False, None),
    "every n to 20": (list(range(2, 21)), False, None),
}


def collapse_size() -> float:
    """k (in units of SIGMA) of the collapse -k with chance COLLAPSE_P such that normal(SIGMA) + collapse has
    skewness SKEW."""
    p = COLLAPSE_P

    def skew(k):
        return -k**3 * p * (1 - p) * (1 - 2 * p) / (1 + k * k * p * (1 - p)) ** 1.5 - SKEW

    return brentq(skew, 0.5, 50.0)


def draw(rng, dist: str, reps: int, n: int, effect: float = 0.0) -> np.ndarray:
    """[reps, n] per-seed differences: effect + training part + report part (module docstring). For "skew" the
    training part carries the collapse, scaled so that the whole difference keeps sd SIGMA and mean `effect`."""
    report = rng.normal(0.0, SD_REP_MEAN, (reps, n))
    if dist == "normal":
        train = rng.normal(0.0, SD_TRAIN, (reps, n))
    elif dist == "t3":
        train = rng.standard_t(3, (reps, n)) * SD_TRAIN / math.sqrt(3.0)
    elif dist == "skew":
        k = collapse_size()
        scale = SIGMA / math.sqrt(1 + k * k * COLLAPSE_P * (1 - COLLAPSE_P))
        # total = scale * (normal part of sd 1, split into the training and report shares, - k B + k p)
        report = report * scale / SIGMA
        train = (rng.normal(0.0, SD_TRAIN, (reps, n)) * scale / SIGMA
                 + scale * k * (COLLAPSE_P - (rng.random((reps, n)) < COLLAPSE_P)))
    else:
        raise ValueError(dist)
    return effect + train + report


def mdd(n: int, sd: float = SIGMA, alpha: float = ALPHA, power: float = 0.8) -> float:
    crit = t.isf(alpha / 2, n - 1)
    nc = brentq(lambda x: nct.sf(crit, n - 1, x) + np.nan_to_num(nct.cdf(-crit, n - 1, x)) - power, 0, crit + 10)
    return nc * sd / math.sqrt(n)


# ---------------------------------------------------------------------------------------------------- rules


def anytime_outcomes(d: np.ndarray, level: float = ALPHA, delta: float = DELTA) -> np.ndarray:
    """[reps, N] outcome codes at every prefix: 1 better, -1 worse, 2 equivalent, 0 undecided."""
    mean, _, p, lo, hi = anytime_path(d, level)
    n = np.arange(1, d.shape[1] + 1)
    diff = (p < level) & (n >= 2)
    out = np.where(diff, np.sign(mean), 0).astype(int)
    return np.where(~diff & (n >= 2) & (lo > -delta) & (hi < delta), 2, out)


def fixed_outcome(d: np.ndarray, level, delta: float = DELTA) -> np.ndarray:
    """Outcome codes of the fixed-n rule on all rows of d [reps, n] at per-row level (scalar or [reps])."""
    n = d.shape[1]
    mean, sd = d.mean(axis=1), d.std(axis=1, ddof=1)
    tstat = np.abs(mean) / (sd / math.sqrt(n))
    p = 2 * t.sf(tstat, n - 1)
    diff = p < level
    half = t.isf(level, n - 1) * sd / math.sqrt(n)
    out = np.where(diff, np.sign(mean), 0).astype(int)
    return np.where(~diff & (np.abs(mean) + half < delta), 2, out)


def about_n_fixed(d: np.ndarray, delta: float = DELTA) -> np.ndarray:
    """The fixed-n rule's "about N seeds" after 5 seeds, per row (harness/stats/decisions.py `_seeds_needed`: power 0.8
    at the measured |mean| / sd, or the TOST margin inside delta), searched up to MAX_N (MAX_N when none)."""
    grid = np.arange(6, MAX_N + 1)
    mean, sd = np.abs(d[:, :5].mean(axis=1)), d[:, :5].std(axis=1, ddof=1)
    crit = t.isf(ALPHA / 2, grid - 1)
    nc = (mean / sd)[:, None] * np.sqrt(grid)
    power = nct.sf(crit, grid - 1, nc) + np.nan_to_num(nct.cdf(-crit, grid - 1, nc))
    tost = mean[:, None] + t.isf(ALPHA, grid - 1) * sd[:, None] / np.sqrt(grid) < delta
    ok = (power >= 0.8) | tost
    return np.where(ok.any(axis=1), grid[np.argmax(ok, axis=1)], MAX_N)


def about_n_anytime(d: np.ndarray, delta: float = DELTA) -> np.ndarray:
    """The anytime rule's "about N seeds" after 5 seeds (`_anytime_seeds_needed`), searched up to MAX_N."""
    grid = np.arange(6, MAX_N + 1)
    mean, sd = np.abs(d[:, :5].mean(axis=1)), d[:, :5].std(axis=1, ddof=1)
    half = mixture_t_crit(grid, ALPHA) * sd[:, None] / np.sqrt(grid)
    ok = (mean[:, None] > half) | (mean[:, None] + half < delta)
    return np.where(ok.any(axis=1), grid[np.argmax(ok, axis=1)], MAX_N)


def route_outcomes(route: str, rule: str, d: np.ndarray, level: float = ALPHA) -> np.ndarray:
    """[reps, analyses] outcome codes the user reads on this route (0 after the route stopped)."""
    analyses, stop, levels = ROUTES[route]
    reps = d.shape[0]
    if route == "about N followed":
        first = (anytime_outcomes(d[:, :5], level)[:, -1] if rule == "anytime"
                 else fixed_outcome(d[:, :5], level))
        need = (about_n_anytime if rule == "anytime" else about_n_fixed)(d)
        second = np.zeros(reps, dtype=int)
        undecided = first == 0
        if rule == "anytime":
            path = anytime_outcomes(d, level)
            second = np.where(undecided, path[np.arange(reps), need - 1], 0)
        else:
            for n in np.unique(need[undecided]):
                rows = undecided & (need == n)
                second[rows] = fixed_outcome(d[rows, :n], level)
        return np.stack([first, second], axis=1)
    if rule == "anytime":
        path = anytime_outcomes(d, level)
        out = path[:, np.array(analyses) - 1]
    else:
        scale = level / ALPHA
        out = np.stack([fixed_outcome(d[:, :n], (levels[k] if levels else ALPHA) * scale)
                        for k, n in enumerate(analyses)], axis=1)
    if stop:
        stopped = (out == 2) if stop == "equivalent" else (out != 0)
        after = np.cumsum(stopped, axis=1) - stopped > 0  # analyses after the first stop are never made
        out = np.where(after, 0, out)
    return out


def rates(route: str, rule: str, dist: str, reps: int, rng) -> dict:
    n_max = MAX_N
    null = route_outcomes(route, rule, draw(rng, dist, reps, n_max))
    false_diff = np.isin(null, (1, -1)).any(axis=1)
    # family of FAMILY null contrasts, Holm at alpha: any false rejection iff some p < alpha / FAMILY at some
    # analysis, i.e. a contrast decided at level alpha / FAMILY (the first Holm step)
    fam = np.zeros(reps, dtype=bool)
    for _ in range(FAMILY):
        out = route_outcomes(route, rule, draw(rng, dist, reps, n_max), ALPHA / FAMILY)
        fam |= np.isin(out, (1, -1)).any(axis=1)
    at_delta = route_outcomes(route, rule, draw(rng, dist, reps, n_max, DELTA))
    n_last = max(n for n in ROUTES[route][0] if n is not None)
    effect = 1.5 * mdd(n_last)
    found = route_outcomes(route, rule, draw(rng, dist, reps, n_max, effect))
    first = np.where(found.any(axis=1), found[np.arange(reps), np.argmax(found != 0, axis=1)], 0)
    return {"null": false_diff.mean(), "better": np.isin(null, 1).any(axis=1).mean(), "family": fam.mean(),
            "equiv_at_delta": (at_delta == 2).any(axis=1).mean(), "power": (first == 1).mean(), "effect": effect}


def table(reps: int, seed: int, routes=None, dists=("normal", "t3", "skew"), rules=("anytime", "fixed_n")):
    rng = np.random.default_rng(seed)
    rows = []
    for route in routes or ROUTES:
        for rule in rules:
            for dist in dists:
                r = rates(route, rule, dist, reps if route != "about N followed" or rule == "anytime"
                          else max(reps // 5, 1000), rng)
                rows.append({"route": route, "rule": rule, "dist": dist, **r})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    start = time.time()
    se = math.sqrt(ALPHA * (1 - ALPHA) / args.reps)
    print(f"SIGMA {SIGMA:.4f} (train {SD_TRAIN}, report part {SD_REP_MEAN:.4f}), delta {DELTA:.4f}, collapse "
          f"{collapse_size():.2f} SIGMA-units with chance {COLLAPSE_P}; {args.reps} replications (about N followed "
          f"under fixed_n: {max(args.reps // 5, 1000)}); alpha {ALPHA}, 3 SE {3 * se:.4f}")
    print("| route | rule | seed distribution | null: false better/worse (1 contrast) | of which better | family of 6 "
          "(Holm) | +delta: false equivalent | power at 1.5 x MDD (effect) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in table(args.reps, args.seed):
        print(f"| {r['route']} | {r['rule']} | {r['dist']} | {r['null']:.3f} | {r['better']:.3f} | "
              f"{r['family']:.3f} | {r['equiv_at_delta']:.3f} | {r['power']:.3f} ({r['effect']:.4f}) |", flush=True)
    print(f"({time.time() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
