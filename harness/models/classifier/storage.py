"""Saving a trained classifier (weights + config + thresholds) and loading it back frozen."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

from harness.constants import NUM_OBSERVATIONS, OBSERVATIONS
from harness.models.classifier.config import ClassifierConfig
from harness.models.classifier.model import WEIGHTS_FILE, build_classifier, freeze
from harness.runs.records import atomic_write_bytes, atomic_write_text

META_FILE = "classifier.json"
_FORMAT_VERSION = 1


def save_classifier(
    model: nn.Module, cfg: ClassifierConfig, thresholds: np.ndarray, out_dir: str | os.PathLike[str]
) -> Path:
    """Write `out_dir/classifier.safetensors` (weights) and `out_dir/classifier.json` (config + thresholds).

    The JSON is written last, so a directory with a JSON always has its weights. Returns `out_dir`.
    """
    # lazy: tests replace save at its source, read at call time
    from safetensors.torch import save

    thresholds = np.asarray(thresholds, dtype=np.float64)
    if thresholds.shape != (NUM_OBSERVATIONS,):
        raise ValueError(f"thresholds must have shape [{NUM_OBSERVATIONS}], got {thresholds.shape}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    atomic_write_bytes(out / WEIGHTS_FILE, save(state))
    meta = {
        "format_version": _FORMAT_VERSION,
        "config": cfg.to_dict(),
        "observations": list(OBSERVATIONS),
        "thresholds": [float(t) for t in thresholds],
    }
    # Not records.atomic_write_json: that one sorts the keys, and the file's bytes stay as they were.
    atomic_write_text(out / META_FILE, json.dumps(meta, indent=2) + "\n")
    return out


def read_classifier_meta(directory: str | os.PathLike[str]) -> tuple[ClassifierConfig, np.ndarray]:
    """(config, thresholds [14]) from `directory/classifier.json`, checked: the folder has both files, the JSON
    parses and holds the fields `save_classifier` writes. Errors name the file and the fix."""
    root = Path(directory)
    fix = "rerun `regbench classifier train` for that folder (or point to another classifier folder)"
    for name in (META_FILE, WEIGHTS_FILE):
        if not (root / name).is_file():
            raise FileNotFoundError(f"classifier directory {root} has no {name}; {fix}")
    path = root / META_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e}); the file is damaged: {fix}") from e
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict) or "thresholds" not in meta:
        raise ValueError(f"{path}: not a classifier description (an object with 'config', 'observations' and "
                         f"'thresholds'); {fix}")
    if list(meta.get("observations", [])) != list(OBSERVATIONS):
        raise ValueError(f"{path}: observation names/order differ from harness.constants.OBSERVATIONS; {fix}")
    try:
        cfg = ClassifierConfig.from_dict(meta["config"])
        thresholds = np.asarray(meta["thresholds"], dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}; {fix}") from e
    if thresholds.shape != (NUM_OBSERVATIONS,):
        raise ValueError(f"{path}: expected {NUM_OBSERVATIONS} thresholds, got {thresholds.shape}; {fix}")
    return cfg, thresholds


def load_classifier(
    directory: str | os.PathLike[str], device: str | torch.device = "cpu"
) -> tuple[nn.Module, ClassifierConfig, np.ndarray]:
    """Rebuild the classifier saved by `save_classifier`; returns (frozen model, config, thresholds [14])."""
    root = Path(directory)
    cfg, thresholds = read_classifier_meta(root)
    # The saved weights replace everything; do not reload (or require) the original pretrained checkpoint.
    model = build_classifier(dataclasses.replace(cfg, pretrained_path=None))
    model.load_state_dict(load_file(str(root / WEIGHTS_FILE)), strict=True)
    model.to(device)
    return freeze(model), cfg, thresholds
