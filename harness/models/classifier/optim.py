"""The classifier's optimizer: AdamW, optionally with the official layer-wise learning-rate decay and warm-up cosine.

Layer-wise decay (ELECTRA, BEiT; MAE's fine-tuning): the official REVA-PO classifier (reva_po/utils/lr_decay.py
`param_groups_lrd`, called with layer_decay 0.55 in reva_po/runners/runner_base.py for both data sets) numbers the
ViT's parameters by depth (patch_embed, cls_token, pos_embed: 0; block i: i + 1; everything else, i.e. fc_norm /
norm and the head: depth) and scales the learning rate of layer l by decay ** (depth + 1 - l). Parameters with one
dimension and the model's `no_weight_decay()` names (timm: pos_embed, cls_token, dist_token) get no weight decay.
timm's `param_groups_layer_decay` groups and scales every parameter the same way except fc_norm and the head,
which it puts in a layer of their own at scale 1 where the official has them with the last block at the decay
(0.55); tests/harness/models/test_classifier_recipe.py proves that relation, so the official grouping is written
out here.

Warm-up cosine: the official classifier's DeepSpeed json (train_configs/stage2_cls/zero_*_stage2_cls.json) sets
WarmupCosineLR (linear warm-up from 0, cos_min_ratio floor), which the DeepSpeed engine steps after every optimizer
step; update k (from 0) runs at DeepSpeed's ratio of iteration k - 1, and the scheduler's construction sets the
learning rate 0 for the first update. `warmup_cosine_factor` is that curve (the test compares it with DeepSpeed's
class); transformers' get_cosine_with_min_lr_schedule_with_warmup is one step ahead during the warm-up.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from harness.models.classifier.config import ClassifierConfig

# Each group's learning rate before the schedule (the schedule multiplies it).
BASE_LR = "base_lr"


def official_layer_id(name: str, depth: int) -> int:
    """The layer of a ViT parameter in the official grouping: 0 for the embeddings, i + 1 for block i, `depth`
    for the rest (final norm, fc_norm, head)."""
    if name in ("cls_token", "pos_embed") or name.startswith("patch_embed"):
        return 0
    if name.startswith("blocks."):
        return int(name.split(".")[1]) + 1
    return depth


def layer_decay_param_groups(model: nn.Module, lr: float, weight_decay: float, layer_decay: float) -> list[dict]:
    """AdamW parameter groups as the official `param_groups_lrd` builds them: one group per (layer, decay or
    not), with "lr" = lr x scale, "lr_scale" and "weight_decay"; groups in the order of their first parameter."""
    blocks = getattr(model, "blocks", None)
    if blocks is None:
        raise ValueError(f"classifier.layer_decay needs a ViT (blocks.N), not {type(model).__name__}: set it to "
                         "null")
    depth = len(blocks)
    no_decay = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    groups: dict[str, dict] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        decay = param.ndim > 1 and name not in no_decay
        layer = official_layer_id(name, depth)
        key = f"layer_{layer}_{'decay' if decay else 'no_decay'}"
        if key not in groups:
            scale = layer_decay ** (depth + 1 - layer)
            groups[key] = {"params": [], "lr": lr * scale, "lr_scale": scale,
                           "weight_decay": weight_decay if decay else 0.0, "name": key}
        groups[key]["params"].append(param)
    return list(groups.values())


def build_optimizer(model: nn.Module, cfg: ClassifierConfig) -> torch.optim.AdamW:
    """AdamW(beta1 0.9, beta2 cfg.adam_beta2): one group with weight decay on every trainable parameter when
    cfg.layer_decay is None (this project's), else the official layer-decay groups. Each group keeps its
    pre-schedule learning rate under BASE_LR."""
    if cfg.layer_decay is None:
        params: list = [p for p in model.parameters() if p.requires_grad]
    else:
        params = layer_decay_param_groups(model, cfg.lr, cfg.weight_decay, cfg.layer_decay)
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, cfg.adam_beta2), weight_decay=cfg.weight_decay)
    for group in optimizer.param_groups:
        group[BASE_LR] = group["lr"]
    return optimizer


def warmup_cosine_factor(update: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """The learning-rate factor of optimizer update `update` (0-based) under DeepSpeed's WarmupCosineLR
    (warmup_type linear, warmup_min_ratio 0) stepped after each update: update 0 at 0 (the scheduler's initial
    value), update k at the ratio of iteration k - 1: (k - 1) / W in the warm-up, then
    min + (1 - min) (1 + cos(pi min(1, (k - W) / (T - W)))) / 2. DeepSpeed uses W = max(2, warmup_steps)."""
    if update <= 0:
        return 0.0
    it = update - 1
    warmup = max(2, warmup_steps)
    if it < warmup:
        return it / warmup
    progress = min(1.0, (it - warmup + 1) / max(1, total_steps - warmup))
    return max(0.0, min_ratio + (1.0 - min_ratio) * (1 + math.cos(math.pi * progress)) / 2)


def set_learning_rates(optimizer: torch.optim.Optimizer, cfg: ClassifierConfig, update: int,
                       total_updates: int) -> None:
    """Before optimizer update `update`: each group's BASE_LR times the schedule's factor (nothing for
    "constant"). total_updates: the run's optimizer steps, the cosine's end unless cfg.schedule_steps is set."""
    if cfg.scheduler == "constant":
        return
    total = cfg.schedule_steps if cfg.schedule_steps is not None else total_updates
    factor = warmup_cosine_factor(update, cfg.warmup_steps, total, cfg.min_lr_ratio)
    for group in optimizer.param_groups:
        group["lr"] = group[BASE_LR] * factor
