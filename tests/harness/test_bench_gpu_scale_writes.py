"""benchmarks/bench_gpu_scale.py writes each shape's result as soon as it has it (issue 43): an out-of-memory at 7B
recorded as 7B's result, the 3B result already on disk and kept. The shape runner is a stub here (no GPU); the
measuring code is the script's own and is not run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_gpu_scale", ROOT / "benchmarks" / "bench_gpu_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_shape_is_on_disk_before_the_next_starts_and_an_oom_is_recorded_as_its_result(bench, tmp_path):
    out = tmp_path / "gpu_scale.json"
    on_disk, cleaned = [], []

    def run_shape(shape):
        on_disk.append(json.loads(out.read_text()))  # what the file holds when this shape starts
        if shape == "7b":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return {"params": 3.75e9, "rl_step": {"update_mfu": 0.2}}

    report = bench.run_shapes(["3b", "7b"], run_shape, {"device": "H200"}, out, lambda: cleaned.append(1))
    assert on_disk == [{"device": "H200"}, {"device": "H200", "3b": {"params": 3.75e9, "rl_step": {"update_mfu": 0.2}}}]
    final = json.loads(out.read_text())
    assert final == report and final["3b"]["params"] == 3.75e9
    assert final["7b"]["failed"] and final["7b"]["out_of_memory"] and final["7b"]["error"] == "OutOfMemoryError"
    assert "Tried to allocate 20.00 GiB" in final["7b"]["message"]
    assert cleaned == [1, 1] and sorted(tmp_path.iterdir()) == [out]  # no temporary file left beside it


def test_a_kill_during_a_shape_keeps_the_shapes_before_and_results_merge_into_an_earlier_file(bench, tmp_path):
    out = tmp_path / "gpu_scale.json"
    out.write_text(json.dumps({"device": "older run", "7b": {"params": 8.29e9}}))

    def run_shape(shape):
        if shape == "7b":
            raise KeyboardInterrupt  # a kill is not a result: it ends the script, the file keeps what it has
        return {"params": 3.75e9}

    with pytest.raises(KeyboardInterrupt):
        bench.run_shapes(["3b", "7b"], run_shape, {"device": "H200"}, out)
    assert json.loads(out.read_text()) == {"device": "H200", "7b": {"params": 8.29e9}, "3b": {"params": 3.75e9}}


def test_a_failure_that_is_not_an_oom_is_recorded_as_such(bench, tmp_path):
    out = tmp_path / "gpu_scale.json"

    def run_shape(shape):
        raise ValueError("bad shape")

    report = bench.run_shapes(["3b"], run_shape, {}, out)
    assert report["3b"] == {"failed": True, "error": "ValueError", "out_of_memory": False, "message": "bad shape"}
    assert json.loads(out.read_text()) == report
