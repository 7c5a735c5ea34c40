"""Optuna searches (harness/search/run.py, harness/search_*.py): search files, trials as arms, objectives, resuming.

Running uses fake stage functions: the fake RL stage writes validation rows whose scores are a known function
of the trial's values, so the objective of every trial can be checked exactly. One test runs a real 2-trial
search end to end on the tiny sizes of tests/harness/stages/test_pipeline.py.
"""

from __future__ import annotations

import json
import math
import os
import socket
from pathlib import Path

import optuna
import pytest

from harness.cli import main
from harness.config import ConfigError
from harness.experiments import resolve_config
from harness.runs.records import atomic_write_json, read_json
from harness.search.file import experiment_study, load_search, trial_arm
from harness.search.objective import objective_from_evals
from harness.search.optuna_study import open_study
from harness.search.run import run_search
from harness.search.space import suggest
from harness.search.storage import DRIVER_ATTR
from tests.harness.test_experiments import FAKES, TINY_PRESET, _record
from tests.tiny_sizes import TINY

ROOT = Path(__file__).resolve().parents[3]
SEARCHES = sorted((ROOT / "experiments" / "searches").glob("*.yaml"))
PRESETS = sorted((ROOT / "experiments" / "presets").glob("*.yaml"))


def fake_rl(cfg, progress=False, on_validation=()):
    """Validation scores peaked at beta_base = 0.1: the final one is 1 - (beta_base - 0.1)^2 - beta_min."""
    _record("rl", cfg)
    out = Path(cfg.out_dir)
    (out / "model").mkdir(parents=True, exist_ok=True)
    final = 1.0 - (cfg.rl.beta_base - 0.1) ** 2 - cfg.rl.beta_min + 0.01 * cfg.seed
    if os.environ.get("REGBENCH_TEST_NAN_BETA") and cfg.rl.beta_base > float(os.environ["REGBENCH_TEST_NAN_BETA"]):
        final = float("nan")  # a run whose validation score diverged
    rows = [{"step": 0, "split": "val", "val_score": 5.0},  # the starting policy: never part of the objective
            {"step": 5, "split": "val", "val_score": final + 0.5},
            {"step": 10, "split": "val", "val_score": final}]
    (out / "evals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from harness.grpo.validation import ValidationEvent

    for row in rows:  # as the trainer calls them after each validation (a callback may stop the run)
        for callback in on_validation:
            callback(ValidationEvent(row["step"], row["val_score"], row))
    if os.environ.get("REGBENCH_TEST_FAIL_BETA") and cfg.rl.beta_base > float(os.environ["REGBENCH_TEST_FAIL_BETA"]):
        raise RuntimeError("fake RL diverged")
    # as an RL stage with rl.select=final records it: the saved policy is the last one
    atomic_write_json(out / "metrics.json", {"stage": "rl", "select": "final", "selected_step": 10,
                                             "selected_score": final})
    return out / "model"


SEARCH_FAKES = {**FAKES, "rl": "tests.harness.search.test_run:fake_rl"}


def expected_objective(values: dict, seeds=(0,)) -> float:
    finals = [1.0 - (values["rl.beta_base"] - 0.1) ** 2 - values["rl.beta_min"] + 0.01 * s for s in seeds]
    return sum(finals) / len(finals)


def write_search(tmp_path: Path, body: str | None = None, name: str = "toy", seeds: str = "[0]",
                 n_trials: int = 4) -> Path:
    path = tmp_path / f"{name}.yaml"
    common = "common: {" + ", ".join(t.replace("=", ": ") for t in TINY) + "}\n"
    path.write_text(body if body is not None else (
        f"base: {TINY_PRESET}\nsearch: {name}\ntitle: toy search\nseeds: {seeds}\nn_trials: {n_trials}\n"
        f"objective: {{metric: val_final, direction: maximize}}\nsampler: {{name: random, seed: 3}}\n"
        f"fixed: {{rl: [rl.regularizer=rer, rl.reference=vapr]}}\n{common}"
        "space:\n"
        "  rl.beta_base: {type: float, low: 0.02, high: 0.3, log: true}\n"
        "  rl.beta_min: {type: float, low: 0.0, high: rl.beta_base}\n"
        "  rl.beta_max: {type: float, low: rl.beta_base, high: 0.5}\n"))
    return path


# ---------------------------------------------------------------------------------------------------------
# The search files


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
@pytest.mark.parametrize("search_file", SEARCHES, ids=lambda p: p.stem)
def test_every_search_file_loads_with_every_preset(search_file, preset):
    search = load_search(search_file, preset=preset)  # resolves one trial's configs: every key is a real field
    assert search.params and search.n_trials >= 1 and search.objective.metric == "val_selected"
    assert not (search_file.parent / "_probe_never_written").exists()


def test_ordered_bounds_hold_in_every_sampled_trial(tmp_path):
    search = load_search(write_search(tmp_path))
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=3))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for _ in range(25):
        trial = study.ask()
        v = suggest(trial, search.params)
        assert 0.0 <= v["rl.beta_min"] <= v["rl.beta_base"] <= v["rl.beta_max"] <= 0.5
        assert 0.02 <= v["rl.beta_base"] <= 0.3
        # ... and the arm's RL config carries exactly those values (validated by load_config).
        cfg = resolve_config(experiment_study(search, [trial_arm(search, trial.number, v)]),
                             trial_arm(search, trial.number, v), "rl", 0)
        assert (cfg.rl.beta_min, cfg.rl.beta_base, cfg.rl.beta_max) == (v["rl.beta_min"], v["rl.beta_base"],
                                                                        v["rl.beta_max"])
        assert cfg.rl.regularizer == "rer" and cfg.rl.reference == "vapr"
        study.tell(trial, -v["rl.beta_base"])


def test_int_and_categorical_parameters(tmp_path):
    body = write_search(tmp_path).read_text().split("space:")[0] + (
        "space:\n  rl.reset_every_epochs: {type: int, low: 1, high: 6}\n"
        "  rl.old_sync_every: {type: categorical, choices: [1, 4, 16]}\n"
        "  rl.kl_estimator: {choices: [k1, k3]}\n")
    search = load_search(write_search(tmp_path, body))
    v = suggest(optuna.trial.FixedTrial({"rl.reset_every_epochs": 2, "rl.old_sync_every": 16,
                                         "rl.kl_estimator": "k1"}), search.params)
    arm = trial_arm(search, 7, v)
    assert arm.name == "t0007" and arm.factors == v
    cfg = resolve_config(experiment_study(search, [arm]), arm, "rl", 0)
    assert (cfg.rl.reset_every_epochs, cfg.rl.old_sync_every, cfg.rl.kl_estimator) == (2, 16, "k1")


BAD = [
    ("  rl.beta_base: {type: float, low: 0.3, high: 0.02}\n", "low 0.3 is above high 0.02"),
    ("  rl.beta_min: {type: float, low: 0.0, high: rl.beta_base}\n", "names 'rl.beta_base', which is not a param"),
    ("  rl.beta_base: {type: float, low: 0.0, high: 0.3, log: true}\n", "log-scale parameter needs low > 0"),
    ("  rl.beta_base: {type: bool}\n", "type must be float, int or categorical"),
    ("  rl.beta_base: {type: float, low: 0.0, high: 1.0, wide: true}\n", "unknown field 'wide'"),
    ("  rl.no_such_knob: {type: float, low: 0.0, high: 1.0}\n", "no_such_knob"),
    ("  rl.old_sync_every: {type: categorical, choices: []}\n", "non-empty 'choices'"),
    ("  rl.beta_base: {type: float, low: 0.0, high: 1.0, stage: pretrain}\n", "stage must be one of"),
]


@pytest.mark.parametrize(("space", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_space_errors_name_the_file_and_field(tmp_path, space, message):
    body = write_search(tmp_path).read_text().split("space:")[0] + "space:\n" + space
    path = write_search(tmp_path, body, name="bad")
    with pytest.raises(ConfigError, match=message) as e:
        load_search(path)
    assert str(path) in str(e.value) or "bad.yaml" in str(e.value)


@pytest.mark.parametrize(("change", "message"), [
    ("objective: {metric: val_final, direction: maximize}", "objective.metric must be one of"),
    ("n_trials: 4", "n_trials' must be a positive integer"),
    ("sampler: {name: random, seed: 3}", "'sampler' must be a mapping with name tpe or random"),
])
def test_bad_top_level_fields(tmp_path, change, message):
    text = write_search(tmp_path).read_text()
    replacement = {"objective": "objective: {metric: val_best_ever}", "n_trials": "n_trials: 0",
                   "sampler": "sampler: {name: grid}"}[change.split(":")[0]]
    with pytest.raises(ConfigError, match=message):
        load_search(write_search(tmp_path, text.replace(change, replacement), name="bad"))


def test_validation_objective_needs_an_rl_stage(tmp_path):
    text = write_search(tmp_path).read_text().replace("space:", "pipeline: [warmup, classifier, sft]\nspace:")
    with pytest.raises(ConfigError, match="has no rl stage"):
        load_search(write_search(tmp_path, text, name="bad"))


def test_val_selected_reads_the_saved_policys_score(tmp_path):
    from harness.search.objective import run_objective

    (tmp_path / "rl").mkdir()
    atomic_write_json(tmp_path / "rl" / "metrics.json", {"selected_score": 0.42, "selected_step": 20})
    assert run_objective(tmp_path, {"stages": {"rl": {"dir": "rl"}}}, "val_selected") == 0.42
    atomic_write_json(tmp_path / "rl" / "metrics.json", {"stage": "rl"})
    with pytest.raises(ValueError, match="no numeric 'selected_score'"):
        run_objective(tmp_path, {"stages": {"rl": {"dir": "rl"}}}, "val_selected")


def test_objectives_from_validation_rows():
    rows = [{"step": 0, "split": "val", "val_score": 9.0}, {"step": 5, "split": "val", "val_score": 0.2},
            {"step": 5, "split": "train"}, {"step": 10, "split": "val", "val_score": 0.6},
            {"step": 15, "split": "val", "val_score": 0.4}]
    assert objective_from_evals(rows, "val_final") == 0.4
    assert objective_from_evals(rows, "val_best") == 0.6
    assert objective_from_evals(rows, "val_mean") == pytest.approx(0.4)
    with pytest.raises(ValueError, match="no validation score"):
        objective_from_evals(rows[:1], "val_final")


# ---------------------------------------------------------------------------------------------------------
# Running, with fake stages


def test_search_runs_trials_shares_stages_and_resumes(tmp_path, calls):
    out = tmp_path / "out"
    res = run_search(write_search(tmp_path, seeds="[0, 1]", n_trials=3), out, functions=SEARCH_FAKES,
                     log=lambda s: None)
    summary = read_json(out / "search.json")
    assert summary["format"] == "regbench.search/1" and len(summary["trials"]) == 3
    for t in summary["trials"]:
        assert t["state"] == "complete"
        assert t["objective"] == pytest.approx(expected_objective(t["values"], seeds=(0, 1)), abs=1e-12)
        assert set(t["per_seed"]) == {"0", "1"}
    best = max(summary["trials"], key=lambda t: t["objective"])
    assert res.best["number"] == best["number"] and res.best["arm"] == f"t{best['number']:04d}"
    rows = calls()
    # Warm-up, classifier and SFT do not depend on the searched values: once per seed for all trials.
    assert [sum(r["stage"] == s for r in rows) for s in ("warmup", "classifier", "sft", "rl", "eval")] == \
        [2, 2, 2, 6, 6]
    # The folder is an ordinary experiment folder whose arms are the trials.
    index = read_json(out / "index.json")
    assert [a["name"] for a in index["arms"]] == ["t0000", "t0001", "t0002"]
    assert index["summary"]["complete"] == 6
    # Running again with a larger target continues the same study: only the new trial trains.
    run_search(write_search(tmp_path, seeds="[0, 1]", n_trials=3), out, n_trials=4, functions=SEARCH_FAKES,
               log=lambda s: None)
    rows = calls()
    assert sum(r["stage"] == "rl" for r in rows) == 8 and sum(r["stage"] == "sft" for r in rows) == 2
    assert len(read_json(out / "search.json")["trials"]) == 4
    # Reaching the target again runs nothing.
    run_search(write_search(tmp_path, seeds="[0, 1]", n_trials=3), out, n_trials=4, functions=SEARCH_FAKES,
               log=lambda s: None)
    assert len(calls()) == len(rows)


def test_the_same_seed_proposes_the_same_trials(tmp_path, calls):
    values = []
    for name in ("a", "b"):
        run_search(write_search(tmp_path, n_trials=3), tmp_path / name, functions=SEARCH_FAKES, log=lambda s: None)
        values.append([t["values"] for t in read_json(tmp_path / name / "search.json")["trials"]])
    assert values[0] == values[1]


def test_failed_trials_are_recorded_and_counted(tmp_path, calls, monkeypatch):
    monkeypatch.setenv("REGBENCH_TEST_FAIL_BETA", "0.08")
    out = tmp_path / "out"
    run_search(write_search(tmp_path, n_trials=5), out, functions=SEARCH_FAKES, log=lambda s: None)
    trials = read_json(out / "search.json")["trials"]
    assert len(trials) == 5
    for t in trials:
        failed = t["values"]["rl.beta_base"] > 0.08
        assert t["state"] == ("fail" if failed else "complete")
        if failed:
            assert "fake RL diverged" in t["error"] and t["objective"] is None
    assert {t["state"] for t in trials} == {"fail", "complete"}  # the seed draws both kinds


def test_a_nan_objective_fails_its_trial_and_the_search_goes_on(tmp_path, calls, monkeypatch):
    monkeypatch.setenv("REGBENCH_TEST_NAN_BETA", "0.08")
    out = tmp_path / "out"
    run_search(write_search(tmp_path), out, n_trials=5, functions=SEARCH_FAKES, log=lambda s: None)
    trials = read_json(out / "search.json")["trials"]
    nan = [t for t in trials if t["values"]["rl.beta_base"] > 0.08]
    assert nan and all(t["state"] == "fail" and "is not a number" in t["error"] for t in nan)
    assert all(t["state"] == "complete" for t in trials if t not in nan)
    with pytest.raises(ConfigError, match="--n-trials must be >= 1"):
        run_search(write_search(tmp_path), out, n_trials=0, functions=SEARCH_FAKES)


def test_a_broken_setup_stops_the_search_after_three_failures_in_a_row(tmp_path, calls, monkeypatch):
    monkeypatch.setenv("REGBENCH_TEST_FAIL_BETA", "0.0")  # every trial fails
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="3 trials in a row failed, the last with: stage rl: RuntimeError: fake"):
        run_search(write_search(tmp_path, n_trials=10), out, functions=SEARCH_FAKES, log=lambda s: None)
    trials = read_json(out / "search.json")["trials"]
    assert [t["state"] for t in trials] == ["fail"] * 3


def test_median_pruning_stops_weak_trials_before_their_evaluation(tmp_path, calls):
    text = write_search(tmp_path).read_text().replace(
        "sampler: {name: random, seed: 3}",
        "sampler: {name: random, seed: 3}\npruner: {name: median, n_startup_trials: 2, n_warmup_steps: 1}")
    out = tmp_path / "out"
    run_search(write_search(tmp_path, text, name="p"), out, n_trials=8, functions=SEARCH_FAKES, log=lambda s: None)
    trials = read_json(out / "search.json")["trials"]
    pruned = [t for t in trials if t["state"] == "pruned"]
    complete = [t for t in trials if t["state"] == "complete"]
    assert pruned and complete and len(pruned) + len(complete) == 8
    assert all("below the median" in t["pruned"] and t["objective"] is None for t in pruned), pruned
    rows = calls()
    assert sum(r["stage"] == "rl" for r in rows) == 8 and sum(r["stage"] == "eval" for r in rows) == len(complete)
    # Pruning is decided at the first validation after step 0 (score final + 0.5): a pruned trial's was below
    # the median of the earlier trials' at that step.
    for t in pruned:
        earlier = [expected_objective(u["values"]) + 0.5 for u in trials if u["number"] < t["number"]]
        assert expected_objective(t["values"]) + 0.5 < sorted(earlier)[len(earlier) // 2] + 1e-9


@pytest.mark.parametrize(("change", "message"), [
    ("seeds: [0]", "pruning needs one seed per trial"),
    ("metric: val_final", "needs a maximized val_\\* objective"),
])
def test_pruning_needs_one_seed_and_a_validation_objective(tmp_path, change, message):
    text = write_search(tmp_path).read_text().replace(
        "sampler: {name: random, seed: 3}", "sampler: {name: random, seed: 3}\npruner: {name: median}")
    text = text.replace(change, {"seeds: [0]": "seeds: [0, 1]", "metric: val_final": "metric: test:BLEU_4"}[change])
    with pytest.raises(ConfigError, match=message):
        load_search(write_search(tmp_path, text, name="bad"))


def test_a_trial_left_running_is_requeued_with_its_values(tmp_path, calls):
    path = write_search(tmp_path, n_trials=2)
    search = load_search(path)
    out = tmp_path / "out"
    study, storage = open_study(out, search)
    ghost = study.ask()  # a driver that was killed after asking: the trial stays RUNNING in the storage
    values = suggest(ghost, search.params)
    tid = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name("toy"), ghost.number)
    storage.set_trial_system_attr(tid, DRIVER_ATTR, f"{socket.gethostname()} 999999999 1")  # a gone process
    run_search(search, out, functions=SEARCH_FAKES, log=lambda s: None)
    trials = read_json(out / "search.json")["trials"]
    requeued = [t for t in trials if t["requeued"]]
    assert len(requeued) == 1 and requeued[0]["state"] == "fail"
    finished = [t for t in trials if not t["requeued"]]
    assert len(finished) == 2 and all(t["state"] == "complete" for t in finished)
    assert finished[0]["values"] == pytest.approx(values)  # run again first, with the same values


def test_test_split_objective(tmp_path, calls):
    text = write_search(tmp_path).read_text().replace("metric: val_final", "metric: test:BLEU_4")
    run_search(write_search(tmp_path, text, name="t"), tmp_path / "out", n_trials=2, functions=SEARCH_FAKES,
               log=lambda s: None)
    trials = read_json(tmp_path / "out" / "search.json")["trials"]
    assert [t["objective"] for t in trials] == [0.25, 0.25]  # fake_eval's BLEU_4


def test_search_cli_run_and_report(tmp_path, calls, monkeypatch, capsys):
    from harness import experiments

    for kind, fn in SEARCH_FAKES.items():
        monkeypatch.setitem(experiments.DEFAULT_FUNCTIONS, kind, fn)
    out = tmp_path / "out"
    assert main(["search", "run", str(write_search(tmp_path)), "--out", str(out), "--n-trials", "4"]) == 0
    text = capsys.readouterr().out
    assert "best: trial" in text and "search report:" in text
    report = out / "search_report"
    for name in ("trials.csv", "trials.md", "best.json", "README.md", "history.png", "slice.png",
                 "importance.png", "contour.png"):
        assert (report / name).is_file() and (report / name).stat().st_size > 0, name
    best = read_json(report / "best.json")["best"]
    lines = (report / "trials.csv").read_text().splitlines()
    assert len(lines) == 5 and lines[1].split(",")[0] == str(best["number"])  # best first
    assert math.isclose(float(lines[1].split(",")[3]), best["objective"])
    assert main(["search", "report", str(tmp_path / "nowhere")]) == 2
    assert "not a search folder" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------
# A real search, end to end


@pytest.mark.slow
def test_real_two_trial_search_on_the_tiny_model(tmp_path):
    text = write_search(tmp_path, n_trials=2).read_text().replace(
        "common: {", "stages: {rl: {train: {max_steps: 2}, rl: {prompts_per_step: 2, group_size: 2, "
        "max_new_tokens: 8, val_max_samples: 4}}}\ncommon: {")
    out = tmp_path / "out"
    res = run_search(write_search(tmp_path, text, name="real"), out, log=lambda s: None)
    trials = read_json(out / "search.json")["trials"]
    assert [t["state"] for t in trials] == ["complete", "complete"]
    for t in trials:
        rl_dir = out / read_json(out / "index.json")["runs"][t["number"]]["stages"]["rl"]["dir"]
        vals = [json.loads(line) for line in (rl_dir / "evals.jsonl").read_text().splitlines()]
        assert t["objective"] == pytest.approx([r for r in vals if r["step"] > 0][-1]["val_score"])
        manifest = read_json(rl_dir / "manifest.json")
        assert manifest["config"]["rl"]["beta_base"] == pytest.approx(t["values"]["rl.beta_base"])
    assert res.best is not None


def test_parallel_trials_run_side_by_side_in_worker_processes(tmp_path, calls):
    out = tmp_path / "out"
    res = run_search(write_search(tmp_path), out, n_trials=4, parallel_trials=2, functions=SEARCH_FAKES,
                     log=lambda s: None)
    trials = read_json(out / "search.json")["trials"]
    assert [t["state"] for t in trials] == ["complete"] * 4
    for t in trials:
        assert t["objective"] == pytest.approx(expected_objective(t["values"]), abs=1e-12)
    rows = calls()
    assert sum(r["stage"] == "sft" for r in rows) == 1 and sum(r["stage"] == "rl" for r in rows) == 4
    assert res.best is not None
    with pytest.raises(ConfigError, match="--parallel-trials 1"):
        run_search(write_search(tmp_path), out, parallel_trials=2, launcher="torchrun", functions=SEARCH_FAKES)


def test_confirm_reruns_the_best_trials_and_the_preset_over_seeds(tmp_path, calls, monkeypatch, capsys):
    from harness import experiments

    out = tmp_path / "out"
    run_search(write_search(tmp_path), out, n_trials=4, functions=SEARCH_FAKES, log=lambda s: None)
    trials = read_json(out / "search.json")["trials"]
    best_two = [t["arm"] for t in sorted(trials, key=lambda t: -t["objective"])[:2]]
    before = len(calls())
    for kind, fn in SEARCH_FAKES.items():
        monkeypatch.setitem(experiments.DEFAULT_FUNCTIONS, kind, fn)
    assert main(["search", "confirm", str(out), "--top", "2", "--seeds", "0,1", "--workers", "1"]) == 0
    assert "report:" in capsys.readouterr().out
    index = read_json(out / "confirm" / "index.json")
    assert [a["name"] for a in index["arms"]] == ["preset", *best_two] and index["baseline_arm"] == "preset"
    assert index["summary"]["complete"] == 6
    rows = calls()[before:]
    # Seed 0's warm-up, SFT and the trials' RL runs come from the search; seed 1 and the preset arm are new.
    assert sum(r["stage"] == "sft" for r in rows) == 1 and sum(r["stage"] == "rl" for r in rows) == 4
    from harness.search.run import confirmation_study

    with pytest.raises(ConfigError, match="--top must be >= 1"):
        confirmation_study(out, top=0)
    study = confirmation_study(out, top=2)
    rl = resolve_config(study, study.arm("preset"), "rl", 0).rl  # the preset's (the paper's) bounds
    assert (rl.beta_min, rl.beta_base, rl.beta_max, rl.regularizer) == (0.05, 0.10, 0.12, "rer")
    assert (out / "confirm" / "report" / "index.html").is_file()


def test_a_pruned_stage_is_recorded_structurally_not_as_an_error(tmp_path, calls):
    """The runner records a RunPruned as `pruned` (stage and run), skips the stages after it, and the search's
    verdict comes from that status: the reason text carries no marker to parse."""
    from harness.errors import RunPruned
    from harness.experiments import load_study, run_experiment
    from harness.search.run import _tell
    from tests.harness.test_experiments import write_study

    def pruned_rl(cfg, progress=False, on_validation=()):
        _record("rl", cfg)
        raise RunPruned("weak at step 3 (score 0.1234)", 3, 0.1234)

    study = load_study(write_study(tmp_path, "  - name: a\n    pipeline: [warmup, rl]\n", seeds="[0]"))
    res = run_experiment(study, tmp_path / "out", workers=1, functions={**FAKES, "rl": pruned_rl},
                         log=lambda s: None)
    (run,) = res.index["runs"]
    assert run["status"] == "pruned" and run["failed_stage"] == "rl" and res.index["summary"]["pruned"] == 1
    assert run["stages"]["rl"]["status"] == "pruned" and "error" not in run["stages"]["rl"]
    assert run["stages"]["rl"]["pruned"] == "weak at step 3 (score 0.1234)"
    assert not res.failed and [r["stage"] for r in calls()][-2:] == ["warmup", "rl"]  # no eval after a pruned RL
    assert not (tmp_path / "out" / "a" / "seed0" / "error.txt").exists()

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ostudy = optuna.create_study()
    trial = ostudy.ask()
    assert _tell(None, ostudy, trial, [run], tmp_path / "out") == "pruned weak at step 3 (score 0.1234)"
    assert ostudy.trials[0].state == optuna.trial.TrialState.PRUNED
    assert ostudy.trials[0].user_attrs["pruned"] == "weak at step 3 (score 0.1234)"


def _stale(index: dict, arm: str) -> dict:
    """index.json as a driver that planned before `arm`'s runs finished writes it: those runs pending."""
    for r in index["runs"]:
        if r["arm"] == arm:
            r.update(status="pending", metrics=None)
            for s in r["stages"].values():
                s["status"] = "pending"
    index["summary"] = {"complete": sum(r["status"] == "complete" for r in index["runs"]),
                        "pending": sum(r["status"] == "pending" for r in index["runs"])}
    return index


def test_the_index_is_rebuilt_from_the_storage_and_never_stale(tmp_path, calls):
    """Two drivers finishing: the last to write index.json listed a trial the other completed as pending, and a
    further `search run` did not repair it (issue 26). The index is rebuilt from the trials in the storage and
    the stage folders at the end of every search run."""
    out = tmp_path / "out"
    file = write_search(tmp_path, n_trials=2)
    run_search(file, out, functions=SEARCH_FAKES, log=lambda s: None)
    assert read_json(out / "index.json")["summary"]["complete"] == 2
    atomic_write_json(out / "index.json", _stale(read_json(out / "index.json"), "t0001"))
    n_calls = len(calls())
    run_search(file, out, functions=SEARCH_FAKES, log=lambda s: None)  # target reached: runs nothing ...
    assert len(calls()) == n_calls
    index = read_json(out / "index.json")  # ... and repairs the index
    assert [(r["arm"], r["status"]) for r in index["runs"]] == [("t0000", "complete"), ("t0001", "complete")]
    assert index["summary"]["complete"] == 2 and not index["summary"].get("pending")
    assert all(r["metrics"] for r in index["runs"])


def test_a_rebuilt_index_keeps_the_failures_it_recorded(tmp_path, calls, monkeypatch):
    monkeypatch.setenv("REGBENCH_TEST_FAIL_BETA", "0.08")
    out = tmp_path / "out"
    run_search(write_search(tmp_path, n_trials=5), out, functions=SEARCH_FAKES, log=lambda s: None)
    trials = {f"t{t['number']:04d}": t for t in read_json(out / "search.json")["trials"]}
    for r in read_json(out / "index.json")["runs"]:
        if trials[r["arm"]]["state"] == "fail":
            assert r["status"] == "failed" and "fake RL diverged" in r["error"]
        else:
            assert r["status"] == "complete"
