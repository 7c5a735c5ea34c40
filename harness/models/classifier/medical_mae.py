"""Loading a Medical-MAE checkpoint (Xiao et al., WACV 2023, github.com/lambert-x/medical_mae) into the timm ViT.

The official REVA-PO classifier (reva_po/models/med_visual_encoder.py `build_vit_b_CXR_mae_CheXpert`) builds timm's
`vit_base_patch16_224` (global_pool "avg", 14 classes, drop_path_rate 0.2), reads `vit-b_CXR_0.5M_mae_CheXpert.pth`,
takes its "model" entry, deletes the head, resamples the position embedding to the model's grid and loads the rest
non-strictly. Medical-MAE saves its ViTs as timm modules (models_vit.py subclasses timm's VisionTransformer; its
MAE pre-training keeps the same encoder names), so the names map one to one:

- loaded: cls_token, pos_embed (resampled when the grid differs), patch_embed.proj.*, blocks.N.*, and fc_norm.*
  (a fine-tuned, average-pooled checkpoint) or norm.* (a checkpoint of a CLS-token model, into a CLS-token model);
- dropped: head.* (the model's own head for the 14 labels stays at its seeded initialisation, as in the official
  code), the MAE decoder (mask_token, decoder_*), and norm.* when the model pools by average (timm's avg-pool ViT
  has no final norm; the official load ignores it the same way, and fc_norm then keeps its initialisation);
- refused: a checkpoint that lacks any other tensor of the model, or holds a tensor of neither kind (another
  architecture or layout): the error names the file and the keys.

The wrapper dict's other entries (optimizer, epoch, scaler, args) are skipped; `args` is an argparse.Namespace,
which the loader allows (it only sets attributes); nothing else beyond tensors is unpickled.
"""

from __future__ import annotations

import logging
import os
import re

import torch
from torch import nn

from harness.models.classifier.checkpoint_file import read_state_dict

logger = logging.getLogger(__package__)

# Keys of an MAE pre-training checkpoint that belong to the decoder (Medical-MAE models_mae.py, as MAE's).
_MAE_ONLY = re.compile(r"^(mask_token|decoder_\w+)(\.|$)")
_HEAD = re.compile(r"^head\.")


def _shown(keys: list[str], n: int = 8) -> str:
    return ", ".join(keys[:n]) + (f" and {len(keys) - n} more" if len(keys) > n else "")


def medical_mae_state(model: nn.Module, state: dict[str, torch.Tensor], path: str | os.PathLike[str]
                      ) -> tuple[dict[str, torch.Tensor], dict[str, list[str]]]:
    """The tensors of a Medical-MAE checkpoint's "model" dict renamed and resampled for `model` (a timm ViT), and
    a report {"loaded", "dropped", "initialised"}; ValueError naming `path` for any other layout."""
    # lazy: start-up cost (timm)
    from timm.models.vision_transformer import VisionTransformer, checkpoint_filter_fn

    if not isinstance(model, VisionTransformer):
        raise ValueError(f"classifier.pretrained_format = medical_mae needs a timm ViT (e.g. vit_base_patch16_224), "
                         f"not {type(model).__name__}")
    own = model.state_dict()
    avg_pool = isinstance(model.norm, nn.Identity)  # timm's avg-pool ViT: fc_norm instead of norm
    kept: dict[str, torch.Tensor] = {}
    dropped: list[str] = []
    for key, value in state.items():
        if _HEAD.match(key) or _MAE_ONLY.match(key) or (avg_pool and key.startswith("norm.")):
            dropped.append(key)
        else:
            kept[key] = value
    unknown = sorted(k for k in kept if k not in own)
    if unknown:
        raise ValueError(f"classifier.pretrained_path = '{path}' (format medical_mae): {len(unknown)} tensors are "
                         f"not in the {type(model).__name__} built from the config: {_shown(unknown)}; is it a "
                         "Medical-MAE checkpoint of this ViT size?")
    # timm's own conversion for the position embedding (bicubic, as the official interpolate_pos_embed; no
    # antialiasing, which it does not apply either) and a patch embedding of another patch size.
    kept = checkpoint_filter_fn(kept, model, antialias=False)
    # What the model may start without: its head (always re-initialised) and, from a pre-training checkpoint
    # (norm.* instead of fc_norm.*), the average-pool norm.
    optional = {k for k in own if _HEAD.match(k)}
    if avg_pool and not any(k.startswith("fc_norm.") for k in kept):
        optional |= {k for k in own if k.startswith("fc_norm.")}
    missing = sorted(k for k in own if k not in kept and k not in optional)
    if missing:
        raise ValueError(f"classifier.pretrained_path = '{path}' (format medical_mae): the checkpoint lacks "
                         f"{len(missing)} tensors of the model: {_shown(missing)}")
    wrong = [f"{k}: {tuple(v.shape)} vs {tuple(own[k].shape)}" for k, v in kept.items() if v.shape != own[k].shape]
    if wrong:
        raise ValueError(f"classifier.pretrained_path = '{path}' (format medical_mae): shapes differ from the model "
                         f"built from the config: {_shown(wrong, 4)}")
    report = {"loaded": sorted(kept), "dropped": sorted(dropped),
              "initialised": sorted(k for k in own if k not in kept)}
    return kept, report


def load_medical_mae(model: nn.Module, path: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Load a Medical-MAE checkpoint file into `model` (see the module doc); returns the report of
    `medical_mae_state`. Every tensor of the model except the reported "initialised" ones comes from the file."""
    state = read_state_dict(path, allow_namespace=True)
    kept, report = medical_mae_state(model, state, path)
    result = model.load_state_dict(kept, strict=False)
    assert not result.unexpected_keys and sorted(result.missing_keys) == report["initialised"]
    logger.info("classifier: %d tensors from the Medical-MAE checkpoint %s; dropped %s; initialised fresh %s",
                len(report["loaded"]), path, report["dropped"] or "none", report["initialised"])
    return report
