"""Stop signals to the commands that are not training loops (issue 26): `data synth`, `eval`, `search run`, and
to the commands and runners that chain several runs (`train X` after its stage 0, the experiment runner).

Each is signalled in-process (SIGTERM to this process at a chosen point): it stops at a safe point with exit
status 75 and its out folder resumable or untouched, and the rerun ends as an uninterrupted run does. A signal
that comes during the last step of a run lets that run complete (it is recorded as complete, nothing is lost),
and the command or runner starts nothing after it: exit 75 while work is left, 0 when none is.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import pytest

from harness.cli import main
from harness.runs import preemption
from harness.runs.records import read_json, read_jsonl
from tests.tiny_sizes import TINY


@pytest.fixture(autouse=True)
def _no_stop_left():
    preemption.clear()
    yield
    preemption.clear()


@contextlib.contextmanager
def signals_caught():
    """Code that installs no handler of its own (as before this change) would let the test's SIGTERM end pytest:
    this records the signal instead, so that such code fails the test's assertions rather than the session."""
    caught: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, _frame: caught.append(signum))
    try:
        yield caught
    finally:
        signal.signal(signal.SIGTERM, before)


def signal_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def signal_on_call(monkeypatch, module, name: str, nth: int) -> list[int]:
    """SIGTERM to this process during the `nth` call of `module.name` (which then runs on as before); returns the
    call counter ([calls so far])."""
    real, calls = getattr(module, name), [0]

    def then_signal(*args, **kwargs):
        calls[0] += 1
        if calls[0] == nth:
            signal_self()
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, then_signal)
    return calls


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------------------
# data synth


def test_data_synth_stopped_by_a_signal_keeps_its_images_and_the_rerun_equals_an_uninterrupted_one(
        tmp_path, monkeypatch, capsys):
    from harness.data.phantom import writer

    argv = ["data", "synth", "--n", "12", "--seed", "3", "--image-size", "32", "--out"]
    assert main([*argv, str(tmp_path / "ref")]) == 0
    drawn = signal_on_call(monkeypatch, writer, "draw_image", 5)  # SIGTERM while the 5th image is drawn
    out = tmp_path / "out"
    capsys.readouterr()
    with signals_caught():
        assert main([*argv, str(out)]) == preemption.REQUEUE_EXIT_CODE
    assert "preempted by SIGTERM, 5 of 12 images kept for the rerun" in capsys.readouterr().err
    assert not (out / "annotation.json").exists() and len(list(out.glob("images/*.png"))) == 5
    # The rerun (a new process in real use) keeps the 5 whole images (it draws the other 7) and ends with the
    # uninterrupted set, byte for byte.
    preemption.clear()
    assert main([*argv, str(out)]) == 0
    assert drawn[0] == 12
    assert _files(out) == _files(tmp_path / "ref")


def test_a_partial_synthesis_with_another_config_is_drawn_again(tmp_path):
    from harness.data.phantom import PhantomConfig, synthesize
    from harness.data.phantom.writer import PARTIAL

    out, ref = tmp_path / "out", tmp_path / "ref"
    synthesize(ref, PhantomConfig(n=6, seed=1, image_size=32))
    synthesize(out, PhantomConfig(n=6, seed=2, image_size=32))  # another seed's images under the same names ...
    (out / "annotation.json").unlink()
    (out / PARTIAL).write_text(json.dumps({"seed": 2}))        # ... left by an interrupted try of another config
    synthesize(out, PhantomConfig(n=6, seed=1, image_size=32))
    assert _files(out) == _files(ref)


# ---------------------------------------------------------------------------------------------------------
# eval


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    """A stage-0 tiny base (a model `eval --model` takes) and the arguments that go with it."""
    work = tmp_path_factory.mktemp("eval_preempt")
    common = [*TINY, f"data.synth_dir={work / 'data'}", f"cache_dir={work / 'cache'}", "generation.batch_size=2"]
    assert main(["train", "pretrain", *common, f"out_dir={work / 'pretrain'}", "--no-progress"]) == 0
    (base,) = (work / "cache" / "tiny-base").iterdir()
    return base, common


def test_eval_stopped_between_decode_batches_writes_nothing_and_the_rerun_equals_an_uninterrupted_one(
        tiny_base, tmp_path, monkeypatch, capsys):
    from harness.sampling import decoding

    base, common = tiny_base
    argv = ["eval", *common, "--model", str(base), "--split", "test", "--no-progress", "--out"]
    capsys.readouterr()
    assert main([*argv, str(tmp_path / "ref")]) == 0
    want = json.loads(capsys.readouterr().out)
    batches = signal_on_call(monkeypatch, decoding, "decode_tokens", 1)  # SIGTERM during the first of 3 decode batches
    out = tmp_path / "out"
    with signals_caught():
        assert main([*argv, str(out)]) == preemption.REQUEUE_EXIT_CODE
    err = capsys.readouterr().err
    assert "preempted by SIGTERM, 2 of 6 reports decoded, nothing written" in err, err
    assert batches[0] == 1 and not out.exists()  # the --out folder is left as it was (absent)
    preemption.clear()  # (a new process in real use)
    assert main([*argv, str(out)]) == 0
    assert json.loads(capsys.readouterr().out) == want
    (pred,) = out.glob("predictions_*_test.jsonl")
    assert pred.read_bytes() == (tmp_path / "ref" / pred.name).read_bytes()
    strip = lambda rows: [{k: v for k, v in r.items() if "time" not in k} for r in rows]  # noqa: E731
    assert strip(read_jsonl(out / "evals.jsonl")) == strip(read_jsonl(tmp_path / "ref" / "evals.jsonl"))


# ---------------------------------------------------------------------------------------------------------
# search run


def rl_signalled_in_the_second_trial(cfg, progress=False, on_validation=()):
    """The search tests' fake RL stage; the second trial's RL run gets SIGTERM on its first try and stops with a
    checkpoint (a marker), as a real stage does; its rerun then completes as the fake does."""
    from tests.harness.search.test_run import fake_rl
    from tests.harness.test_experiments import _record

    calls = Path(os.environ["REGBENCH_TEST_CALLS"])
    earlier = [json.loads(x) for x in calls.read_text().splitlines()] if calls.is_file() else []
    out = Path(cfg.out_dir)
    if sum(r["stage"] == "rl" for r in earlier) == 1 and not (out / "checkpoint").exists():
        _record("rl", cfg)
        signal_self()
        with preemption.handling(cfg.train.preempt_signals):
            if preemption.stop_agreed():
                out.mkdir(parents=True, exist_ok=True)
                (out / "checkpoint").write_text("5")
                raise preemption.stop(out, "rl", 5)
    return fake_rl(cfg, progress, on_validation)


def _kept_trials(summary: dict) -> list[tuple[dict, float | None, str]]:
    return [(t["values"], t["objective"], t["state"]) for t in summary["trials"] if not t["requeued"]]


def test_search_stopped_by_a_signal_requeues_its_trial_and_the_rerun_equals_an_uninterrupted_one(tmp_path, calls):
    from harness.search.run import run_search
    from tests.harness.search.test_run import SEARCH_FAKES, write_search

    path = write_search(tmp_path, n_trials=3)
    ref = run_search(path, tmp_path / "ref", functions=SEARCH_FAKES, log=lambda s: None)
    calls()
    fns = {**SEARCH_FAKES, "rl": "tests.harness.runs.test_preempt_commands:rl_signalled_in_the_second_trial"}
    out = tmp_path / "out"
    (out.parent / "calls.jsonl").unlink(missing_ok=True)
    logs: list[str] = []
    with signals_caught(), pytest.raises(preemption.Preempted, match=r"search toy .*preempted by SIGTERM, 1 of 3"):
        run_search(path, out, functions=fns, log=logs.append)
    assert any("trial 1 preempted: enqueued again with the same values" in line for line in logs), logs
    trials = read_json(out / "search.json")["trials"]
    assert [(t["number"], t["state"], t["requeued"]) for t in trials] == [(0, "complete", False), (1, "fail", True)]
    assert trials[1]["error"] == "preempted by SIGTERM: enqueued again"
    assert preemption.count(next(p.parent for p in out.glob("stages/*/checkpoint"))) == 1
    preemption.clear()  # (a new process in real use)

    res = run_search(path, out, functions=fns, log=lambda s: None)
    summary = read_json(out / "search.json")
    assert _kept_trials(summary) == _kept_trials(ref.summary)
    assert {k: res.best[k] for k in ("values", "objective")} == {k: ref.best[k] for k in ("values", "objective")}
    assert summary["trials"][2]["retry_of"] == 1  # the interrupted trial, run again first with its values
    rl_runs = [r for r in calls() if r["stage"] == "rl"]
    assert len(rl_runs) == 4 and rl_runs[1]["out_dir"] == rl_runs[2]["out_dir"]  # resumed in its own folder


# ---------------------------------------------------------------------------------------------------------
# A signal during the last step of a run: the run completes, nothing after it starts


def test_train_after_stage_0_does_not_start_the_stage_when_stage_0_was_signalled(tmp_path, monkeypatch, capsys):
    from harness.stages import warmup

    started = []

    def stage_0_signalled_in_its_last_step(cfg, stage, progress):
        signal_self()  # stage 0 then completes (its base is cached)

    monkeypatch.setattr("harness.cli.stage_commands.prepare_base", stage_0_signalled_in_its_last_step)
    monkeypatch.setattr(warmup, "run_warmup", lambda cfg, progress=True: started.append(cfg.out_dir))
    with signals_caught():
        rc = main(["train", "warmup", f"out_dir={tmp_path / 'w'}", "--no-progress"])
    assert rc == preemption.REQUEUE_EXIT_CODE and started == []
    assert "stage 0 is complete and cached; rerun the same command to resume" in capsys.readouterr().err


def _study(tmp_path: Path) -> Path:
    from tests.harness.test_experiments import write_study

    return write_study(tmp_path, "  - name: a\n    pipeline: [warmup, rl]\n", seeds="[0]")


@pytest.mark.parametrize("last_node", [False, True], ids=["then-more-nodes", "the-last-node"])
def test_a_signal_in_a_stages_last_step_completes_it_and_the_runner_starts_nothing_after(
        tmp_path, calls, monkeypatch, last_node):
    """The runner (in-process stages, --workers 1): warm-up (or RL, the last stage run before the fake test
    evaluation, which it then does not start) is signalled during its last step."""
    from harness.experiments import load_study, run_experiment
    from tests.harness.runs.test_faults import _functions

    study = _study(tmp_path)
    ref = tmp_path / "ref"
    assert run_experiment(load_study(study), ref, workers=1, functions=_functions(), log=lambda s: None).ok
    stage = "rl" if last_node else "warmup"
    monkeypatch.setenv("FAKE_SIGNAL_AT", f"{stage}:8")  # step 8 of 8 (tests/harness/runs/test_faults.py)
    out = tmp_path / "out"
    before = len(calls())
    with signals_caught():
        res = run_experiment(load_study(study), out, workers=1, functions=_functions(), log=lambda s: None)
    stages = {s: r for s, r in res.index["runs"][0]["stages"].items()}
    assert stages[stage]["status"] == "complete"  # recorded, with its metrics: nothing of it is redone
    assert preemption.count(out / stages[stage]["dir"]) == 0
    runs = lambda: [r["stage"] for r in calls()[before:] if r["stage"] != "support"]  # noqa: E731
    assert runs() == (["warmup", "rl"] if last_node else ["warmup"])  # nothing started after the signal
    before = len(calls())
    assert res.preempted  # the evaluation (and RL) are left: exit status 75, the rerun resumes
    preemption.clear()
    monkeypatch.delenv("FAKE_SIGNAL_AT")
    res = run_experiment(load_study(study), out, workers=1, functions=_functions(), log=lambda s: None)
    assert res.ok and not res.preempted
    assert runs() == ([] if last_node else ["rl"]) + ["eval"]
    from tests.harness.runs.test_faults import _records

    assert _records(out) == _records(ref)


def test_a_signal_in_the_last_step_of_the_last_run_leaves_nothing_to_resume(tmp_path, calls, monkeypatch):
    """With nothing left to run, the runner ends as done (exit 0), not as preempted."""
    from harness.experiments import load_study, run_experiment
    from tests.harness.runs.test_faults import _functions

    study = _study(tmp_path)
    out = tmp_path / "out"
    fns = {**_functions(), "eval": "tests.harness.runs.test_preempt_commands:eval_signalled"}
    with signals_caught():
        res = run_experiment(load_study(study), out, workers=1, functions=fns, log=lambda s: None)
    assert res.ok and not res.preempted
    assert read_json(out / "index.json")["summary"]["complete"] == 1


def eval_signalled(cfg, model_dir, progress=False):
    """The fake test evaluation, signalled before it returns (its scores are complete)."""
    from tests.harness.test_experiments import fake_eval

    signal_self()
    return fake_eval(cfg, model_dir, progress)


# ---------------------------------------------------------------------------------------------------------
# Callers that go on after an experiment: --until-decided's looks, the demo's table


def sft_preempted_once(cfg, progress=False):
    """The fake SFT stage; the first SFT run of the test gets SIGTERM and stops (nothing to checkpoint)."""
    from tests.harness.test_experiments import fake_sft

    out = Path(cfg.out_dir)
    once = Path(os.environ["REGBENCH_TEST_CALLS"]).with_name("sft_signalled")
    if not once.exists():
        once.write_text(str(out))
        signal_self()
        with preemption.handling(cfg.train.preempt_signals):
            if preemption.stop_agreed():
                raise preemption.stop(out, "sft", 0)
    return fake_sft(cfg, progress)


def test_until_decided_stops_at_a_preempted_look_and_the_rerun_decides_as_an_uninterrupted_one(
        tmp_path, monkeypatch):
    from harness.experiments.sequential import SEQUENTIAL_FILE, run_until_decided
    from tests.harness.test_sequential import SEQ_FAKES, _study

    monkeypatch.setenv("REGBENCH_TEST_EFFECT", "0.05")
    monkeypatch.setenv("REGBENCH_TEST_CALLS", str(tmp_path / "calls.jsonl"))
    _, want = run_until_decided(_study(tmp_path), tmp_path / "ref", workers=1, functions=SEQ_FAKES,
                                log=lambda s: None)
    fns = {**SEQ_FAKES, "sft": "tests.harness.runs.test_preempt_commands:sft_preempted_once"}
    out = tmp_path / "out"
    with signals_caught(), pytest.raises(preemption.Preempted, match="--until-decided look 1 of toy: preempted"):
        run_until_decided(_study(tmp_path), out, workers=1, functions=fns, log=lambda s: None)
    assert not (out / SEQUENTIAL_FILE).exists()  # no look was decided on runs that did not finish
    preemption.clear()  # (a new process in real use)
    result, got = run_until_decided(_study(tmp_path), out, workers=1, functions=fns, log=lambda s: None)
    assert result.ok and [(d.outcome, d.n, d.diff) for d in got] == [(d.outcome, d.n, d.diff) for d in want]
    assert read_json(out / SEQUENTIAL_FILE) == read_json(tmp_path / "ref" / SEQUENTIAL_FILE)


def test_the_demo_stops_when_its_experiment_was_preempted(tmp_path, monkeypatch):
    import harness.experiments
    from harness.cli.demo import run_demo
    from harness.experiments.graph_run import ExperimentResult

    def preempted_experiment(study, out, **kwargs):
        return ExperimentResult(Path(out) / "index.json", {"runs": []}, [], [], preempted=True)

    monkeypatch.setattr(harness.experiments, "run_experiment", preempted_experiment)
    with pytest.raises(preemption.Preempted, match="demo .*: preempted, its running stage runs checkpointed"):
        run_demo(tmp_path / "demo", progress=False, workers=1)
