"""harness/config/retired.py (issue 47): a field removed because nothing read it (train.log_every) is gone from the
config, yet every run keeps its key and its manifest hash; a file or override that still sets it gets one line."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import yaml

from harness.config import ConfigError, RunConfig, TrainConfig, build_config, from_dict, load_config, to_dict
from harness.config.retired import RETIRED, with_retired
from harness.experiments import resolve
from harness.runs.state import config_hash


def test_the_retired_field_is_no_field_any_more():
    assert "train.log_every" in RETIRED
    assert "log_every" not in {f.name for f in dataclasses.fields(TrainConfig)}
    assert "log_every" not in to_dict(RunConfig())["train"]


def old_record(cfg) -> dict:
    """The record as the code before the removal made it: the field at its default."""
    d = to_dict(cfg)
    d["train"]["log_every"] = 10
    return d


def test_the_hashes_read_the_old_value_so_every_key_stays(monkeypatch):
    cfg = load_config(None, ["rl.reward=chexpert_f1"])
    record = to_dict(cfg)
    assert with_retired(record)["train"]["log_every"] == 10 and "log_every" not in record["train"]
    assert config_hash(cfg) == config_hash(old_record(cfg))
    now = {kind: resolve.config_key(kind, cfg, {"init": "abc"}) for kind in ("warmup", "rl")}
    with monkeypatch.context() as m:
        m.setattr(resolve, "to_dict", old_record)
        assert {kind: resolve.config_key(kind, cfg, {"init": "abc"}) for kind in ("warmup", "rl")} == now
    # a set value is never replaced by the old one
    assert with_retired({"train": {"log_every": 3}})["train"]["log_every"] == 3


def test_a_file_with_the_old_value_is_accepted_with_one_warning(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"train": {"log_every": 10, "lr": 1e-4}}))
    with pytest.warns(FutureWarning, match=r"'train.log_every' was removed") as seen:
        cfg = load_config(path)
    assert len([w for w in seen if issubclass(w.category, FutureWarning)]) == 1
    assert str(path) in str(seen[0].message)
    assert cfg.train.lr == 1e-4 and config_hash(cfg) == config_hash(load_config(None, ["train.lr=1e-4"]))


@pytest.mark.parametrize("how", ["file", "override", "build"])
def test_another_value_is_refused_naming_key_and_value(tmp_path, how):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"train": {"log_every": 5}}))
    with pytest.raises(ConfigError) as e:
        if how == "file":
            load_config(path)
        elif how == "override":
            load_config(None, ["train.lr=1e-4", "train.log_every=5"])
        else:
            build_config({"train.log_every": 5}, source="study.yaml")
    line = str(e.value)
    assert "\n" not in line and "'train.log_every' = 5" in line and "removed" in line
    assert {"file": str(path), "override": "override 'train.log_every=5'", "build": "study.yaml"}[how] in line


def test_a_stored_record_that_holds_it_is_read_without_a_word():
    record = to_dict(RunConfig())
    record["train"]["log_every"] = 7  # a manifest written before the removal
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = from_dict(RunConfig, record)
    assert cfg == RunConfig()
