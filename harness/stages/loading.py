"""Where a stage's model comes from: an earlier stage's checkpoint, or the base model of the preset."""

from __future__ import annotations

from pathlib import Path

from harness.config import RunConfig
from harness.models.checkpoint import load_base, load_stage_model
from harness.models.presets import get_preset


def base_path(cfg: RunConfig, progress: bool = True) -> Path | str:
    preset = get_preset(cfg.model.preset)
    if cfg.model.path:
        return cfg.model.path
    if preset.name == "tiny":
        from harness.stages.pretrain import pretrain_tiny_base

        return pretrain_tiny_base(cfg, progress=progress)
    return preset.default_path


def load_for_stage(cfg: RunConfig, progress: bool = True):
    """(model, processor, base_path): from `init_from` if set, else the preset's base model."""
    preset = get_preset(cfg.model.preset)
    attn = preset.attn_implementation
    if cfg.init_from:
        model, processor, spec = load_stage_model(cfg.init_from, cfg.model.dtype, cfg.model.image_size, attn)
        return model, processor, spec["base"]
    path = base_path(cfg, progress)
    model, processor = load_base(path, cfg.model.dtype, cfg.model.image_size, attn)
    return model, processor, path
