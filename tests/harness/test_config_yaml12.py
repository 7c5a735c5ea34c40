"""Config YAML reads booleans as YAML 1.2 does (only true/false), so words that string fields take as values stay
strings: `eval.radgraph=off` was read as False (YAML 1.1) and refused as "must be a string"."""

from __future__ import annotations

import pytest

from harness.config import ConfigError, load_config
from harness.config.describe import commented_yaml
from harness.config.yaml12 import parse_yaml


def test_only_true_and_false_are_booleans():
    assert parse_yaml("a: off\nb: no\nc: yes\nd: on\ne: true\nf: False\ng: 1\nh: 1.5\ni: ~") == {
        "a": "off", "b": "no", "c": "yes", "d": "on", "e": True, "f": False, "g": 1, "h": 1.5, "i": None}


def test_radgraph_off_as_an_override_and_in_a_file(tmp_path):
    assert load_config(None, ["eval.radgraph=off"]).eval.radgraph == "off"
    path = tmp_path / "run.yaml"
    path.write_text("eval:\n  radgraph: off\n", encoding="utf-8")
    assert load_config(path).eval.radgraph == "off"


def test_a_yes_for_a_boolean_field_names_the_key():
    with pytest.raises(ConfigError, match=r"model\.gradient_checkpointing.*true/false.*'yes'"):
        load_config(None, ["model.gradient_checkpointing=yes"])


def test_the_described_config_loads_back_with_off(tmp_path):
    cfg = load_config(None, ["eval.radgraph=off"])
    path = tmp_path / "shown.yaml"
    path.write_text(commented_yaml(cfg), encoding="utf-8")
    assert load_config(path).eval.radgraph == "off"
