"""Checks that need no model: names (reward, metrics, split) and input folders, run before anything heavy
loads or is built (stage 0, the phantom set), so a typo costs a second, not a model load."""

from __future__ import annotations

from pathlib import Path

from harness.config import ConfigError, RunConfig
from harness.models.checkpoint import check_base_folder

SPLITS = ("train", "val", "test")


def check_split(split: str, key: str = "split") -> None:
    if split not in SPLITS:
        raise ConfigError(f"{key} = {split!r} must be one of {', '.join(SPLITS)}")


def check_names(cfg: RunConfig, stage: str | None) -> None:
    """Registered names the config refers to (only the stages that use them)."""
    if stage == "rl":
        from rewards.registry import available_rewards

        names = available_rewards()
        if cfg.rl.reward not in names:
            raise ConfigError(f"'rl.reward' = {cfg.rl.reward!r} is not a registered reward; available: "
                              f"{', '.join(names)}")


def check_inputs(cfg: RunConfig, stage: str) -> None:
    """Input folders and files a stage reads: present and of the right kind, with errors naming the key."""
    d = cfg.data
    if d.annotation is not None and not Path(d.annotation).is_file():
        raise ConfigError(f"'data.annotation' = '{d.annotation}': file not found")
    if d.image_dir is not None and not Path(d.image_dir).is_dir():
        raise ConfigError(f"'data.image_dir' = '{d.image_dir}': folder not found")
    if cfg.init_from:
        check_stage_model(cfg.init_from, "init_from")
    elif cfg.model.path and Path(cfg.model.path).exists():
        check_base_folder(cfg.model.path, "model.path")
    if stage == "sft" and cfg.classifier.dir and not Path(cfg.classifier.dir).is_dir():
        raise ConfigError(f"'classifier.dir' = '{cfg.classifier.dir}': folder not found (the folder written by "
                          "`regbench classifier train`, e.g. RUN/classifier)")


def check_stage_model(path: str | Path, key: str) -> None:
    """A stage's model folder (spec.json + its weights in any checkpoint format), and the base folder its spec
    names."""
    from harness.models.checkpoint import ADAPTER_WEIGHTS, LEGACY_WEIGHTS, MERGER_WEIGHTS, SPEC, read_spec

    p = Path(path)
    if not p.is_dir():
        raise ConfigError(f"'{key}' = '{path}': folder not found (a stage's RUN/model folder)")
    spec_path = p / SPEC
    try:
        spec = read_spec(p)
    except (FileNotFoundError, ValueError) as e:
        raise ConfigError(f"'{key}' = '{path}': {e}") from e
    names = (ADAPTER_WEIGHTS, MERGER_WEIGHTS, LEGACY_WEIGHTS)
    if not any((p / name).is_file() for name in names):
        raise ConfigError(f"'{key}' = '{path}': no weights ({', '.join(names)}) in it; rerun the stage that wrote it")
    if Path(spec["base"]).exists():
        check_base_folder(spec["base"], f"{spec_path} base")
