"""A file over a preset may set config sections at its top level (`base: presets/tiny.yaml` then `rl: {reward:
..}`): they override the preset's values for every stage, in a stage command and in a study (issue 46: the
README's reward YAML was refused with "unknown key 'rl' in a preset")."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import ConfigError, load_config
from harness.experiments.study import load_study

TINY = Path(__file__).resolve().parents[2] / "experiments" / "presets" / "tiny.yaml"


def _over_tiny(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(f"base: {TINY}\n{body}")
    return path


def test_a_section_over_a_preset_sets_it_for_the_stage_that_reads_it(tmp_path):
    mine = _over_tiny(tmp_path, "rl: {reward: chexpert_f1}\ntrain: {lr: 0.002}\n")
    rl = load_config(mine, [], stage="rl")
    assert rl.rl.reward == "chexpert_f1" and rl.train.lr == 0.002
    plain = load_config(TINY, [], stage="rl")
    # everything else is the preset's RL stage (its max_steps, its schedule)
    assert (rl.train.max_steps, rl.train.scheduler) == (plain.train.max_steps, plain.train.scheduler)
    assert load_config(mine, [], stage="sft").train.lr == 0.002  # the file's own value over the preset's stages
    assert load_config(mine, ["rl.reward=bleu4"], stage="rl").rl.reward == "bleu4"  # the command line still wins


def test_an_unknown_top_level_key_names_both_forms_that_work(tmp_path):
    mine = _over_tiny(tmp_path, "rll: {reward: chexpert_f1}\n")
    with pytest.raises(ConfigError, match=r"unknown key 'rll' in a preset.*`rl: \{reward: bleu4\}`.*stages: \{rl"):
        load_config(mine, [], stage="rl")


def test_a_study_over_such_a_file_takes_its_sections_under_its_own(tmp_path):
    _over_tiny(tmp_path, "rl: {reward: chexpert_f1, beta_max: 0.2}\n")
    study = tmp_path / "s.yaml"
    study.write_text("study: s\nbase: mine.yaml\nstages:\n  rl:\n    rl: {beta_max: 0.3}\n"
                     "arms:\n  - name: a\n    overrides: {rl: {rl.regularizer: none}}\n")
    stages = load_study(study).stages
    assert stages["rl"]["rl"]["reward"] == "chexpert_f1"
    assert stages["rl"]["rl"]["beta_max"] == 0.3  # the study's value over its preset file's
    assert stages["warmup"]["rl"]["reward"] == "chexpert_f1"
