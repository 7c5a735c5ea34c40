"""Training schedules shared by every training loop (warm-up, SFT, classifier-free stages and the RL engine):
the learning-rate schedule and the seeded order of each epoch's samples. Below the stages and the engine, so
neither imports the other for them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from harness.config import TrainConfig
from harness.config.names import COSINE_SCHEDULERS, DEEPSPEED_WARMUP_TYPES, SCHEDULERS, WARMUP_TYPES  # noqa: F401


def make_scheduler(optimizer, cfg: TrainConfig, total_steps: int):
    """A LambdaLR whose factor at optimizer update k (0-based; the loops read the lr, step, then call
    `scheduler.step()`) is `lr_factor(k, cfg, total_steps)`: the warm-up of `cfg.warmup_type` over
    `cfg.warmup_steps`, then cosine / constant by `cfg.scheduler`."""
    if cfg.warmup_type in DEEPSPEED_WARMUP_TYPES and cfg.warmup_steps < 1:
        raise ValueError(f"train.warmup_type={cfg.warmup_type} needs train.warmup_steps >= 1 "
                         f"(DeepSpeed's warmup_num_steps), got {cfg.warmup_steps}")
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, cfg, total_steps))


def lr_factor(step: int, cfg: TrainConfig, total_steps: int) -> float:
    """The multiple of `cfg.lr` that optimizer update `step` (0-based) takes.

    "project" / "transformers" warm-up: updates 0..W-1 ramp ((k+1)/W, or k/W as transformers'
    get_*_schedule_with_warmup), update W on is the schedule proper. "linear" / "log": DeepSpeed's WarmupLR /
    WarmupCosineLR as the DeepSpeed engine drives them (the official code): the scheduler is built at index -1 and
    stepped after every update, so update k takes DeepSpeed's value at index k - 1."""
    horizon = total_steps if cfg.cosine_total_steps is None else cfg.cosine_total_steps
    if cfg.warmup_type in DEEPSPEED_WARMUP_TYPES:
        return _deepspeed_ratio(step - 1, cfg, horizon)
    warm = max(0, cfg.warmup_steps)
    if warm and step < warm:
        ramp = (step + 1) / warm if cfg.warmup_type == "project" else step / warm
        return cfg.warmup_min_ratio + (1.0 - cfg.warmup_min_ratio) * ramp
    if cfg.scheduler in COSINE_SCHEDULERS:
        span = max(1, horizon - warm)
        cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warm) / span)))
        return cosine if cfg.scheduler == "cosine" else max(0.0, cfg.cos_min_ratio + (1.0 - cfg.cos_min_ratio) * cosine)
    return 1.0


def _deepspeed_ratio(index: int, cfg: TrainConfig, horizon: int) -> float:
    """DeepSpeed's (deepspeed.runtime.lr_schedules) multiple of the peak at scheduler index `index`: WarmupCosineLR
    for the cosine schedules, WarmupLR for the constant ones (warmup_min_lr = warmup_min_ratio x lr)."""
    cosine = cfg.scheduler in COSINE_SCHEDULERS
    wmr = cfg.warmup_min_ratio
    if index < 0:  # before the first step() DeepSpeed sets WarmupCosineLR's lr to 0, WarmupLR's to its minimum
        return 0.0 if cosine else wmr
    warm = max(2, cfg.warmup_steps)  # DeepSpeed's own floor on warmup_num_steps
    if index < warm:
        ramp = index / warm if cfg.warmup_type == "linear" else math.log(index + 1) / math.log(warm)
        return wmr + ramp * (1.0 - wmr)
    if not cosine:
        return 1.0
    progress = min(1.0, (index - warm + 1) / max(1, horizon - warm))
    return max(0.0, cfg.cos_min_ratio + (1.0 - cfg.cos_min_ratio) * (1.0 + math.cos(math.pi * progress)) / 2)


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """A permutation of range(n) fixed by (seed, epoch): a resumed run visits the samples an uninterrupted one does."""
    return torch.randperm(n, generator=_epoch_generator(seed, epoch)).tolist()


def length_grouped_order(lengths: Sequence[int], batch_size: int, seed: int, epoch: int) -> list[int]:
    """A permutation of range(len(lengths)) fixed by (seed, epoch) whose consecutive `batch_size` slices hold
    samples of similar length: transformers' `get_length_grouped_indices` (the Trainer's `group_by_length`: a
    random permutation cut into mega-batches of up to 50 batches, each sorted by length, the longest sample
    first), drawn from the generator `epoch_order` uses. Less padding per batch, so less arithmetic on pads."""
    # lazy: start-up cost (transformers)
    from transformers.trainer_pt_utils import get_length_grouped_indices

    if batch_size < 1:
        raise ValueError(f"batch_size = {batch_size}: must be >= 1")
    if not len(lengths):
        return []
    order = get_length_grouped_indices(list(lengths), batch_size, generator=_epoch_generator(seed, epoch))
    return [int(i) for i in order]


def _epoch_generator(seed: int, epoch: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 100_003 + epoch)
