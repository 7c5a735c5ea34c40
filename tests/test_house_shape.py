"""benchmarks/house_shape.py refuses a folder that is not a checkout with one line, before reading anything."""

from __future__ import annotations

import sys

import pytest

from benchmarks import house_shape


def test_a_folder_without_the_code_is_refused_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["house_shape.py", "--repo", str(tmp_path)])
    with pytest.raises(SystemExit) as exc:
        house_shape.main()
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert str(tmp_path) in err and "not a regbench checkout (no harness/stages/rl.py)" in err
