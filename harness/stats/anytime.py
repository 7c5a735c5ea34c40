"""The anytime rule of harness/stats/decisions.py (rule="anytime").

The same contrasts, Holm and outcome words, with the t-test replaced by an
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
"""

from __future__ import annotations

import math

import numpy as np

from harness.stats.fixed_n import MAX_SEEDS

MIXTURE_G = 0.25  # prior variance of the standardized effect (chosen by simulation: benchmarks/calibration_sim.py)


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
