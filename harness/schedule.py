"""Training schedules shared by every training loop (warm-up, SFT, classifier-free stages and the RL engine):
the learning-rate schedule and the seeded order of each epoch's samples. Below the stages and the engine, so
neither imports the other for them."""

from __future__ import annotations

import math

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
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return torch.randperm(n, generator=g).tolist()
