"""Does an option change what a study finds? One study run twice: first the usual way (the exact path), then with an
option (a faster sampler, merged LoRA passes, a bf16 classifier, ...), compared run by run.

    regbench compare FIRST_DIR OTHER_DIR [--seeds 0-4 --other-seeds 5-9] [--json FILE]

Three readings, from strictest to weakest:

1. Identical runs: for each (arm, seed) in both, whether the test prediction files are byte-identical and the test
   metrics equal. An exact change must give all of them.
2. The option's effect on each arm (`option_effects`; with 2b one declared family, `option_family`, issue 48: Holm
   over the union, by the study's decide.rule, anytime by default, so repeating the comparison as seeds grow keeps
   alpha): for every arm and every metric the study's contrasts
   declare, OTHER - FIRST paired by seed (the i-th seed of --other-seeds with the i-th of --seeds; by default
   the seeds complete in both), decided by harness/stats/decisions.py over the family of (arm, metric) pairs, Holm
   across them, with the metric's delta (the smallest the study declares for it). "equivalent" for every pair is
   the calibrated form of "the option leaves the study's outcomes unchanged": each arm's score moves by less than
   the smallest difference the study cares about, with the error rates of that rule (a false "equivalent" for a
   pair whose true shift is at least delta has chance at most alpha; a false "better"/"worse" across the family at
   most alpha). Since an inexact option re-draws every RL run, the pairs are two independent runs of one seed's
   schedule (same start, batch order and test split), so their spread is about the seed-to-seed spread, and
   showing equivalence takes as many seeds as a contrast between arms does; "undecided" says how many.
   Each arm within +-delta bounds each declared contrast's shift by 2 delta only; reading 2b decides the shifts
   themselves (`contrast_shifts`): per declared contrast ARM - BASELINE on a metric, the per-seed
   (ARM - BASELINE in OTHER) - (ARM - BASELINE in FIRST), decided with the contrast's own delta, Holm over the
   declared contrasts. An option that moves every arm alike shifts no contrast. Four runs enter each seed's
   difference, so it needs about twice the seeds of reading 2 to show equivalence.
3. Verdicts side by side (`side_by_side`): each study's declared contrasts decided by its own rule
   (reports/verdicts.py). Only "better" against "worse" contradicts: the rule reports a detected difference
   before equivalence, so "worse" (a difference found, possibly inside +-delta) and "equivalent" can both be
   true of one difference, and "undecided" contradicts nothing. Equal words
   are the strictest reading and the least informative one: a contrast whose interval lies near its +-delta lands
   on either side when its runs are re-drawn, with or without an option (compare the first study with itself
   on other seeds, --seeds 0-4 --other-seeds 5-9, to see how often).

Reads only run records (index.json and what it points to), as the rest of reports/.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.stats.decisions import Contrast, Decision, decide_family, seed_check
from reports.experiment import Experiment, read_jsonl
from reports.verdicts import Verdicts, study_verdicts

FIRST, OTHER = "first", "other"
IGNORED_METRICS = ("model_dir", "eval_key")  # which model and settings were tested (keys, paths), not the scores


@dataclass(frozen=True)
class SameRuns:
    """Reading 1: how many of the paired runs are identical."""

    pairs: int
    predictions_identical: int
    metrics_equal: int


@dataclass(frozen=True)
class VerdictPair:
    """Reading 3 for one declared contrast."""

    contrast: Contrast
    first: Decision
    other: Decision

    @property
    def same(self) -> bool:
        return self.first.outcome == self.other.outcome

    @property
    def contradicts(self) -> bool:
        return {self.first.outcome, self.other.outcome} == {"better", "worse"}


@dataclass(frozen=True)
class OptionCheck:
    first_seeds: list[int]
    other_seeds: list[int]
    same_runs: SameRuns
    effects: list[Decision]  # reading 2, one per (arm, metric)
    shifts: list[Decision]  # reading 2b, one per declared contrast (its own delta)
    verdicts: list[VerdictPair]  # reading 3 (empty when the study declares no contrasts)
    alpha: float
    rule: str = "fixed_n"  # harness/stats/decisions.RULES: readings 2 and 2b's rule (the study's decide.rule)
    differences: tuple = ()  # per decision of effects + shifts, its per-seed differences (for the seed check)


def metric_deltas(contrasts: Sequence[Mapping]) -> dict[str, float]:
    """metric -> the smallest delta the study's declared contrasts give it, in their order of first appearance."""
    out: dict[str, float] = {}
    for c in contrasts:
        metric, delta = str(c["metric"]), float(c["delta"])
        out[metric] = min(delta, out.get(metric, math.inf))
    return out


def _effect_family(first, other, deltas, pairs) -> tuple[list[Contrast], dict]:
    contrasts, diffs = [], {}
    for (arm, metric), ref_values in first.items():
        if metric not in deltas:
            continue
        other_values = other.get((arm, metric), {})
        c = Contrast(f"{arm} ({OTHER})", f"{arm} ({FIRST})", metric, float(deltas[metric]))
        contrasts.append(c)
        diffs[c] = [other_values[o] - ref_values[r] for r, o in pairs if r in ref_values and o in other_values]
    return contrasts, diffs


def _shift_family(first, other, contrasts, pairs) -> tuple[list[Contrast], dict]:
    family, diffs = [], {}
    for c in contrasts:
        arm, base, metric = str(c["arm"]), str(c["baseline"]), str(c["metric"])
        contrast = Contrast(f"{arm} - {base} ({OTHER})", f"{arm} - {base} ({FIRST})", metric, float(c["delta"]))
        family.append(contrast)
        ra, rb = first.get((arm, metric), {}), first.get((base, metric), {})
        oa, ob = other.get((arm, metric), {}), other.get((base, metric), {})
        diffs[contrast] = [(oa[o] - ob[o]) - (ra[r] - rb[r]) for r, o in pairs
                           if r in ra and r in rb and o in oa and o in ob]
    return family, diffs


def option_effects(first: Mapping[tuple[str, str], Mapping[int, float]],
                   other: Mapping[tuple[str, str], Mapping[int, float]], deltas: Mapping[str, float],
                   pairs: Sequence[tuple[int, int]], *, alpha: float = 0.05, rule: str = "fixed_n") -> list[Decision]:
    """Reading 2 as a pure function. first / other: (arm, metric) -> seed -> test score; pairs: (first
    seed, other seed) in the order to pair them. One contrast per (arm, metric) of `first` whose metric has a
    delta, named arm "ARM (other)" against baseline "ARM (first)"; a pair of seeds missing on either side is
    left out of that contrast. Holm runs over every contrast of this family at level alpha (check_option decides
    this family and reading 2b's together)."""
    contrasts, diffs = _effect_family(first, other, deltas, pairs)
    return decide_family(contrasts, diffs, alpha=alpha, rule=rule)


def contrast_shifts(first: Mapping[tuple[str, str], Mapping[int, float]],
                    other: Mapping[tuple[str, str], Mapping[int, float]], contrasts: Sequence[Mapping],
                    pairs: Sequence[tuple[int, int]], *, alpha: float = 0.05, rule: str = "fixed_n") -> list[Decision]:
    """Reading 2b as a pure function: per declared contrast ({arm, baseline, metric, delta}), the per-seed shift
    of ARM - BASELINE from `first` to `other` (a pair of seeds enters when both arms have it on both sides),
    decided over the family of contrasts."""
    family, diffs = _shift_family(first, other, contrasts, pairs)
    return decide_family(family, diffs, alpha=alpha, rule=rule)


def option_family(first, other, deltas, contrasts, pairs, *, alpha: float = 0.05,
                  rule: str = "anytime", differences: list | None = None) -> tuple[list[Decision], list[Decision]]:
    """Readings 2 and 2b decided as one declared family (issue 48): Holm over the arm effects and the contrast
    shifts together at level alpha, so the one-line summary ("the option changes the results" if any of them is
    better or worse) has family-wise error at most alpha; under the anytime rule also when the comparison is
    repeated as seeds grow. Returns (effects, shifts)."""
    effects, eff_diffs = _effect_family(first, other, deltas, pairs)
    shifts, shift_diffs = _shift_family(first, other, contrasts, pairs)
    decided = decide_family(effects + shifts, {**eff_diffs, **shift_diffs}, alpha=alpha, rule=rule)
    if differences is not None:  # the caller's list receives each decision's differences, in order
        differences.extend({**eff_diffs, **shift_diffs}[c] for c in effects + shifts)
    return decided[:len(effects)], decided[len(effects):]


def check_option(first: Experiment, other: Experiment, *, seeds: Sequence[int] | None = None,
                 other_seeds: Sequence[int] | None = None, alpha: float | None = None,
                 deltas: Mapping[str, float] | None = None) -> OptionCheck:
    """The three readings for two runs of one study (module docstring). deltas: metric -> delta for reading 2,
    added to (and replacing) those the study's contrasts give."""
    _check_same_study(first, other)
    ref_seeds, oth_seeds = _seed_pairs(first, other, seeds, other_seeds)
    first, other = _only_seeds(first, ref_seeds), _only_seeds(other, oth_seeds)
    alpha = float(first.decide.get("alpha", 0.05)) if alpha is None else float(alpha)
    arms = [a.name for a in first.arms]
    deltas = {**metric_deltas(first.contrasts), **{m: _positive(m, d) for m, d in (deltas or {}).items()}}
    if not deltas:
        raise ValueError(f"{first.path} declares no contrasts: give the metrics to compare with their deltas "
                         f"(--delta gold_f1=0.02)")
    values = {}
    for exp in (first, other):
        values[exp is other] = {(arm, metric): exp.values(arm, metric) for arm in arms for metric in deltas}
    pairs = list(zip(ref_seeds, oth_seeds, strict=True))
    rule = str(first.decide.get("rule", "anytime"))
    differences: list = []
    effects, shifts = option_family(values[False], values[True], deltas, first.contrasts, pairs, alpha=alpha,
                                    rule=rule, differences=differences)
    return OptionCheck(ref_seeds, oth_seeds, _same_runs(first, other, pairs), effects, shifts,
                       _side_by_side(study_verdicts(first), study_verdicts(other)), alpha, rule,
                       tuple(differences))


# ------------------------------------------------------------------------------------------------------ helpers


def _positive(metric: str, delta) -> float:
    value = float(delta)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"the delta of {metric} must be a number > 0, got {delta!r}")
    return value


def _check_same_study(first: Experiment, other: Experiment) -> None:
    if first.study != other.study:
        raise ValueError(f"{other.path} is study {other.study!r} and {first.path} is {first.study!r}: "
                         f"compare two runs of one study")
    ref_arms, oth_arms = {a.name for a in first.arms}, {a.name for a in other.arms}
    if ref_arms != oth_arms:
        raise ValueError(f"the two studies have different arms: {sorted(ref_arms)} in {first.path}, "
                         f"{sorted(oth_arms)} in {other.path}")
    if first.contrasts != other.contrasts:
        raise ValueError(f"the two studies declare different contrasts (index.json 'contrasts' of {first.path} "
                         f"and {other.path})")
    _check_same_test_split(first, other)


def _check_same_test_split(first: Experiment, other: Experiment) -> None:
    """The first complete run on each side with per-report outputs must list the same reports (ids and
    references, in order): a comparison across two test splits would measure the split, not the option."""
    def reports(exp: Experiment):
        for run in sorted(exp.runs, key=lambda r: (r.arm, r.seed)):
            if run.status == "complete" and run.predictions_path is not None:
                return run.predictions_path, [(r.get("id"), r.get("reference")) for r in read_jsonl(
                    run.predictions_path)]
        return None, None

    (ref_path, ref_rows), (oth_path, oth_rows) = reports(first), reports(other)
    if ref_rows is not None and oth_rows is not None and ref_rows != oth_rows:
        raise ValueError(f"{oth_path} and {ref_path} were scored on different test reports: compare two runs of "
                         f"one study on one test split")


def _seeds_with_runs(exp: Experiment) -> set[int]:
    """Seeds with at least one complete run (a failed run leaves its arm out of that seed's pairs)."""
    return {r.seed for r in exp.runs if r.status == "complete"}


def _seed_pairs(first: Experiment, other: Experiment, seeds, other_seeds) -> tuple[list[int], list[int]]:
    if seeds is None and other_seeds is None:
        shared = sorted(_seeds_with_runs(first) & _seeds_with_runs(other))
        if not shared:
            raise ValueError(f"no seed has a complete run in both {first.path} and {other.path}")
        return shared, shared
    seeds = list(seeds if seeds is not None else other_seeds)
    other_seeds = list(other_seeds if other_seeds is not None else seeds)
    if len(seeds) != len(other_seeds):
        raise ValueError(f"--seeds {seeds} and --other-seeds {other_seeds} must be as many (they are paired in order)")
    for exp, wanted in ((first, seeds), (other, other_seeds)):
        if len(set(wanted)) != len(wanted):
            raise ValueError(f"seeds {wanted} of {exp.path} list a seed twice")
        missing = sorted(set(wanted) - _seeds_with_runs(exp))
        if missing:
            raise ValueError(f"{exp.path}: no complete run for seed(s) {missing}")
    if first.path.resolve() == other.path.resolve() and set(seeds) & set(other_seeds):
        raise ValueError(f"a study compared with itself needs disjoint seeds, got {seeds} and {other_seeds}")
    return seeds, other_seeds


def _only_seeds(exp: Experiment, seeds: Sequence[int]) -> Experiment:
    keep = set(seeds)
    return dataclasses.replace(exp, runs=[r for r in exp.runs if r.seed in keep], seeds=sorted(keep))


def _digests(folder: Path | None) -> list[str]:
    if folder is None or not folder.is_dir():
        return []
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("predictions*"))]


def _same_runs(first: Experiment, other: Experiment, pairs: Sequence[tuple[int, int]]) -> SameRuns:
    def runs(exp: Experiment):
        return {(r.arm, r.seed): r for r in exp.runs if r.status == "complete"}

    def scores(run):
        return {k: v for k, v in run.scores.items() if k not in IGNORED_METRICS and "time" not in k}

    ref_runs, oth_runs = runs(first), runs(other)
    matched = [(ref_runs[a, r], oth_runs[a, o]) for a in sorted({a.name for a in first.arms})
               for r, o in pairs if (a, r) in ref_runs and (a, o) in oth_runs]
    same_files = sum(bool(d) and d == _digests(o.eval_dir) for x, o in matched for d in [_digests(x.eval_dir)])
    return SameRuns(len(matched), same_files, sum(scores(x) == scores(o) for x, o in matched))


def _side_by_side(first: Verdicts | None, other: Verdicts | None) -> list[VerdictPair]:
    if first is None or other is None:
        return []
    return [VerdictPair(r.contrast, r, o) for r, o in zip(first.decisions, other.decisions, strict=True)]


# ------------------------------------------------------------------------------------------------------ text


def _interval(d: Decision) -> str:
    if not math.isfinite(d.lo):
        return f"{d.diff:+.4f}" if math.isfinite(d.diff) else "-"
    return f"{d.diff:+.4f} [{d.lo:+.4f}, {d.hi:+.4f}]"


def _word(d: Decision) -> str:
    if d.outcome == "undecided" and d.seeds_needed:
        return f"undecided (about {d.seeds_needed} seeds at this spread)"
    return d.outcome


def _decision_lines(decisions: Sequence[Decision], width: int) -> list[str]:
    return [f"   {d.contrast.arm.removesuffix(f' ({OTHER})'):<{width}} {d.contrast.metric:<12} n={d.n}  "
            f"{_interval(d):<32} +-{d.contrast.delta:g}  {_word(d)}" for d in decisions]


def summary_lines(check: OptionCheck, first_name: str = FIRST, other_name: str = OTHER) -> list[str]:
    """The comparison as text, reading by reading, ending with a one-line summary."""
    s = check.same_runs
    same_seeds = check.first_seeds == check.other_seeds
    seeds = (f"seeds {check.first_seeds}" if same_seeds else
             f"{first_name} seeds {check.first_seeds} paired in order with {other_name} seeds "
             f"{check.other_seeds}")
    lines = [f"{other_name} against {first_name}, {seeds}", "",
             f"1. identical runs: {s.predictions_identical} of {s.pairs} test prediction files byte-identical, "
             f"test metrics equal in {s.metrics_equal}", "",
             f"2. the option's effect on each arm ({other_name} - {first_name} paired by seed; one family with "
             f"2b: Holm over {len(check.effects)} (arm, metric) pairs and {len(check.shifts)} contrast shifts, "
             f"alpha {check.alpha:g}; equivalent = inside +- delta; {guarantee_text(check.rule)}):"]
    lines += _decision_lines(check.effects, 12)
    if check.shifts:
        lines += ["", f"2b. the option's shift of each declared contrast (per seed, ARM - BASELINE in {other_name} "
                      f"minus in {first_name}; in reading 2's family, its own delta):"]
        lines += _decision_lines(check.shifts, 22)
    if check.verdicts:
        lines += ["", f"3. the study's declared contrasts, each study decided by its own rule "
                      f"({first_name} | {other_name}):"]
        for v in check.verdicts:
            flag = "  CONTRADICTS" if v.contradicts else ("" if v.same else "  differs")
            lines.append(f"   {v.contrast.arm} - {v.contrast.baseline} {v.contrast.metric}: "
                         f"{_word(v.first)} {_interval(v.first)} | {_word(v.other)} {_interval(v.other)}"
                         f"{flag}")
    flagged = [f"{d.contrast.arm} {d.contrast.metric}: {flag}" for d, diffs in zip(
        (*check.effects, *check.shifts), check.differences, strict=False) if (flag := seed_check(diffs))]
    lines += ["", "Assumption of readings 2 and 2b: roughly normal per-seed differences (docs/calibration.md)"
              + ("; check: " + "; ".join(flagged) if flagged else "")]
    lines += ["", summary(check)]
    return lines


def guarantee_text(rule: str) -> str:
    if rule == "anytime":
        return "anytime-valid: holds however seeds were added and however often the comparison is repeated"
    return "fixed n: valid only if the seeds compared were fixed in advance and compared once"


def summary(check: OptionCheck) -> str:
    """One line: the strongest reading that holds."""
    s = check.same_runs
    if s.pairs and s.predictions_identical == s.pairs and s.metrics_equal == s.pairs:
        return f"identical: all {s.pairs} runs give byte-identical predictions and equal test metrics"
    moved = [f"{d.contrast.arm.removesuffix(f' ({OTHER})')} {d.contrast.metric} {d.outcome}"
             for d in (*check.effects, *check.shifts) if d.outcome in ("better", "worse")]
    family = (f" (one family: {len(check.effects)} arm effects and {len(check.shifts)} contrast shifts, alpha "
              f"{check.alpha:g}, {check.rule.replace('_', ' ')})")
    if moved:
        return f"the option changes the results: {', '.join(moved)}{family}"
    contradictions = sum(v.contradicts for v in check.verdicts)
    verdicts = (f"; declared verdicts: {sum(v.same for v in check.verdicts)} of {len(check.verdicts)} the same, "
                f"{contradictions} contradicting" if check.verdicts else "")
    arms = sum(d.outcome == "equivalent" for d in check.effects)
    shifts = sum(d.outcome == "equivalent" for d in check.shifts)
    if arms == len(check.effects) and shifts == len(check.shifts):
        shown = " and every declared contrast's shift within its +- delta" if check.shifts else ""
        return f"equivalent: every arm's score within +- delta of the first's{shown}{verdicts}{family}"
    return (f"not shown equivalent: {arms} of {len(check.effects)} (arm, metric) pairs and {shifts} of "
            f"{len(check.shifts)} contrast shifts equivalent, none better or worse{verdicts}{family}")


def as_json(check: OptionCheck) -> dict:
    def decision(d: Decision) -> dict:
        return {"arm": d.contrast.arm, "baseline": d.contrast.baseline, "metric": d.contrast.metric,
                "delta": d.contrast.delta, "outcome": d.outcome, "n": d.n, "diff": d.diff, "lo": d.lo, "hi": d.hi,
                "p": d.p, "p_adjusted": d.p_adjusted, "seeds_needed": d.seeds_needed}

    return {"first_seeds": check.first_seeds, "other_seeds": check.other_seeds, "alpha": check.alpha,
            "rule": check.rule, "guarantee": guarantee_text(check.rule),
            "same_runs": dataclasses.asdict(check.same_runs), "effects": [decision(d) for d in check.effects],
            "shifts": [decision(d) for d in check.shifts],
            "verdicts": [{"first": decision(v.first), "other": decision(v.other), "same": v.same,
                          "contradicts": v.contradicts} for v in check.verdicts],
            "summary": summary(check)}
