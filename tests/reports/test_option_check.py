"""reports/option_check.py (`regbench compare`): one study run two ways, read as identical runs, the option's
effect on each arm (decided over the family of (arm, metric) pairs) and the verdicts side by side; hand-built
studies, the refusals, the command, then simulations whose runs carry every noise source the check claims to cover
(the seed's schedule shared by the two runs of a seed, each run's own training noise, and each run's report-level
noise over a shared test split)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import t

from harness.cli import main
from reports.experiment import load_experiment
from reports.option_check import (
    check_option,
    contrast_shifts,
    metric_deltas,
    option_effects,
    summary,
    summary_lines,
)

ALPHA = 0.05
CONTRASTS = [{"arm": "ckl", "baseline": "base", "metric": "gold_f1", "delta": 0.02},
             {"arm": "ckl", "baseline": "base", "metric": "BLEU_4", "delta": 0.01},
             {"arm": "nokl", "baseline": "base", "metric": "BLEU_4", "delta": 0.005}]
# arm -> seed -> (gold_f1, BLEU_4)
VALUES = {"base": {0: (0.71, 0.301), 1: (0.73, 0.297), 2: (0.72, 0.303), 3: (0.74, 0.299)},
          "ckl": {0: (0.70, 0.311), 1: (0.72, 0.296), 2: (0.73, 0.300), 3: (0.72, 0.305)},
          "nokl": {0: (0.69, 0.290), 1: (0.75, 0.310), 2: (0.71, 0.305), 3: (0.70, 0.302)}}


def write_study(root: Path, values=VALUES, *, study="t4", contrasts=CONTRASTS, references=None,
                decide_rule="fixed_n") -> Path:
    """index.json and each run's eval/metrics.json (and per-report predictions when `references` is given). The
    hand-computed cases declare the fixed-n rule (the studies' default is anytime since issue 48)."""
    runs = []
    for arm, by_seed in values.items():
        for seed, (gold, bleu) in by_seed.items():
            ev = root / arm / f"seed{seed}" / "eval"
            ev.mkdir(parents=True)
            (ev / "metrics.json").write_text(json.dumps({"gold_f1": gold, "BLEU_4": bleu, "model_dir": str(ev)}))
            if references is not None:
                rows = [{"id": f"r{i}", "reference": ref, "generated": f"{arm} {seed} {gold}"}
                        for i, ref in enumerate(references)]
                (ev / "predictions_final_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            runs.append({"arm": arm, "seed": seed, "status": "complete", "eval_dir": f"{arm}/seed{seed}/eval",
                         "metrics": f"{arm}/seed{seed}/eval/metrics.json"})
    index = {"format": "regbench.experiment-index/1", "study": study, "baseline_arm": "base",
             "seeds": sorted({s for v in values.values() for s in v}), "runs": runs, "contrasts": contrasts,
             "arms": [{"name": a} for a in values], "decide": {"alpha": ALPHA, "looks": None, "rule": decide_rule}}
    (root / "index.json").write_text(json.dumps(index))
    return root


def shifted(shift: dict) -> dict:
    """VALUES with (arm, metric index) -> per-seed additions."""
    out = {arm: {s: list(v) for s, v in by_seed.items()} for arm, by_seed in VALUES.items()}
    for (arm, k), adds in shift.items():
        for seed, add in zip(sorted(out[arm]), adds, strict=True):
            out[arm][seed][k] += add
    return {arm: {s: tuple(v) for s, v in by_seed.items()} for arm, by_seed in out.items()}


# ------------------------------------------------------------------------------------------------- by hand


def test_each_metric_takes_its_smallest_declared_delta():
    assert metric_deltas(CONTRASTS) == {"gold_f1": 0.02, "BLEU_4": 0.005}


def test_a_copy_of_a_study_is_identical(tmp_path):
    ref = write_study(tmp_path / "a", references=["x y", "z"])
    shutil.copytree(ref, tmp_path / "b")
    for path in (tmp_path / "b").rglob("metrics.json"):  # the other study's own model folders and eval keys
        path.write_text(json.dumps({**json.loads(path.read_text()), "model_dir": str(path), "eval_key": "other"}))
    check = check_option(load_experiment(ref), load_experiment(tmp_path / "b"))
    s = check.same_runs
    assert (s.pairs, s.predictions_identical, s.metrics_equal) == (12, 12, 12)  # model_dir, eval_key: ignored
    assert [d.outcome for d in check.effects] == ["equivalent"] * 6  # all differences 0: a zero-width interval
    assert all(v.same and not v.contradicts for v in check.verdicts) and len(check.verdicts) == 3
    assert summary(check).startswith("identical: all 12 runs")


def test_the_option_effect_of_each_arm_is_decided_over_the_family(tmp_path):
    # base: BLEU_4 +0.003 on every seed (all-equal differences: exact sign-flip p 2^(1-4) = 0.125, a zero-width
    # interval inside +-0.005) -> equivalent; ckl: gold_f1 about -0.05 -> worse; nokl: BLEU_4 moves +-0.012
    # around +0.001 -> undecided.
    other = shifted({("base", 1): [0.003] * 4, ("ckl", 0): [-0.051, -0.049, -0.052, -0.048],
                     ("nokl", 1): [0.013, -0.011, 0.012, -0.010]})
    check = check_option(load_experiment(write_study(tmp_path / "a")),
                         load_experiment(write_study(tmp_path / "b", other)))
    got = {(d.contrast.arm, d.contrast.metric): d for d in check.effects}
    assert list(got) == [(f"{a} (other)", m) for a in VALUES for m in ("gold_f1", "BLEU_4")]
    assert got["base (other)", "BLEU_4"].outcome == "equivalent"
    assert math.isclose(got["base (other)", "BLEU_4"].diff, 0.003, rel_tol=1e-9)
    worse = got["ckl (other)", "gold_f1"]
    d = np.array([-0.051, -0.049, -0.052, -0.048])
    assert worse.outcome == "worse" and worse.n == 4 and math.isclose(worse.diff, -0.05, rel_tol=1e-9)
    # p of the paired t by hand; Holm over one family (issue 48): the 6 arm effects and the 3 contrast shifts, so
    # the smallest of the 9 raw p is multiplied by 9 (before issue 48, 6: two families of 6 and 3)
    tstat = d.mean() / (d.std(ddof=1) / 2)
    p = 2 * t.sf(abs(tstat), 3)
    assert math.isclose(worse.p, p, rel_tol=1e-6) and math.isclose(worse.p_adjusted, 9 * p, rel_tol=1e-6)
    undecided = got["nokl (other)", "BLEU_4"]
    assert undecided.outcome == "undecided" and undecided.seeds_needed and undecided.seeds_needed > 4
    assert summary(check) == ("the option changes the results: ckl gold_f1 worse, ckl - base gold_f1 worse (one "
                              "family: 6 arm effects and 3 contrast shifts, alpha 0.05, fixed n)")
    # reading 2b: the declared contrasts' shifts, each with its own delta. ckl - base on gold_f1 moved with ckl's
    # scores; nokl - base on BLEU_4 shifts by nokl's moves minus base's +0.003 (0.010, -0.014, 0.009, -0.013)
    shifts = {(d.contrast.arm, d.contrast.metric): d for d in check.shifts}
    assert list(shifts) == [("ckl - base (other)", "gold_f1"), ("ckl - base (other)", "BLEU_4"),
                            ("nokl - base (other)", "BLEU_4")]
    assert [d.contrast.delta for d in check.shifts] == [0.02, 0.01, 0.005]
    assert shifts["ckl - base (other)", "gold_f1"].outcome == "worse"
    assert math.isclose(shifts["ckl - base (other)", "BLEU_4"].diff, -0.003, rel_tol=1e-9)  # base's BLEU moved
    nokl = shifts["nokl - base (other)", "BLEU_4"]
    assert nokl.outcome == "undecided" and math.isclose(nokl.diff, (0.010 - 0.014 + 0.009 - 0.013) / 4, rel_tol=1e-9)
    # the declared verdicts: each study's own
    assert [v.contrast.arm for v in check.verdicts] == ["ckl", "ckl", "nokl"]


def test_a_study_against_its_own_later_seeds_pairs_them_in_order(tmp_path):
    ref = load_experiment(write_study(tmp_path / "a"))
    check = check_option(ref, ref, seeds=[0, 1], other_seeds=[3, 2])
    got = {(d.contrast.arm, d.contrast.metric): d for d in check.effects}
    # base gold_f1: (seed 3 - seed 0, seed 2 - seed 1) = (0.03, -0.01)
    assert math.isclose(got["base (other)", "gold_f1"].diff, (0.74 - 0.71 + 0.72 - 0.73) / 2, rel_tol=1e-9)
    assert got["base (other)", "gold_f1"].n == 2
    assert (check.first_seeds, check.other_seeds) == ([0, 1], [3, 2])
    assert check.same_runs.predictions_identical == 0  # no prediction files: nothing called identical


def test_a_failed_run_leaves_only_its_arm_out_of_its_seed(tmp_path):
    values = {arm: dict(by_seed) for arm, by_seed in VALUES.items()}
    del values["nokl"][3]
    check = check_option(load_experiment(write_study(tmp_path / "a")),
                         load_experiment(write_study(tmp_path / "b", values)))
    assert check.first_seeds == [0, 1, 2, 3]
    assert {d.contrast.arm: d.n for d in check.effects} == {"base (other)": 4, "ckl (other)": 4, "nokl (other)": 3}


def test_option_effects_as_a_pure_function():
    ref = {("a", "m"): {0: 0.5, 1: 0.6, 2: 0.7}, ("a", "x"): {0: 1.0}}
    other = {("a", "m"): {0: 0.51, 1: 0.62, 2: 0.705}}
    (d,) = option_effects(ref, other, {"m": 0.05}, [(0, 0), (1, 1), (2, 2)])  # x has no delta: not compared
    diffs = np.array([0.51 - 0.5, 0.62 - 0.6, 0.705 - 0.7])
    half = t.isf(ALPHA, 2) * diffs.std(ddof=1) / math.sqrt(3)  # the TOST interval of the one contrast
    assert d.outcome == "equivalent" and math.isclose(d.lo, diffs.mean() - half, rel_tol=1e-9)
    assert math.isclose(d.hi, diffs.mean() + half, rel_tol=1e-9)


# ------------------------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize("kind", ["study", "arms", "contrasts", "split"])
def test_two_different_studies_are_refused_by_name(tmp_path, kind):
    ref = write_study(tmp_path / "a", references=["x", "y"])
    kwargs = {"study": {"study": "t3"}, "arms": {},
              "contrasts": {"contrasts": CONTRASTS[:2]}, "split": {"references": ["x", "w"]}}[kind]
    values = {a: v for a, v in VALUES.items() if a != "nokl"} if kind == "arms" else VALUES
    other = write_study(tmp_path / "b", values, **{"references": ["x", "y"], **kwargs})
    words = {"study": "study 't3'", "arms": "different arms", "contrasts": "different contrasts",
             "split": "different test reports"}[kind]
    with pytest.raises(ValueError, match=words):
        check_option(load_experiment(ref), load_experiment(other))


@pytest.mark.parametrize("seeds, other_seeds, words", [
    ([0, 1], [2], "must be as many"),
    ([0, 1], [1, 2], "disjoint seeds"),
    ([0, 9], [2, 3], r"no complete run for seed\(s\) \[9\]"),
    ([0, 0], [2, 3], "a seed twice"),
])
def test_bad_seed_pairings_are_refused(tmp_path, seeds, other_seeds, words):
    ref = load_experiment(write_study(tmp_path / "a"))
    with pytest.raises(ValueError, match=words):
        check_option(ref, ref, seeds=seeds, other_seeds=other_seeds)


def test_without_contrasts_the_metrics_come_from_delta(tmp_path):
    a, b = write_study(tmp_path / "a", contrasts=[]), write_study(tmp_path / "b", contrasts=[])
    with pytest.raises(ValueError, match=r"declares no contrasts.*--delta"):
        check_option(load_experiment(a), load_experiment(b))
    check = check_option(load_experiment(a), load_experiment(b), deltas={"BLEU_4": 0.01})
    assert [d.contrast.metric for d in check.effects] == ["BLEU_4"] * 3
    assert check.verdicts == [] and check.shifts == []
    with pytest.raises(ValueError, match="delta of BLEU_4 must be a number > 0"):
        check_option(load_experiment(a), load_experiment(b), deltas={"BLEU_4": -1})


# --------------------------------------------------------------------------------------------- the command


def test_the_compare_command_prints_the_readings_and_writes_json(tmp_path, capsys):
    a = write_study(tmp_path / "a")
    b = write_study(tmp_path / "b", shifted({("ckl", 0): [-0.051, -0.049, -0.052, -0.048]}))
    out = tmp_path / "check.json"
    assert main(["compare", str(a), str(b), "--json", str(out), "--delta", "gold_f1=0.03"]) == 0
    text = capsys.readouterr().out
    assert "b against a, seeds [0, 1, 2, 3]" in text and "ckl          gold_f1      n=4" in text
    assert "+-0.03" in text and "the option changes the results: ckl gold_f1 worse" in text
    data = json.loads(out.read_text())
    assert data["summary"].startswith("the option changes the results: ckl gold_f1 worse")
    assert [s["metric"] for s in data["shifts"]] == ["gold_f1", "BLEU_4", "BLEU_4"]
    assert {e["metric"]: e["delta"] for e in data["effects"]} == {"gold_f1": 0.03, "BLEU_4": 0.005}


def test_the_compare_command_names_a_bad_argument(tmp_path, capsys):
    a = write_study(tmp_path / "a")
    assert main(["compare", str(a), str(a), "--delta", "gold_f1"]) == 2
    assert "--delta takes METRIC=VALUE" in capsys.readouterr().err
    assert main(["compare", str(a), str(tmp_path / "nowhere")]) == 2
    assert "no such experiment folder" in capsys.readouterr().err
    assert main(["compare", str(a), str(a), "--json", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert f"--json {tmp_path} is a folder" in captured.err and "against" not in captured.out


# --------------------------------------------------------------------------------------------- simulations

ARMS, METRICS = ("base", "ckl", "nokl", "novapr"), ("gold_f1", "BLEU_4")
DELTA = {"gold_f1": 0.02, "BLEU_4": 0.01}
SD_SEED, SD_TRAIN, SD_REPORT, N_REPORTS = 0.02, 0.004, 0.1, 300  # per metric the same, for simplicity
SIGMA = math.sqrt(2 * SD_TRAIN**2 + 2 * SD_REPORT**2 / N_REPORTS)  # sd of one paired difference: 0.0097


def simulate(rng, n_seeds: int, shift: dict | None = None):
    """Two studies' scores: per (arm, metric, seed) the seed's schedule (shared by both studies), per run its own
    training noise and the mean over a shared test split of per-report difficulty (identical in both) plus the
    run's report-level noise; `shift` ((arm, metric) -> value) is the option's true effect."""
    keys = [(arm, metric) for arm in ARMS for metric in METRICS]
    k = len(keys)
    schedule = rng.normal(0.0, SD_SEED, (k, n_seeds))
    split = rng.normal(0.0, SD_REPORT, (k, 1, N_REPORTS)).mean(axis=-1)  # the test split's difficulty, once
    runs = [0.7 + schedule + split + rng.normal(0.0, SD_TRAIN, (k, n_seeds))
            + rng.normal(0.0, SD_REPORT, (k, n_seeds, N_REPORTS)).mean(axis=-1) for _ in range(2)]
    runs[1] += np.array([(shift or {}).get(key, 0.0) for key in keys])[:, None]
    ref = {key: dict(enumerate(runs[0][i])) for i, key in enumerate(keys)}
    other = {key: dict(enumerate(runs[1][i])) for i, key in enumerate(keys)}
    return ref, other


def outcomes(rng, reps: int, n_seeds: int, shift=None) -> np.ndarray:
    pairs = [(s, s) for s in range(n_seeds)]
    rows = []
    for _ in range(reps):
        ref, other = simulate(rng, n_seeds, shift)
        rows.append([d.outcome for d in option_effects(ref, other, DELTA, pairs)])
    return np.array(rows)  # [reps, arms x metrics] in (arm, metric) order


def _se(p, reps):
    return math.sqrt(p * (1 - p) / reps)


def test_planted_null_moves_no_arm_more_often_than_alpha_over_the_family():
    reps = 1500
    out = outcomes(np.random.default_rng(11), reps, 5)
    any_moved = np.isin(out, ("better", "worse")).any(axis=1).mean()
    # Holm over 8 true nulls rejects anything exactly when the smallest p < alpha / 8: 1 - (1 - alpha/8)^8
    promised = 1 - (1 - ALPHA / 8) ** 8
    assert abs(any_moved - promised) <= 4 * _se(promised, reps)


def test_planted_zero_is_equivalent_when_the_band_is_wide_against_the_spread():
    # each metric is read against its own delta: gold F1's +-0.02 is 2 SIGMA, BLEU-4's +-0.01 is 1 SIGMA; at 8
    # seeds the first is shown most of the time and the second a third of the time (measured: 0.95 and 0.32)
    reps = 400
    out = outcomes(np.random.default_rng(12), reps, 8)
    gold, bleu = (out[:, 0::2] == "equivalent").mean(), (out[:, 1::2] == "equivalent").mean()
    assert gold > 0.88 and bleu < 0.5 and gold - bleu > 0.4
    assert np.isin(out, ("better", "worse")).any(axis=1).mean() <= ALPHA + 3 * _se(ALPHA, reps)


def test_planted_effect_at_the_margin_is_called_equivalent_at_most_alpha_and_a_large_one_is_found():
    reps = 1500
    at_margin = outcomes(np.random.default_rng(13), reps, 8, {("ckl", "gold_f1"): -DELTA["gold_f1"]})
    assert (at_margin[:, 2] == "equivalent").mean() <= ALPHA + 3 * _se(ALPHA, reps)
    large = outcomes(np.random.default_rng(14), 400, 8, {("ckl", "gold_f1"): -4 * SIGMA})
    assert (large[:, 2] == "worse").mean() > 0.8 and not (large[:, 2] == "better").any()
    # the arms without an effect stay within the family's guarantee
    others = np.delete(large, 2, axis=1)
    assert np.isin(others, ("better", "worse")).any(axis=1).mean() <= ALPHA + 3 * _se(ALPHA, 400)


DECLARED = [{"arm": arm, "baseline": "base", "metric": metric, "delta": DELTA[metric]}
            for arm in ARMS[1:] for metric in METRICS]


def shift_outcomes(rng, reps: int, n_seeds: int, shift=None) -> tuple[np.ndarray, np.ndarray]:
    pairs = [(s, s) for s in range(n_seeds)]
    arms, shifts = [], []
    for _ in range(reps):
        ref, other = simulate(rng, n_seeds, shift)
        arms.append([d.outcome for d in option_effects(ref, other, DELTA, pairs)])
        shifts.append([d.outcome for d in contrast_shifts(ref, other, DECLARED, pairs)])
    return np.array(arms), np.array(shifts)


def test_an_option_that_moves_every_arm_alike_shifts_no_contrast():
    # every arm's gold F1 down by 3 SIGMA: reading 2 calls the arms worse, reading 2b keeps its guarantee
    reps = 400
    shift = {(arm, "gold_f1"): -3 * SIGMA for arm in ARMS}
    arms, shifts = shift_outcomes(np.random.default_rng(15), reps, 8, shift)
    assert (arms[:, 0::2] == "worse").mean() > 0.6
    assert np.isin(shifts, ("better", "worse")).any(axis=1).mean() <= ALPHA + 3 * _se(ALPHA, reps)


def test_planted_contrast_shift_at_its_margin_is_called_equivalent_at_most_alpha():
    # only ckl moves, by the gold contrast's delta: its shift sits on the margin; a large move is found
    reps = 1000
    _, at_margin = shift_outcomes(np.random.default_rng(16), reps, 8, {("ckl", "gold_f1"): DELTA["gold_f1"]})
    assert (at_margin[:, 0] == "equivalent").mean() <= ALPHA + 3 * _se(ALPHA, reps)
    _, large = shift_outcomes(np.random.default_rng(17), 300, 8, {("ckl", "gold_f1"): 5 * SIGMA})
    assert (large[:, 0] == "better").mean() > 0.8 and not (large[:, 0] == "worse").any()


@pytest.mark.parametrize("words, contradicts", [(("better", "worse"), True), (("worse", "better"), True),
                                                 (("worse", "equivalent"), False), (("equivalent", "better"), False),
                                                 (("undecided", "worse"), False), (("worse", "worse"), False)])
def test_only_better_against_worse_contradicts(words, contradicts):
    # "worse" is reported before equivalence: -0.0076 [-0.0147, -0.0005] with +-0.02 is both a found difference
    # and inside the band, so another study's "equivalent" on it does not contradict it
    from harness.stats.decisions import Contrast, Decision
    from reports.option_check import VerdictPair

    c = Contrast("no_kl", "rer_vapr", "gold_f1", 0.02)

    def decision(word):
        return Decision(c, word, 20, -0.0076, -0.0147, -0.0005, 0.04, 0.04, 0.05, None, 1)

    pair = VerdictPair(c, decision(words[0]), decision(words[1]))
    assert pair.contradicts is contradicts and pair.same is (words[0] == words[1])


def test_compare_decides_by_the_studys_rule_and_names_its_guarantee(tmp_path):
    # issue 48: a study folder under the default rule (anytime) is compared by the confidence sequence, one family
    # over the arm effects and the contrast shifts, and the text says the guarantee holds however often the
    # comparison is repeated; 4 seeds are too few for that rule to decide the 0.05 move that fixed n calls worse
    other = shifted({("ckl", 0): [-0.051, -0.049, -0.052, -0.048]})
    check = check_option(load_experiment(write_study(tmp_path / "a", decide_rule="anytime")),
                         load_experiment(write_study(tmp_path / "b", other, decide_rule="anytime")))
    assert check.rule == "anytime" and all(d.rule == "anytime" for d in (*check.effects, *check.shifts))
    got = {(d.contrast.arm, d.contrast.metric): d for d in check.effects}
    assert got["ckl (other)", "gold_f1"].outcome == "undecided" and got["ckl (other)", "gold_f1"].seeds_needed >= 7
    text = "\n".join(summary_lines(check))
    assert "anytime-valid: holds however seeds were added and however often the comparison is repeated" in text
    assert "Assumption of readings 2 and 2b: roughly normal per-seed differences" in text
    assert summary(check).endswith("(one family: 6 arm effects and 3 contrast shifts, alpha 0.05, anytime)")
