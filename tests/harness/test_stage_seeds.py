"""Study field `stage_seeds`: the listed stages run with one seed for every study seed, so the seeds share them."""

from __future__ import annotations

import pytest

from harness.config import ConfigError
from harness.experiments import build_plan, load_study
from tests.harness.test_experiments import ARMS, write_study


def test_stage_seeds_share_the_listed_stages_across_seeds(tmp_path):
    study = load_study(write_study(tmp_path, ARMS, seeds="[0, 1, 2]",
                                   extra="stage_seeds: {warmup: 0, classifier: 0, sft: 0}\n"))
    plan = build_plan(study, tmp_path / "out")
    runs = [plan.runs["a", s] for s in (0, 1, 2)]
    for stage in ("warmup", "classifier", "sft"):
        assert len({r.stages[stage] for r in runs}) == 1
        node = plan.nodes[runs[0].stages[stage]]
        assert node.config["seed"] == 0 and node.run_dir.name.startswith(f"{stage}-seed0-")
    rl = [plan.nodes[r.stages["rl"]] for r in runs]
    assert len({n.id for n in rl}) == 3 and [n.config["seed"] for n in rl] == [0, 1, 2]
    # Every RL seed starts from the one shared SFT model.
    assert len({n.config["init_from"] for n in rl}) == 1
    # Without the field every seed has its own SFT.
    plain = build_plan(load_study(write_study(tmp_path, ARMS, seeds="[0, 1, 2]")), tmp_path / "out")
    assert len({plain.runs["a", s].stages["sft"] for s in (0, 1, 2)}) == 3


@pytest.mark.parametrize("bad", ["{sft: zero}", "{rlx: 0}", "[sft]", "{sft: true}"])
def test_bad_stage_seeds_are_named(tmp_path, bad):
    with pytest.raises(ConfigError, match="'stage_seeds' must map stages"):
        load_study(write_study(tmp_path, ARMS, extra=f"stage_seeds: {bad}\n"))
