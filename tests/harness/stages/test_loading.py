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
