"""Training schedules shared by every training loop (warm-up, SFT, classifier-free stages and the RL engine):
the learning-rate schedule and the seeded order of each epoch's samples. Below the stages and the engine, so
neither imports the other for them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from harness.config import TrainConfig


def make_scheduler(optimizer, cfg: TrainConfig, total_steps: int):
    """Linear warm-up over `cfg.warmup_steps`, then cosine to 0 at `total_steps` (stage 1) or constant
    (`constant` / `warmup_constant`: the official code's stage 3)."""
    warm = max(0, cfg.warmup_steps)

    def factor(step: int) -> float:
        if warm and step < warm:
            return (step + 1) / warm
        if cfg.scheduler == "cosine":
            span = max(1, total_steps - warm)
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warm) / span)))
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """A permutation of range(n) fixed by (seed, epoch): a resumed run visits the samples an uninterrupted one does."""
    return torch.randperm(n, generator=_epoch_generator(seed, epoch)).tolist()


def length_grouped_order(lengths: Sequence[int], batch_size: int, seed: int, epoch: int) -> list[int]:
    """A permutation of range(len(lengths)) fixed by (seed, epoch) whose consecutive `batch_size` slices hold
    samples of similar length: transformers' `get_length_grouped_indices` (the Trainer's `group_by_length`: a
    random permutation cut into mega-batches of up to 50 batches, each sorted by length, the longest sample
    first), drawn from the generator `epoch_order` uses. Less padding per batch, so less arithmetic on pads."""
    from transformers.trainer_pt_utils import get_length_grouped_indices

    if batch_size < 1:
        raise ValueError(f"batch_size = {batch_size}: must be >= 1")
    if not len(lengths):
        return []
    order = get_length_grouped_indices(list(lengths), batch_size, generator=_epoch_generator(seed, epoch))
    return [int(i) for i in order]


def _epoch_generator(seed: int, epoch: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 100_003 + epoch)
