"""Where a stage's model comes from: an earlier stage's checkpoint, or the base model of the preset."""

from __future__ import annotations

import os
from pathlib import Path

import torch

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


def model_device(cfg: RunConfig) -> torch.device:
    """The device of `model.device`; "auto" is this process's GPU when CUDA is available, else the CPU."""
    name = cfg.model.device
    if name == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"model.device = {name!r}, but CUDA is not available here (use auto or cpu)")
    return torch.device(name)


def load_for_stage(cfg: RunConfig, progress: bool = True):
    """(model, processor, base_path): from `init_from` if set, else the preset's base model; on `model.device`."""
    preset = get_preset(cfg.model.preset)
    attn = preset.attn_implementation
    device = model_device(cfg)
    if cfg.init_from:
        model, processor, spec = load_stage_model(cfg.init_from, cfg.model.dtype, cfg.model.image_size, attn)
        return model.to(device), processor, spec["base"]
    path = base_path(cfg, progress)
    model, processor = load_base(path, cfg.model.dtype, cfg.model.image_size, attn)
    return model.to(device), processor, path
