"""Building the timm ViT, loading a local pretrained backbone into it, and freezing it."""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.constants import NUM_OBSERVATIONS
from harness.models.classifier.config import TINY_ARCH, TINY_CNN_ARCH, TINY_VIT_KWARGS, ClassifierConfig

# The package's name, so log records keep the logger name they had before the module was split.
logger = logging.getLogger(__package__)
# The weights file of a classifier folder (storage.py: save_classifier writes it).
WEIGHTS_FILE = "classifier.safetensors"

def build_classifier(cfg: ClassifierConfig) -> nn.Module:
    """A timm ViT with 14 logits, randomly initialised from `cfg.seed`, then `cfg.pretrained_path` if set.

    The global RNG is left untouched (the seed is applied inside a forked RNG state).
    """
    import timm
    from timm.models.vision_transformer import VisionTransformer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        if cfg.arch == TINY_ARCH:
            model: nn.Module = VisionTransformer(
                img_size=cfg.img_size, num_classes=NUM_OBSERVATIONS, global_pool=cfg.global_pool,
                drop_path_rate=cfg.drop_path, **TINY_VIT_KWARGS,
            )
        elif cfg.arch == TINY_CNN_ARCH:
            from harness.models.classifier.tiny_cnn import TinyCNN

            if cfg.drop_path:
                raise ValueError(f"classifier.drop_path = {cfg.drop_path}: the tiny CNN has no blocks to drop; "
                                 "set it to 0")
            model = TinyCNN(NUM_OBSERVATIONS)
        else:
            # pretrained=False always: weights only ever come from a local file.
            model = timm.create_model(
                cfg.arch, pretrained=False, num_classes=NUM_OBSERVATIONS, img_size=cfg.img_size,
                global_pool=cfg.global_pool, **({"drop_path_rate": cfg.drop_path} if cfg.drop_path else {}),
            )
    if cfg.pretrained_path and cfg.pretrained_format == "medical_mae":
        from harness.models.classifier.medical_mae import load_medical_mae

        load_medical_mae(model, cfg.pretrained_path)
    elif cfg.pretrained_path:
        load_pretrained(model, cfg.pretrained_path)
    return model


def read_state_dict(path: str | os.PathLike[str], key: str = "classifier.pretrained_path",
                    allow_namespace: bool = False) -> dict[str, torch.Tensor]:
    """The tensors of a local checkpoint (safetensors, or a torch file read with weights_only=True: a pickled
    object is refused, never executed), or of a classifier folder written by `regbench classifier train` (its
    classifier.safetensors: IU-Xray's classifier starts from MIMIC-CXR's, study field `upstream`); errors name
    `key`, the file and the fix. `allow_namespace`: an argparse.Namespace may sit beside the tensors (MAE /
    Medical-MAE save their command line as "args")."""
    path = Path(path)
    if path.is_dir() and (path / WEIGHTS_FILE).is_file():
        path = path / WEIGHTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"'{key}' = '{path}': file not found")
    fix = ("save the backbone as safetensors (safetensors.torch.save_file(model.state_dict(), 'x.safetensors')) or "
           "as a plain state dict of tensors (torch.save(model.state_dict(), 'x.pth'))")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state: Any = load_file(str(path))
        else:
            import argparse

            with torch.serialization.safe_globals([argparse.Namespace] if allow_namespace else []):
                state = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:  # torch's own text would suggest weights_only=False: not shown
        raise ValueError(f"'{key}' = '{path}': the file holds pickled Python objects besides tensors, which are "
                         f"never loaded (they could run code); {fix}") from e
    except Exception as e:  # noqa: BLE001 - safetensors and torch raise many types for a damaged file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"'{key}' = '{path}': not a readable checkpoint ({type(e).__name__}: {first[:160]}); "
                         f"{fix}") from e
    # MAE-style checkpoints wrap the weights ({"model": ...}); Lightning/others use "state_dict".
    for wrapper in ("model", "state_dict", "module"):
        if isinstance(state, dict) and wrapper in state and isinstance(state[wrapper], dict):
            state = state[wrapper]
            break
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"'{key}' = '{path}': does not hold a state dict of tensors; {fix}")
    # DDP / torch.compile prefixes.
    out = {}
    for name, value in state.items():
        for prefix in ("module.", "_orig_mod."):
            if name.startswith(prefix):
                name = name[len(prefix):]
        out[name] = value
    return out


def _is_head_key(key: str) -> bool:
    return key.startswith("head.") or key.startswith("head_drop.")


def load_pretrained(model: nn.Module, path: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Load a local timm state dict into `model` non-strictly and return what matched.

    The classification head is skipped when its shape differs (e.g. a 1000-class ImageNet head); the position
    embedding is resampled when the checkpoint was trained at another resolution. Any other shape mismatch
    is an error. Missing and unexpected keys are logged. If nothing but the head would be loaded, the
    checkpoint is certainly not a backbone for this architecture, and a ValueError is raised.
    Returns {"loaded", "missing", "unexpected", "skipped"} key lists.
    """
    state = read_state_dict(path)
    own = model.state_dict()
    loadable: dict[str, torch.Tensor] = {}
    skipped: list[str] = []
    mismatched: list[str] = []
    for key, value in state.items():
        if key not in own:
            continue
        target = own[key]
        if value.shape == target.shape:
            loadable[key] = value
        elif key == "pos_embed" and value.ndim == 3:
            from timm.layers import resample_abs_pos_embed

            prefix = int(getattr(model, "num_prefix_tokens", 1))
            grid = getattr(getattr(model, "patch_embed", None), "grid_size", None)
            if grid is None:
                mismatched.append(f"{key}: {tuple(value.shape)} vs {tuple(target.shape)}")
                continue
            loadable[key] = resample_abs_pos_embed(value, new_size=list(grid), num_prefix_tokens=prefix)
        elif _is_head_key(key):
            skipped.append(key)  # a head for other classes: train ours from scratch
        else:
            mismatched.append(f"{key}: {tuple(value.shape)} vs {tuple(target.shape)}")
    if mismatched:
        raise ValueError(f"{path}: shape mismatch with the {type(model).__name__} built from the config: "
                         + "; ".join(mismatched))
    if not any(not _is_head_key(k) for k in loadable):
        raise ValueError(f"{path}: no backbone weight matches the model (only the head or nothing); "
                         "is it a checkpoint for this architecture?")
    result = model.load_state_dict(loadable, strict=False)
    report = {
        "loaded": sorted(loadable),
        "missing": sorted(result.missing_keys),
        "unexpected": sorted(k for k in state if k not in own),
        "skipped": sorted(skipped),
    }
    logger.info("classifier: loaded %d tensors from %s", len(report["loaded"]), path)
    if report["missing"]:
        logger.warning("classifier: %d keys not in %s (initialised randomly): %s", len(report["missing"]),
                       path, report["missing"])
    if report["unexpected"]:
        logger.warning("classifier: %d keys of %s ignored: %s", len(report["unexpected"]), path,
                       report["unexpected"])
    if report["skipped"]:
        logger.info("classifier: head of %s skipped (shape differs): %s", path, report["skipped"])
    return report


def freeze(model: nn.Module) -> nn.Module:
    """No gradients, eval mode: the classifier stays frozen in stages 2 and 3 (Supp. D.2)."""
    for param in model.parameters():
        param.requires_grad_(False)
    return model.eval()
