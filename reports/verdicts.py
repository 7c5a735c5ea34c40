"""The verdict of a study: its declared primary contrasts (study file `contrasts:`), each decided by the rule of
harness/stats/decisions.py over the seeds' paired test differences, as better / worse / equivalent / undecided.

Only declared contrasts get a decision word. A study's `decide:` sets the rule (anytime, the default: valid however
seeds were added; or fixed_n: valid only if the seeds or looks were fixed in advance), alpha, the planned looks of
`--until-decided` (alpha spent over them under fixed_n) and the spending function; the family correction (Holm)
runs over the declared contrasts only. Everything else the report shows is exploratory. An index.json written
before issue 48 has no rule: it is read as "anytime", since nothing records whether its seeds were fixed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.stats.decisions import Contrast, Decision, decide_family, seed_check
from reports.experiment import Experiment


@dataclass(frozen=True)
class Verdicts:
    decisions: list[Decision]
    alpha: float
    looks: list[int] | None
    spending: str
    look: int | None          # the look the decisions were taken at (sequential), None for fixed n
    seeds: dict[tuple[str, str], list[int]]  # (arm, baseline) -> the shared seeds the differences come from
    rule: str = "anytime"  # harness/stats/decisions.RULES
    flags: dict = None  # Contrast -> seed_check phrase (a seed distribution outside the normal assumption)


def paired_differences(exp: Experiment, arm: str, baseline: str, metric: str) -> tuple[list[int], list[float]]:
    """(seeds, arm - baseline) over the seeds both arms completed, in seed order."""
    a, b = exp.values(arm, metric), exp.values(baseline, metric)
    seeds = sorted(set(a) & set(b))
    return seeds, [a[s] - b[s] for s in seeds]


def current_look(n: int, looks: list[int] | None) -> int | None:
    """The sequential look `n` seeds have reached (the last planned count <= n), 0 before the first, None when
    the rule has no looks (a fixed-n analysis)."""
    if not looks:
        return None
    return sum(1 for k in looks if k <= n)


def study_verdicts(exp: Experiment) -> Verdicts | None:
    """Decisions on the experiment's declared contrasts (None when it declares none)."""
    declared = exp.contrasts
    if not declared:
        return None
    rule = {"alpha": 0.05, "looks": None, "spending": "obrien_fleming", "rule": "anytime", **exp.decide}
    contrasts = [Contrast(c["arm"], c["baseline"], c["metric"], float(c["delta"])) for c in declared]
    diffs, seeds = {}, {}
    for c in contrasts:
        s, d = paired_differences(exp, c.arm, c.baseline, c.metric)
        diffs[c] = d
        seeds[c.arm, c.baseline] = s
    flags = {c: f for c in contrasts if (f := seed_check(diffs[c]))}
    if rule["rule"] == "anytime":
        decisions = decide_family(contrasts, diffs, alpha=rule["alpha"], rule="anytime")
        return Verdicts(decisions, rule["alpha"], None, rule["spending"], None, seeds, "anytime", flags)
    n = min((len(d) for d in diffs.values()), default=0)
    looks = rule["looks"]
    look = current_look(n, looks)
    if looks and look == 0:  # before the first planned look: nothing is decided yet
        decisions = decide_family(contrasts, {c: d[:1] for c, d in diffs.items()}, alpha=rule["alpha"])
    elif looks:
        decisions = decide_family(contrasts, {c: d[:looks[look - 1]] for c, d in diffs.items()},
                                  alpha=rule["alpha"], looks=looks, look=look, spending=rule["spending"])
    else:
        decisions = decide_family(contrasts, diffs, alpha=rule["alpha"])
    return Verdicts(decisions, rule["alpha"], looks, rule["spending"], look, seeds, "fixed_n", flags)


def _num(x: float, digits: int = 4) -> str:
    return f"{x:+.{digits}f}" if math.isfinite(x) else "–"


def verdict_rows(v: Verdicts, labels: dict[str, str] | None = None) -> tuple[list[str], list[list[str]]]:
    labels = labels or {}
    header = ["Contrast", "Metric", "n seeds", "Difference [interval]", "± delta", "p (raw / adjusted)",
              "Outcome"]
    rows = []
    for d in v.decisions:
        c = d.contrast
        name = f"{labels.get(c.arm, c.arm)} - {labels.get(c.baseline, c.baseline)}"
        interval = f"{_num(d.diff)} [{_num(d.lo)}, {_num(d.hi)}]"
        p = f"{d.p:.3g} / {d.p_adjusted:.3g}" if math.isfinite(d.p) else "–"
        outcome = d.outcome
        if d.outcome == "undecided":
            outcome += f" (about {d.seeds_needed} seeds at this spread)" if d.seeds_needed else " (spread unknown)"
        if (v.flags or {}).get(c):
            outcome += " [check: a seed far from the others]"
        rows.append([name, c.metric, str(d.n), interval, f"{c.delta:g}", p, outcome])
    return header, rows


def guarantee(v: Verdicts) -> str:
    """Which guarantee the outcomes have (issue 48)."""
    if v.rule == "anytime":
        return ("anytime-valid: the error rates hold however and whenever seeds were added, including seeds added "
                "after looking (a t-mixture confidence sequence; harness/stats/decisions.py)")
    if v.looks:
        return ("planned looks: valid only if the looks and the maximum were fixed before any result was seen and "
                "not changed since (decide.rule: anytime holds however seeds were added)")
    return ("fixed n: valid only if n was fixed in advance; seeds added after looking void it (decide.rule: "
            "anytime holds however seeds were added)")


def assumption_text(v: Verdicts) -> str:
    """The distributional assumption, and what the seed check found."""
    text = ("Assumption: the per-seed paired differences are roughly normal (heavy symmetric tails are covered; "
            "a seed distribution with collapsing runs is not: docs/calibration.md).")
    for c, flag in (v.flags or {}).items():
        text += f" Check, {c.arm} - {c.baseline} on {c.metric}: {flag}."
    return text


def rule_text(v: Verdicts) -> str:
    """One paragraph: what the outcomes mean under this study's rule."""
    if v.rule == "anytime":
        return (f"Declared primary contrasts (anytime rule, alpha {v.alpha:g}; Holm over the {len(v.decisions)} "
                f"contrasts; {guarantee(v)}). better / worse: the confidence sequence of the mean paired difference "
                "over seeds excludes 0; equivalent: it lies inside ± delta; undecided: neither, with the seeds at "
                "which the measured mean and spread would decide (adding seeds keeps alpha). One seed never decides. "
                f"{assumption_text(v)} Every other difference on this page is exploratory (raw p, no decision).")
    seq = (f"sequential: looks at {v.looks} seeds, alpha {v.alpha:g} spent over them ({v.spending.replace('_', '-')}"
           f"), decided at look {v.look} of {len(v.looks)}" if v.looks else f"fixed n, alpha {v.alpha:g}")
    return (f"Declared primary contrasts ({seq}; Holm over the {len(v.decisions)} contrasts; {guarantee(v)}). "
            "better / worse: the paired t-test over seeds rejects no difference; equivalent: the interval lies "
            "inside ± delta (two one-sided tests); undecided: neither, with the seeds the measured seed-to-seed "
            "spread would need. One seed never decides. "
            f"{assumption_text(v)} Every other difference on this page is exploratory (raw p, no decision).")
