"""harness/cli/report_commands.py: the `report` and `analyze` subcommands (the analysis:
tests/harness/stages/test_analyze.py)."""

from __future__ import annotations

import argparse

import pytest

from harness.cli.report_commands import add_parsers
from tests.reports.conftest import write_experiment


def _parser():
    parser = argparse.ArgumentParser(prog="regbench")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    return parser


def test_subcommands_parse():
    ns = _parser().parse_args(["report", "runs/x", "--out", "r", "--bootstrap", "500"])
    assert (ns.experiment_dir, ns.out, ns.bootstrap, ns.seed) == ("runs/x", "r", 500, 0)
    ns = _parser().parse_args(["analyze", "sign-alignment", "runs/x/rl", "--n-prompts", "5"])
    assert (ns.kind, ns.run, ns.n_prompts, ns.group_size, ns.device) == ("sign-alignment", "runs/x/rl", 5, 4, "auto")
    with pytest.raises(SystemExit):
        _parser().parse_args(["analyze", "nonsense", "runs/x"])


@pytest.fixture(scope="module")
def experiment_dir(tmp_path_factory):
    return write_experiment(tmp_path_factory.mktemp("experiment"))


def test_report_command(experiment_dir, tmp_path, capsys):
    ns = _parser().parse_args(["report", str(experiment_dir), "--out", str(tmp_path / "rep"), "--bootstrap", "200"])
    assert ns.func(ns) == 0
    assert (tmp_path / "rep" / "index.html").is_file()
    assert "index.html" in capsys.readouterr().out
