"""kill -9 end to end: a 2-worker `experiment run`, a 2-parallel-trial `search run` and a launched stage are
killed mid-way; no process of theirs may be left, and a rerun must give the records of an uninterrupted run.

The stage runs are fake but resumable the way the real ones are: they log one row per step, checkpoint after
each step, and on resume cut the log back to the checkpoint (a row written after the last checkpoint is
dropped). Their numbers are a function of the config only, so interrupted and uninterrupted runs must agree
byte for byte. Every process the runner starts inherits a marker in its environment; /proc tells whether any is
left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness.experiments import load_study, run_experiment
from harness.runs.records import atomic_write_json, atomic_write_text, read_json
from harness.search.run import run_search
from tests.harness.search.test_run import write_search
from tests.harness.test_experiments import ARMS, FAKES, _record, write_study

ROOT = Path(__file__).resolve().parents[3]
STEPS = 10
STEP_S = 0.12


def _resumable(stage: str):
    def run(cfg, progress=False):
        _record(stage, cfg)
        out = Path(cfg.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        ckpt, log = out / "ckpt.json", out / "steps.jsonl"
        start = read_json(ckpt)["step"] if ckpt.is_file() else 0
        rows = [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []
        atomic_write_text(log, "".join(json.dumps(r) + "\n" for r in rows if r["step"] <= start))
        # A number that depends on what the stage is (seed, regularizer, bounds), not on where or when it runs.
        final = 1.0 - (cfg.rl.beta_base - 0.1) ** 2 - cfg.rl.beta_min + 0.01 * cfg.seed
        scale = {"none": 1.0, "constant": 2.0, "adaptive": 3.0, "rer": 4.0}[cfg.rl.regularizer]
        for step in range(start + 1, STEPS + 1):
            time.sleep(STEP_S)
            with open(log, "a") as f:
                f.write(json.dumps({"step": step, "loss": scale * final / (step + 0.3)}) + "\n")
            atomic_write_json(ckpt, {"step": step})
        sub = out / ("classifier" if stage == "classifier" else "model")
        sub.mkdir(exist_ok=True)
        if stage == "rl":
            rows = [{"step": 0, "split": "val", "val_score": 5.0}, {"step": STEPS, "split": "val", "val_score": final}]
            atomic_write_text(out / "evals.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
        atomic_write_json(out / "metrics.json", {"stage": stage, "selected_score": final, "selected_step": STEPS})
        return sub
    return run


slow_warmup, slow_classifier, slow_sft, slow_rl = (_resumable(s) for s in ("warmup", "classifier", "sft", "rl"))
SLOW = {**FAKES, **{s: f"tests.harness.runs.test_kill9:slow_{s}" for s in ("warmup", "classifier", "sft", "rl")}}

DRIVER = """import sys
from harness import experiments
from tests.harness.runs.test_kill9 import SLOW
experiments.DEFAULT_FUNCTIONS.update(SLOW)
from harness.cli import main
if __name__ == "__main__":  # (spawned workers import this file too)
    sys.exit(main(sys.argv[1:]))
"""


def _marked(mark: str) -> list[int]:
    """PIDs of live processes whose environment carries `mark` (zombies have none)."""
    needle = f"REGBENCH_TEST_MARK={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _wait_until(cond, what: str, limit_s: float = 120.0) -> None:
    deadline = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def _no_orphans(mark: str) -> None:
    """Every process of the killed tree goes (the kernel's parent-death signals take a moment)."""
    deadline = time.monotonic() + 30
    while _marked(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _marked(mark) == [], "processes left alive after kill -9 of their runner"


def _kill_mid_way(tmp_path: Path, args: list[str], started, mark: str) -> None:
    """Start `regbench ARGS` with the slow stages, kill -9 it once `started()` holds, check nothing is left."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REGBENCH_TEST_MARK": mark}
    proc = subprocess.Popen([sys.executable, str(driver), *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        _wait_until(lambda: started() or proc.poll() is not None, "the stages to start")
        assert proc.poll() is None, "the run ended before the kill point"
        time.sleep(3 * STEP_S)  # mid-way through those stages
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    _no_orphans(mark)


def _rerun(tmp_path: Path, args: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, str(tmp_path / "driver.py"), *args], env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


def _stage_records(out: Path, stages: Path) -> dict:
    """Every stage run's and evaluation's records, with the output folder's path taken out."""
    records = {}
    for path in sorted([*stages.glob("*/*.json*"), *out.glob("*/seed*/eval/metrics.json")]):
        if path.name in ("metrics.json", "steps.jsonl", "evals.jsonl", "ckpt.json"):
            text = path.read_text().replace(str(out.resolve()), "<out>")
            records[str(path.relative_to(out if path.is_relative_to(out) else stages.parent))] = text
    return records


def _index_records(out: Path) -> dict:
    index = read_json(out / "index.json")
    for run in index["runs"]:
        run.pop("elapsed_s")
        for stage in run["stages"].values():
            stage.pop("elapsed_s")
    return {k: index[k] for k in ("runs", "summary", "arms", "seeds", "stages_dir")}


@pytest.mark.slow  # 48 s on 2 loaded cores (2026-12-02): make test-slow
def test_kill9_of_a_two_worker_experiment_then_rerun_gives_the_uninterrupted_records(tmp_path, calls):
    path = write_study(tmp_path, ARMS, seeds="[0]")
    ref = tmp_path / "ref"
    assert run_experiment(load_study(path), ref, workers=1, functions=SLOW, log=lambda s: None).ok
    path.with_name("calls.jsonl").unlink()
    out = tmp_path / "out"
    args = ["experiment", "run", str(path), "--workers", "2", "--out", str(out)]

    def two_running() -> bool:  # the classifier and arm c's RL run side by side after the warm-up
        return sum(r["stage"] in ("classifier", "rl") for r in calls()) >= 2

    _kill_mid_way(tmp_path, args, two_running, uuid.uuid4().hex)
    assert not (out / "a" / "seed0" / "eval" / "metrics.json").exists()  # it was killed before the end
    _rerun(tmp_path, args)
    assert _index_records(out) == _index_records(ref)
    assert _stage_records(out, out / "stages") == _stage_records(ref, ref / "stages")
    assert not list(out.rglob(".regbench.lock"))


@pytest.mark.slow  # 75 s on 2 loaded cores (2026-12-02): make test-slow
def test_kill9_of_a_two_parallel_trial_search_then_rerun_gives_the_uninterrupted_records(tmp_path, calls):
    path = write_search(tmp_path, n_trials=4)
    ref = tmp_path / "ref"
    run_search(path, ref, functions=SLOW, log=lambda s: None)
    path.with_name("calls.jsonl").unlink()
    out = tmp_path / "out"
    args = ["search", "run", str(path), "--parallel-trials", "2", "--out", str(out), "--no-report"]

    def second_batch_running() -> bool:
        return sum(r["stage"] == "rl" for r in calls()) >= 4

    _kill_mid_way(tmp_path, args, second_batch_running, uuid.uuid4().hex)
    _rerun(tmp_path, args)
    got, want = read_json(out / "search.json")["trials"], read_json(ref / "search.json")["trials"]
    # The killed batch's trials were failed and enqueued again with their values: the reruns take their place.
    requeued = [t for t in got if t["requeued"]]
    assert [t["state"] for t in requeued] == ["fail", "fail"] and len(got) == 6
    kept = sorted((t for t in got if not t["requeued"]), key=lambda t: t["retry_of"] or t["number"])
    assert [t["retry_of"] for t in kept] == [None, None, 2, 3]
    fields = ("values", "objective", "per_seed", "state")
    assert [{k: t[k] for k in fields} for t in kept] == [{k: t[k] for k in fields} for t in want]
    def stage_runs(folder: Path) -> dict:  # (evaluations are per arm, and the arms' names differ)
        return {k: v for k, v in _stage_records(folder, folder / "stages").items() if "/eval/" not in k}

    assert stage_runs(out) == stage_runs(ref)
    assert not list(out.rglob(".regbench.lock"))


# ---------------------------------------------------------------------------------------------------------
# A launched stage (`--launcher`): the launcher and its ranks go with the runner


LAUNCHER = """import subprocess, sys, time
# Like torchrun: start a rank (ignoring the command it was given) and wait for it.
rank = subprocess.Popen([sys.executable, "-c", {rank!r}])
rank.wait()
"""
RANK = """import os, sys, time
from harness.experiments import die_with_parent_if_launched
die_with_parent_if_launched()  # what harness.cli's main does first
open(os.environ["READY"], "w").write(str(os.getpid()))
time.sleep(600)
"""
RUNNER = """import sys
from harness.config import load_config
from harness.experiments import launch_stage
cfg = load_config(None, [f"out_dir={sys.argv[1]}"])
launch_stage("warmup", cfg, f"{sys.executable} {sys.argv[2]}")
"""


def test_kill9_of_a_runner_takes_its_launched_stage_down(tmp_path):
    launcher = tmp_path / "launcher.py"
    launcher.write_text(LAUNCHER.format(rank=RANK))
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    mark, ready = uuid.uuid4().hex, tmp_path / "ready"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REGBENCH_TEST_MARK": mark, "READY": str(ready)}
    proc = subprocess.Popen([sys.executable, str(runner), str(tmp_path / "run"), str(launcher)], env=env)
    try:
        _wait_until(lambda: ready.is_file() or proc.poll() is not None, "the rank to start")
        assert proc.poll() is None and len(_marked(mark)) == 3  # runner, launcher, rank
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    _no_orphans(mark)


def test_the_cli_joins_a_launched_stage_in_dying_with_its_parent(monkeypatch):
    from harness.cli import main
    from harness.experiments import workers as experiments

    called = []
    monkeypatch.setattr(experiments, "die_with_parent", lambda: called.append(True))
    monkeypatch.delenv(experiments.DIE_WITH_PARENT_ENV, raising=False)
    with pytest.raises(SystemExit):
        main(["--help"])
    assert called == []
    monkeypatch.setenv(experiments.DIE_WITH_PARENT_ENV, "1")
    with pytest.raises(SystemExit):
        main(["--help"])
    assert called == [True]
