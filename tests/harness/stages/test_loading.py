"""Stage 0 is a step of its own: loading only finds the tiny base, building it is build_base's job."""

from __future__ import annotations

import pytest

import harness.stages.pretrain as pretrain
from harness.config import load_config
from harness.experiments import DEFAULT_FUNCTIONS
from harness.stages import paths
from harness.stages.loading import base_path
from tests.tiny_sizes import TINY


@pytest.fixture
def no_build(monkeypatch):
    """A stage-0 build would fail the test (and take minutes): loading must never start one."""
    def refuse(*args, **kwargs):
        raise AssertionError("stage 0 was built as a side effect")
    monkeypatch.setattr(pretrain, "_build_tiny_base", refuse)


def _cfg(tmp_path, *extra):
    return load_config(None, [*TINY, f"cache_dir={tmp_path / 'cache'}", *extra])


def test_loading_an_unbuilt_tiny_base_says_how_to_build_it(tmp_path, no_build):
    cfg = _cfg(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        base_path(cfg)
    message = str(err.value)
    assert str(pretrain.base_dir(cfg)) in message and "regbench train pretrain" in message
    assert not (tmp_path / "cache").exists()  # nothing was built or locked


def test_a_built_base_is_found_and_build_base_reuses_it(tmp_path, no_build, capsys, monkeypatch):
    cfg = _cfg(tmp_path)
    built = pretrain.base_dir(cfg)
    built.mkdir(parents=True)
    (built / "DONE").write_text(pretrain.pretrain_key(cfg) + "\n")
    assert base_path(cfg) == built
    assert pretrain.build_base(cfg, progress=False) == built
    assert "[stage 0] tiny base model: cached in" in capsys.readouterr().out
    # another run seed shares the base; another stage-0 seed is another stage 0, still unbuilt
    assert base_path(_cfg(tmp_path, "seed=7")) == built
    monkeypatch.setattr(paths, "STAGE0_SEED", 7)
    with pytest.raises(FileNotFoundError, match="regbench train pretrain"):
        base_path(_cfg(tmp_path))


def test_a_model_path_or_a_real_preset_needs_no_stage_0(tmp_path, no_build):
    assert str(base_path(_cfg(tmp_path, f"model.path={tmp_path / 'm'}"))) == str(tmp_path / "m")
    assert not paths.uses_tiny_base(_cfg(tmp_path, f"model.path={tmp_path / 'm'}"))
    assert paths.uses_tiny_base(_cfg(tmp_path))


def test_the_runner_builds_stage_0_as_its_own_node():
    assert DEFAULT_FUNCTIONS["pretrain"] == "harness.stages.pretrain:build_base"


def test_a_stage_that_builds_stage_0_first_starts_from_the_same_rngs_as_one_that_finds_it(tmp_path, monkeypatch):
    """`regbench train warmup` on an empty cache builds stage 0 before the stage is seeded, so the stage draws
    the same random numbers as it does with the base cached (before: stage 0's training ran after the stage's
    seed_everything and left the global RNGs where its own training ended)."""
    import numpy as np
    import torch

    import harness.stages.loading as loading
    from harness.cli import main

    seen = []

    def probe(cfg, progress=True):  # the model load: record the RNGs the stage starts from, then stop
        seen.append((torch.get_rng_state(), np.random.get_state()[1].copy()))
        raise RuntimeError("probe: stop before the model loads")

    monkeypatch.setattr(loading, "load_for_stage", probe)
    common = [*TINY, f"data.synth_dir={tmp_path / 'data'}"]
    assert main(["train", "warmup", *common, f"cache_dir={tmp_path / 'fresh'}", f"out_dir={tmp_path / 'a'}",
                 "--no-progress"]) == 2  # builds stage 0 first, then stops at the probe
    assert (paths.base_dir(_cfg(tmp_path / "x", f"cache_dir={tmp_path / 'fresh'}")) / "DONE").is_file()
    assert main(["train", "warmup", *common, f"cache_dir={tmp_path / 'fresh'}", f"out_dir={tmp_path / 'b'}",
                 "--no-progress"]) == 2  # the base is cached now
    (torch_a, np_a), (torch_b, np_b) = seen
    assert torch.equal(torch_a, torch_b) and (np_a == np_b).all()
