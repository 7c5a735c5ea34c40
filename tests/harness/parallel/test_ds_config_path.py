"""`train.deepspeed: experiments/deepspeed/zero1.json` (the paper presets) is found from any working directory:
it was read relative to the working directory only, so a stage started from a Slurm job's or a notebook's folder
failed with "no such file" while `regbench doctor` (which looked in the repository too) planned with it."""

from __future__ import annotations

import json
from pathlib import Path

from harness.checks.memory_plan import zero_stage
from harness.parallel.ds_config_path import REPO
from harness.parallel.zero import stage_config


def test_the_presets_zero1_file_is_found_from_another_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = stage_config("experiments/deepspeed/zero1.json", 1.0)
    assert config["zero_optimization"]["stage"] == 1 and config["gradient_clipping"] == 1.0
    assert zero_stage("experiments/deepspeed/zero1.json") == 1


def test_a_file_in_the_working_folder_wins_over_the_repository(tmp_path, monkeypatch):
    (tmp_path / "experiments" / "deepspeed").mkdir(parents=True)
    own = {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 1}
    (tmp_path / "experiments" / "deepspeed" / "zero1.json").write_text(json.dumps(own))
    monkeypatch.chdir(tmp_path)
    assert stage_config("experiments/deepspeed/zero1.json", 0.5)["zero_optimization"]["stage"] == 2
    assert (REPO / "experiments" / "deepspeed" / "zero1.json").is_file()


def test_a_missing_file_still_names_the_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing = str(Path("experiments") / "deepspeed" / "absent.json")
    try:
        stage_config(missing, 1.0)
    except FileNotFoundError as e:
        assert f"train.deepspeed = {missing!r}: no such file" in str(e)
    else:
        raise AssertionError("a missing DeepSpeed config must be refused")
