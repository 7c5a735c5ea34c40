"""The Slurm runner reads a job's result as JSON and never unpickles a file of the run folder (issue 49): a folder
may come from anyone, and submitit's result pickle next to the job's logs would run code when loaded. No cluster
needed: the runner's queue is a stand-in with the states a cluster would report."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from types import SimpleNamespace

from submitit.core.utils import JobPaths

from harness.experiments.slurm import SlurmJobs, SlurmOptions
from harness.experiments.slurm_job import result_file
from harness.experiments.slurm_queue import JobState
from harness.runs.records import atomic_write_json


class _Payload:
    """Unpickling this creates the marker file: the proof that a pickle was loaded."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


class _Queue:
    def __init__(self, states: dict[str, JobState]):
        self._states = states

    def states(self, job_ids):
        return {j: self._states[j] for j in job_ids if j in self._states}

    def exit_code(self, job_id):
        return "0:0"


def _runner(folder: Path, queue: _Queue, running: dict[str, str]) -> tuple[SlurmJobs, list]:
    """The Slurm backend's polling and adoption steps only, bound to a stand-in for the graph (no plan on disk)."""
    recorded: list = []
    nodes = {nid: SimpleNamespace(status="complete", deps=[], jobs=[jid], kind="rl") for nid, jid in running.items()}
    graph = SimpleNamespace(plan=SimpleNamespace(nodes=nodes), remaining=[], running=dict(running),
                            _record=lambda nid, res: recorded.append((nid, res)), say=lambda text: None,
                            label=lambda node: "x")
    jobs = SlurmJobs(SlurmOptions())
    jobs.run, jobs.folder, jobs.queue = graph, folder, queue
    return jobs, recorded


def _plant(folder: Path, job_id: str, marker: Path) -> Path:
    pkl = JobPaths(folder / "%j", job_id=job_id, task_id=0).result_pickle
    pkl.parent.mkdir(parents=True)
    pkl.write_bytes(pickle.dumps(("success", _Payload(marker))))
    return pkl


def test_a_planted_result_pickle_is_never_loaded_by_the_poll(tmp_path):
    marker = tmp_path / "payload-ran"
    folder = tmp_path / "slurm"
    _plant(folder, "123", marker)
    run, recorded = _runner(folder, _Queue({"123": JobState("COMPLETED")}), {"rl:a": "123"})
    run._poll()
    assert not marker.exists()
    ((nid, res),) = recorded
    assert nid == "rl:a" and res["ok"] is False and "without a result" in res["error"]


def test_the_job_result_is_read_from_its_json(tmp_path):
    marker = tmp_path / "payload-ran"
    folder = tmp_path / "slurm"
    pkl = _plant(folder, "7", marker)
    atomic_write_json(result_file(pkl), {"ok": True, "result": "RUN", "elapsed_s": 1.5})
    run, recorded = _runner(folder, _Queue({"7": JobState("COMPLETED")}), {"rl:a": "7"})
    run._poll()
    assert not marker.exists()
    assert recorded == [("rl:a", {"ok": True, "result": "RUN", "elapsed_s": 1.5})]


def test_a_json_that_is_not_a_node_result_fails_the_node_with_its_path(tmp_path):
    folder = tmp_path / "slurm"
    pkl = _plant(folder, "8", tmp_path / "m")
    atomic_write_json(result_file(pkl), ["not", "a", "result"])
    run, recorded = _runner(folder, _Queue({"8": JobState("COMPLETED")}), {"rl:a": "8"})
    run._poll()
    ((_, res),) = recorded
    assert res["ok"] is False and str(result_file(pkl)) in res["error"]


def test_adoption_takes_over_a_job_by_its_json_result_not_a_pickle(tmp_path):
    folder = tmp_path / "slurm"
    _plant(folder, "5", tmp_path / "m")  # a pickle only: not a result the runner reads, the job is not adopted
    pkl = _plant(folder, "6", tmp_path / "m2")
    atomic_write_json(result_file(pkl), {"ok": True, "result": "RUN", "elapsed_s": 0.0})
    run, _ = _runner(folder, _Queue({}), {})
    run.run.plan.nodes = {"rl:a": SimpleNamespace(status="pending", jobs=["5"], kind="rl"),
                          "rl:b": SimpleNamespace(status="pending", jobs=["6"], kind="rl")}
    run.run.remaining = ["rl:a", "rl:b"]
    run._adopt()
    assert run.run.running == {"rl:b": "6"} and run.run.remaining == ["rl:a"]
    assert not (tmp_path / "m").exists() and not (tmp_path / "m2").exists()
