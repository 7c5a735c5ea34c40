"""`regbench --help` and `--help` on every subcommand; bad input gives a clear error and exit code 2."""

from __future__ import annotations

import argparse

import pytest

from harness.cli import build_parser, main


def _subcommand_paths(parser: argparse.ArgumentParser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from _subcommand_paths(sub, (*prefix, name))


PATHS = list(_subcommand_paths(build_parser()))


def test_every_subcommand_is_listed():
    flat = {" ".join(p) for p in PATHS}
    for expected in ("data synth", "classifier train", "train", "eval", "demo", "experiment run", "report",
                     "analyze"):
        assert expected in flat, expected


@pytest.mark.parametrize("path", [(), *PATHS], ids=lambda p: " ".join(p) or "regbench")
def test_help(path, capsys):
    with pytest.raises(SystemExit) as e:
        main([*path, "--help"])
    assert e.value.code == 0
    assert "usage: regbench" in capsys.readouterr().out


def test_bad_override_is_a_clear_error(capsys, tmp_path):
    assert main(["train", "warmup", "train.lr=-1", f"out_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "'train.lr' = -1.0 must be > 0" in err
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_missing_config_file(capsys, tmp_path):
    assert main(["train", "sft", str(tmp_path / "nope.yaml")]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_sft_without_classifier_is_a_clear_error(capsys, tmp_path):
    assert main(["train", "sft", f"out_dir={tmp_path / 'x'}"]) == 2
    assert "classifier.dir" in capsys.readouterr().err


def test_eval_with_a_missing_model_folder(capsys, tmp_path):
    assert main(["eval", "--model", str(tmp_path / "nope"), "--no-progress", f"data.synth_dir={tmp_path}",
                 "data.synth_n=10"]) == 2
    err = capsys.readouterr().err
    assert "'--model'" in err and "nope': folder not found" in err


def test_data_synth_rejects_bad_sizes(capsys, tmp_path):
    assert main(["data", "synth", "--n", "0", "--out", str(tmp_path / "d")]) == 2
    assert "n" in capsys.readouterr().err
    assert not (tmp_path / "d" / "annotation.json").exists()


def test_options_may_sit_between_overrides(capsys, tmp_path):
    assert main(["train", "warmup", "--no-progress", "train.lr=-1", f"out_dir={tmp_path}"]) == 2
    assert "'train.lr' = -1.0 must be > 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "warmup", "train.lr=1", "--bogus"])
