from __future__ import annotations

import json

import pytest

from harness.runs.records import RunDir, atomic_write_json, read_json, read_jsonl


def test_run_dir_writes_all_records(tmp_path):
    run = RunDir(tmp_path / "r")
    run.write_manifest({"a": 1}, seed=7, stage="warmup")
    run.log_step({"step": 1, "loss": 2.0})
    run.log_step({"step": 2, "loss": float("nan")})
    run.log_eval({"step": 2, "split": "val"})
    assert not run.complete
    run.write_metrics({"x": 1.5})
    assert run.complete
    man = read_json(run.path / "manifest.json")
    assert man["seed"] == 7 and man["config"] == {"a": 1} and "torch" in man["versions"]
    steps = run.steps()
    assert steps[0]["loss"] == 2.0 and steps[1]["loss"] is None  # NaN is written as null (valid JSON)
    run.truncate_logs_after(1)
    assert [r["step"] for r in run.steps()] == [1]


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    path = tmp_path / "m.json"
    atomic_write_json(path, {"ok": 1})

    class Boom:
        pass

    with pytest.raises(TypeError):
        atomic_write_json(path, {"bad": Boom()})
    assert json.loads(path.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_atomic_writes_get_the_permissions_of_a_plain_open(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    atomic_write_json(tmp_path / "atomic.json", {"ok": 1})
    assert (tmp_path / "atomic.json").stat().st_mode & 0o777 == plain.stat().st_mode & 0o777


def test_torn_last_line_is_dropped_but_middle_is_an_error(tmp_path):
    p = tmp_path / "s.jsonl"
    p.write_text('{"step": 1}\n{"step": 2')
    assert read_jsonl(p) == [{"step": 1}]
    p.write_text('{"step": 1}\n{"st\n{"step": 3}\n')
    with pytest.raises(ValueError, match="s.jsonl:2"):
        read_jsonl(p)


def test_tensorboard_mirror_writes_event_files(tmp_path):
    run = RunDir(tmp_path / "r", tensorboard=True)
    run.log_step({"step": 1, "reward_mean": 0.5, "note": "x", "flag": True})
    run.close()
    events = list((tmp_path / "r" / "tb").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "r" / "tb"))
    acc.Reload()
    assert acc.Tags()["scalars"] == ["train/reward_mean"]
    assert acc.Scalars("train/reward_mean")[0].value == 0.5
