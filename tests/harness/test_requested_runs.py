"""index.json records the runs a runner call was asked for (`--arms`, `--seeds` subsets): the others are `not
requested`, apart from `pending`; `regbench experiment status` says so, and shows an ended Slurm job's state as
Slurm reports it (issue 46)."""

from __future__ import annotations

import json
import subprocess

from harness.experiments import build_plan, load_study
from harness.experiments.index import build_index, requested_runs
from harness.runs.schema import NOT_REQUESTED
from tests.harness.test_experiments import ARMS, write_study


def plan_of(tmp_path):
    return build_plan(load_study(write_study(tmp_path, ARMS)), tmp_path / "out")


def test_runs_not_asked_for_are_not_requested_not_pending(tmp_path):
    plan = plan_of(tmp_path)
    asked = {("a", 0), ("a", 1), ("b", 0)}
    index = build_index(plan, {}, "t", [], requested=asked)
    status = {(r["arm"], r["seed"]): r["status"] for r in index["runs"]}
    assert status == {("a", 0): "pending", ("a", 1): "pending", ("b", 0): "pending", ("b", 1): NOT_REQUESTED,
                      ("c", 0): NOT_REQUESTED, ("c", 1): NOT_REQUESTED}
    assert index["summary"]["pending"] == 3 and index["summary"][NOT_REQUESTED] == 3
    assert requested_runs(index) == asked
    whole = build_index(plan, {}, "t", [])  # no record: every run was asked for (indexes before issue 46)
    assert {r["status"] for r in whole["runs"]} == {"pending"} and requested_runs(whole) is None


def test_a_second_subset_call_adds_its_runs_to_the_recorded_ones(tmp_path):
    from harness.experiments.local import LocalExperimentRun

    plan = plan_of(tmp_path)
    first = LocalExperimentRun(plan, [("a", 0), ("a", 1)], {}, print, [], None, 1, False)
    first.write_index()
    second = LocalExperimentRun(plan_of(tmp_path), [("c", 0)], {}, print, [], None, 1, False)
    index = second.write_index()
    assert requested_runs(index) == {("a", 0), ("a", 1), ("c", 0)}
    assert sorted((r["arm"], r["seed"]) for r in index["runs"] if r["status"] == NOT_REQUESTED) == \
        [("b", 0), ("b", 1), ("c", 1)]


def fake_cluster(monkeypatch, squeue: str, scontrol: dict[str, str]):
    from harness.experiments import slurm, slurm_queue

    def run(self, *cmd):
        if cmd[0] == "squeue":
            return subprocess.CompletedProcess(cmd, 0, squeue, "")
        if cmd[:3] == ("scontrol", "show", "job"):
            return subprocess.CompletedProcess(cmd, 0, scontrol.get(cmd[-1], ""), "")
        raise AssertionError(cmd)

    monkeypatch.setattr(slurm_queue, "slurm_available", lambda: None)
    monkeypatch.setattr(slurm.SlurmQueue, "_run", run)


def test_experiment_status_shows_not_requested_and_slurms_state_of_an_ended_job(tmp_path, monkeypatch):
    from harness.experiments.slurm import experiment_status

    stage = {"key": "k", "dir": "stages/rl", "shared_by": ["a"]}
    index = {"study": "toy", "executor": "slurm", "updated": "now",
             "summary": {"running": 1, "pending": 1, NOT_REQUESTED: 1},
             "runs": [{"arm": "a", "seed": 0, "status": "running",
                       "stages": {"rl": {**stage, "status": "running", "slurm_jobs": ["101"]}}},
                      {"arm": "a", "seed": 1, "status": "pending",
                       "stages": {"rl": {**stage, "status": "pending", "slurm_jobs": ["102"]}}},
                      {"arm": "b", "seed": 0, "status": NOT_REQUESTED,
                       "stages": {"rl": {**stage, "status": "pending"}}}]}
    (tmp_path / "index.json").write_text(json.dumps(index))
    fake_cluster(monkeypatch, squeue="102|PENDING|Priority\n",
                 scontrol={"101": "JobId=101 JobName=rl JobState=CANCELLED Reason=None ExitCode=0:15"})
    lines = experiment_status(tmp_path).splitlines()
    row = {tuple(line.split()[:4]): line for line in lines if line.startswith(("a ", "b "))}
    assert "CANCELLED" in row["a", "seed", "0", "rl"].split()[4] and "(exit 0:15)" in row["a", "seed", "0", "rl"]
    assert row["a", "seed", "1", "rl"].split()[4] == "pending" and "PENDING (Priority)" in row["a", "seed", "1", "rl"]
    assert "not requested" in row["b", "seed", "0", "rl"] and "not requested" in row["b", "seed", "0", "eval"]
    assert "pending" not in row["b", "seed", "0", "rl"] + row["b", "seed", "0", "eval"]
