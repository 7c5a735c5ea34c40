"""Checks that need no model: names (reward, metrics, split) and input folders, run before anything heavy
loads or is built (stage 0, the phantom set), so a typo costs a second, not a model load."""

from __future__ import annotations

import json
from pathlib import Path

from harness.config import ConfigError, RunConfig

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


def check_base_folder(path: str | Path, key: str) -> None:
    """A Hugging Face model folder: config.json and weights (safetensors or .bin, single or sharded)."""
    p = Path(path)
    if not p.is_dir():
        raise ConfigError(f"'{key}' = '{path}' is not a folder")
    if not (p / "config.json").is_file():
        raise ConfigError(f"'{key}' = '{path}': not a model folder (config.json missing)")
    weights = [*p.glob("*.safetensors"), *p.glob("pytorch_model*.bin"), *p.glob("*.safetensors.index.json")]
    if not weights:
        raise ConfigError(f"'{key}' = '{path}': no weights in the folder (*.safetensors or pytorch_model*.bin); "
                          "was the download or copy complete?")


def check_stage_model(path: str | Path, key: str) -> None:
    """A stage's model folder (spec.json + its weights), and the base folder its spec names."""
    from harness.models.checkpoint import ADAPTER_WEIGHTS, LEGACY_WEIGHTS, MERGER_WEIGHTS, SPEC

    p = Path(path)
    if not p.is_dir():
        raise ConfigError(f"'{key}' = '{path}': folder not found (a stage's RUN/model folder)")
    spec_path = p / SPEC
    if not spec_path.is_file():
        raise ConfigError(f"'{key}' = '{path}': not a stage checkpoint ({SPEC} missing)")
    try:
        spec = json.loads(spec_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"{spec_path}: not valid JSON ({e}); rerun the stage that wrote it") from e
    if not isinstance(spec, dict) or not isinstance(spec.get("base"), str):
        raise ConfigError(f"{spec_path}: needs a 'base' entry naming the base model folder; rerun the stage that "
                          "wrote it")
    # Any of the stage formats (harness/models/checkpoint.py): peft adapter, warm-up merger, or the legacy file.
    if not any((p / w).is_file() for w in (ADAPTER_WEIGHTS, MERGER_WEIGHTS, LEGACY_WEIGHTS)):
        raise ConfigError(f"'{key}' = '{path}': weights missing ({ADAPTER_WEIGHTS}, {MERGER_WEIGHTS} or "
                          f"{LEGACY_WEIGHTS}); rerun the stage that wrote it")
    if Path(spec["base"]).exists():
        check_base_folder(spec["base"], f"{spec_path} base")
