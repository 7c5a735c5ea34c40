"""Building the timm ViT, loading a local pretrained backbone into it, and freezing it."""

from __future__ import annotations

import logging
import os

import torch
from torch import nn

from harness.constants import NUM_OBSERVATIONS
from harness.models.classifier.checkpoint_file import WEIGHTS_FILE, read_state_dict  # noqa: F401 - re-exported
from harness.models.classifier.config import TINY_ARCH, TINY_CNN_ARCH, TINY_VIT_KWARGS, ClassifierConfig
from harness.models.classifier.medical_mae import load_medical_mae
from harness.models.classifier.tiny_cnn import TinyCNN

# The package's name, so log records keep the logger name they had before the module was split.
logger = logging.getLogger(__package__)

def build_classifier(cfg: ClassifierConfig) -> nn.Module:
    """A timm ViT with 14 logits, randomly initialised from `cfg.seed`, then `cfg.pretrained_path` if set.

    The global RNG is left untouched (the seed is applied inside a forked RNG state).
    """
    # lazy: start-up cost (timm)
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
        load_medical_mae(model, cfg.pretrained_path)
    elif cfg.pretrained_path:
        load_pretrained(model, cfg.pretrained_path)
    return model


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
            # lazy: start-up cost (timm)
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
