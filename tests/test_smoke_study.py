"""The smoke study (experiments/smoke.yaml on experiments/presets/smoke.yaml), the README's five-minute tour, runs
end to end as the README says: data, stage 0, warm-up, classifier, SFT, two RL arms, test evaluation, report."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.experiments.study import load_study
from harness.runs.records import read_json
from tests.tiny_sizes import TINY

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "experiments" / "smoke.yaml"
PRESET = ROOT / "experiments" / "presets" / "smoke.yaml"


def test_the_smoke_preset_holds_the_tests_sizes_and_the_study_resolves():
    # tests/tiny_sizes.py reads the preset's `common`: the 16 size overrides and nothing else.
    assert len(TINY) == 16 and "model.tiny_text_hidden=32" in TINY and "data.synth_n=40" in TINY
    study = load_study(STUDY)
    assert (study.name, study.preset, [a.name for a in study.arms]) == ("smoke", "smoke", ["ckl", "rer_vapr"])
    assert study.common["data"]["synth_n"] == 40 and study.stages["rl"]["train"]["max_steps"] == 2


def test_the_readme_shows_the_smoke_study_in_full():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", readme, flags=re.DOTALL)
    shown = [b for b in blocks if b.startswith("# experiments/smoke.yaml\n")]
    assert len(shown) == 1, "the README shows experiments/smoke.yaml in one ```yaml block"
    assert yaml.safe_load(shown[0]) == yaml.safe_load(STUDY.read_text())


@pytest.mark.slow  # 163 s at load average 10-15 on 2 cores, 61 s of CPU (docs/measurements.md)
def test_the_smoke_study_runs_end_to_end_and_reports(tmp_path, capsys):
    out = tmp_path / "smoke"
    assert main(["experiment", "run", str(STUDY), "--workers", "2", "--out", str(out)]) == 0
    index = read_json(out / "index.json")
    assert index["summary"]["complete"] == 2 and index["study"] == "smoke" and index["preset"] == "smoke"
    ckl, rer = sorted(index["runs"], key=lambda r: r["arm"])
    assert ckl["stages"]["sft"]["dir"] == rer["stages"]["sft"]["dir"]  # one SFT model, two RL arms
    assert read_json(out / ckl["dir"] / "rl" / "metrics.json")["regularizer"] == "constant"
    assert read_json(out / rer["dir"] / "rl" / "metrics.json")["regularizer"] == "rer"
    for r in (ckl, rer):
        assert read_json(out / r["metrics"])["n"] == 6
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    assert (out / "report" / "index.html").is_file()
