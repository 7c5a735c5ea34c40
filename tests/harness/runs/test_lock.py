"""Run folders have an owner and a state: a lock of live processes (a second writer is refused, a dead one's
lock is taken over, a worker joins its runner's lock), and a manifest whose stage and config a rerun must
match (else refused with the differing keys, unless --restart)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.config import load_config
from harness.runs import lock as runlock
from harness.runs.lock import LOCK_NAME, Holder, RunLocked
from harness.runs.records import RunDir
from harness.runs.state import RunMismatch, config_differences, config_hash
from harness.stages.common import start_run

ROOT = Path(__file__).resolve().parents[3]


def _cfg(out: Path, *overrides: str):
    return load_config(None, [f"out_dir={out}", *overrides])


@pytest.fixture
def holder_process(tmp_path):
    """Another live process holding a folder's lock (as a concurrent `regbench train` would)."""
    procs = []

    def start(folder: Path) -> subprocess.Popen:
        code = textwrap.dedent(f"""
            import sys
            from harness.runs import lock as runlock
            runlock.acquire({str(folder)!r})
            print("ready", flush=True)
            sys.stdin.read()
        """)
        p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert p.stdout.readline().strip() == "ready"
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.stdin.close()
        p.wait(timeout=60)


def test_a_second_train_on_a_folder_in_use_is_refused(tmp_path, holder_process):
    out = tmp_path / "run"
    other = holder_process(out)
    with pytest.raises(RunLocked, match=rf"{out} is being run by another process .*pid {other.pid}"):
        start_run(_cfg(out), "warmup")
    assert not (out / "manifest.json").exists()


def test_the_cli_refuses_it_with_one_line_and_exit_2(tmp_path, holder_process, capsys):
    from harness.cli import main

    out = tmp_path / "run"
    other = holder_process(out)
    assert main(["train", "warmup", f"out_dir={out}", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"pid {other.pid}" in err and str(out) in err


def test_once_the_holder_is_gone_its_lock_is_stale(tmp_path, holder_process):
    out = tmp_path / "run"
    other = holder_process(out)
    other.stdin.close()
    other.wait(timeout=60)  # exited without releasing? atexit released; write a dead holder's line back
    (out / LOCK_NAME).write_text(Holder(runlock.HOST, other.pid, "1").line() + "\n")
    run = start_run(_cfg(out), "warmup")
    assert run.path == out
    assert [h.pid for h in runlock.read_holders(out / LOCK_NAME)] == [os.getpid()]
    runlock.release(out)
    assert not (out / LOCK_NAME).exists()


def test_a_recycled_pid_does_not_keep_a_lock_alive(tmp_path):
    """The lock names a live PID whose start time differs: another process got that PID; the lock is stale."""
    out = tmp_path / "run"
    out.mkdir()
    parent = os.getppid()
    true_start = runlock.process_start(parent)
    assert true_start is not None
    (out / LOCK_NAME).write_text(f"{runlock.HOST} {parent} {int(true_start) + 12345}\n")
    runlock.acquire(out)
    assert [h.pid for h in runlock.read_holders(out / LOCK_NAME)] == [os.getpid()]
    runlock.release(out)


def test_a_live_writer_keeps_the_folder_locked_even_when_the_runner_died(tmp_path, holder_process):
    """kill -9 of a runner whose worker still writes: the worker's line keeps the lock; a rerun is refused."""
    out = tmp_path / "run"
    worker = holder_process(out)
    lines = [f"{runlock.HOST} 999999999 5", Holder(runlock.HOST, worker.pid, runlock.process_start(worker.pid)).line()]
    (out / LOCK_NAME).write_text("\n".join(lines) + "\n")
    with pytest.raises(RunLocked, match=f"pid {worker.pid}"):
        runlock.acquire(out)


def test_a_worker_joins_its_runners_lock_and_leaves_it_when_done(tmp_path):
    out = tmp_path / "run"
    runlock.acquire(out)  # the runner (this process)
    code = textwrap.dedent(f"""
        from harness.runs import lock as runlock
        with runlock.scope():
            runlock.acquire({str(out)!r})
            print(len(runlock.read_holders(runlock.Path({str(out / LOCK_NAME)!r}))))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.stdout.strip() == "2"  # runner + worker while the worker ran
    assert [h.pid for h in runlock.read_holders(out / LOCK_NAME)] == [os.getpid()]
    runlock.release(out)
    assert not (out / LOCK_NAME).exists()


def test_resume_with_a_changed_config_is_refused_naming_the_keys(tmp_path):
    out = tmp_path / "run"
    start_run(_cfg(out, "rl.reward=bleu4", "rl.beta_max=0.12"), "rl")
    runlock.release(out)
    with pytest.raises(RunMismatch) as e:
        start_run(_cfg(out, "rl.reward=chexpert_f1", "rl.beta_max=0.15"), "rl")
    msg = str(e.value)
    assert "manifest.json" in msg and "rl.reward: 'bleu4' in the run, 'chexpert_f1' now" in msg
    assert "rl.beta_max: 0.12 in the run, 0.15 now" in msg and "--restart" in msg
    assert json.loads((out / "manifest.json").read_text())["config"]["rl"]["reward"] == "bleu4"  # untouched


def test_a_folder_of_another_stage_is_refused_even_when_finished(tmp_path):
    out = tmp_path / "warm"
    run = start_run(_cfg(out), "warmup")
    run.write_metrics({"steps": 3})
    runlock.release(out)
    with pytest.raises(RunMismatch, match="out_dir holds a 'warmup' run, not 'rl'"):
        start_run(_cfg(out), "rl")


def test_restart_discards_the_old_run(tmp_path):
    out = tmp_path / "run"
    run = start_run(_cfg(out, "rl.reward=bleu4"), "rl")
    run.log_step({"step": 1})
    (out / "checkpoint").mkdir()
    (out / "checkpoint" / "rl_state.pt").write_bytes(b"x")
    run.write_metrics({"steps": 1})
    runlock.release(out)
    run = start_run(_cfg(out, "rl.reward=chexpert_f1"), "rl", restart=True)
    assert not run.complete and not (out / "checkpoint").exists() and not (out / "steps.jsonl").exists()
    man = json.loads((out / "manifest.json").read_text())
    assert man["config"]["rl"]["reward"] == "chexpert_f1"
    assert man["config_hash"] == config_hash(_cfg(out, "rl.reward=chexpert_f1"))
    runlock.release(out)


def test_locations_do_not_count_and_an_added_field_counts_as_its_default(tmp_path):
    out = tmp_path / "run"
    start_run(_cfg(out, "model.device=cpu", f"data.synth_dir={tmp_path / 'a'}"), "warmup")
    runlock.release(out)
    start_run(_cfg(out, "model.device=auto", f"data.synth_dir={tmp_path / 'b'}"), "warmup")  # accepted
    runlock.release(out)
    new = json.loads((out / "manifest.json").read_text())["config"]
    old = json.loads(json.dumps(new))
    del old["rl"]["top_k"]  # a manifest written before the field existed
    assert config_differences(old, new) == []
    new["rl"]["top_k"] = 5
    assert config_differences(old, new) == [("rl.top_k", "<absent>", 5)]


def test_a_rerun_without_checkpoint_starts_with_empty_logs(tmp_path):
    out = tmp_path / "run"
    run = start_run(_cfg(out), "rl")
    run.log_step({"step": 1})
    run.log_eval({"step": 0, "split": "val"})
    runlock.release(out)
    run = start_run(_cfg(out), "rl")  # interrupted before the first checkpoint: starts from zero
    assert run.steps() == [] and run.evals() == []
    run.log_step({"step": 1})
    (out / "checkpoint").mkdir()
    (out / "checkpoint" / "rl_state.pt").write_bytes(b"x")
    runlock.release(out)
    assert start_run(_cfg(out), "rl").steps() == [{"step": 1}]  # with a checkpoint the trainer truncates
    runlock.release(out)


def test_stages_get_their_own_default_out_dir():
    assert load_config(None, [], stage="warmup").out_dir == "runs/warmup"
    assert load_config(None, [], stage="rl").out_dir == "runs/rl"
    assert load_config(None, ["out_dir=x"], stage="rl").out_dir == "x"


def test_out_dir_that_is_a_file_is_a_clear_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match=rf"out_dir = '{f / 'sub'}': '{f}' is a file"):
        start_run(_cfg(f / "sub"), "warmup")


def test_run_dir_helpers_leave_nothing_behind(tmp_path):
    run = RunDir(tmp_path / "r")
    run.log_step({"step": 1})
    run.clear_logs()
    assert run.steps() == [] and sorted(p.name for p in run.path.iterdir()) == []


def _sleeper(path: str) -> None:
    import time

    Path(path).write_text(str(os.getpid()))
    time.sleep(120)


def test_workers_die_with_a_killed_runner(tmp_path):
    """kill -9 of the runner: its pool's worker processes are gone too (no orphan left writing)."""
    import signal
    import time

    code = textwrap.dedent(f"""
        import time
        from harness.experiments.workers import make_executor
        from tests.harness.runs.test_lock import _sleeper
        ex = make_executor(2)
        futs = [ex.submit(_sleeper, {str(tmp_path)!r} + f"/w{{i}}") for i in range(2)]
        time.sleep(600)
    """)
    runner = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    files = [tmp_path / "w0", tmp_path / "w1"]
    for _ in range(600):  # the workers start (spawn + imports)
        if all(f.is_file() and f.read_text() for f in files):
            break
        time.sleep(0.5)
    pids = [int(f.read_text()) for f in files]
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()

    def running(pid: int) -> bool:
        fields = runlock._stat_fields(pid)
        return fields is not None and fields[0] != "Z"  # a zombie has exited

    for _ in range(200):
        if not any(running(p) for p in pids):
            break
        time.sleep(0.1)
    alive = [p for p in pids if running(p)]
    for p in alive:
        os.kill(p, signal.SIGKILL)
    assert not alive
