"""The RL trainer's log lines: one row per training step (steps.jsonl) and the sampled candidates
(samples.jsonl), over the whole batch of every process; and the run's summary of its reward curve."""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from harness.grpo.core import response_mean
from harness.parallel.distributed import Dist

# The loss terms (harness/grpo/core.py policy_loss): each process's value is its share of the objective divided by
# its share of the aggregation's normaliser, so their mean over processes weighs by that normaliser.
LOSS_KEYS = ("loss", "pg_loss", "kl_loss", "entropy_loss")


def loss_stats(dist: Dist, stats: dict, tokens: float, normalizer: float) -> dict:
    """The step's loss statistics over all processes: token means weighted by the processes' response tokens,
    the loss terms by their normalisers (groups for group_token_mean, tokens for token_mean, ...), so that the
    logged loss is the objective of the whole step on any number of processes; `*_min` / `*_max` by min / max."""
    out = dist.reduce_stats(stats, tokens)
    out.update(dist.reduce_stats({k: stats[k] for k in LOSS_KEYS if k in stats}, normalizer))
    return out


def step_row(dist: Dist, *, step: int, epoch: float, rewards: torch.Tensor, zero_std: torch.Tensor,
             lengths: torch.Tensor, response_mask: torch.Tensor, ref_entropy_tok: torch.Tensor | None,
             token_weights: torch.Tensor | None, skipped: bool, lr: float, grad_norm: float | None, t0: float,
             fields: dict) -> dict:
    """The step's row: reward statistics over the step's whole batch (all processes), the reference entropy
    (RER), response length, lr, grad norm, time since `t0`, then `fields` (loss statistics, regularizer,
    reference and sync events). A skipped step logs no entropy or token weights, and its non-finite floats as
    null."""
    all_rewards = dist.gather(rewards)  # [B * world, G]: the step's whole batch
    all_zero_std = dist.gather(zero_std.float())
    all_lengths = dist.gather(lengths.float())
    ref_entropy = None
    if ref_entropy_tok is not None and not skipped:
        ref_entropy = float(dist.gather(response_mean(ref_entropy_tok, response_mask.float())).mean())
    row = {
        "step": step, "epoch": epoch,
        "reward_mean": float(all_rewards.mean()), "reward_std": float(all_rewards.std(unbiased=False)),
        "reward_min": float(all_rewards.min()), "reward_max": float(all_rewards.max()),
        "frac_reward_zero_std": float(all_zero_std.float().mean()),
        "ref_entropy_mean": ref_entropy,
        "response_length": float(all_lengths.mean()), "lr": lr,
        "grad_norm": grad_norm, "step_time": time.time() - t0,
        **fields,
    }
    if token_weights is not None and not skipped:
        sel = token_weights[response_mask.bool()]
        row.update(token_weight_max=float(sel.max()), token_weight_std=float(sel.std()))
    if skipped:
        row = {k: v if not isinstance(v, float) or math.isfinite(v) else None for k, v in row.items()}
    return row


def samples_record(step: int, ids: list[str], texts: list[str], rewards: torch.Tensor, adv: torch.Tensor,
                   beta: torch.Tensor | None) -> dict:
    """The step's candidates with their rewards, advantages and betas ([B, G] each)."""
    return {"step": step, "ids": ids, "candidates": texts, "rewards": rewards.tolist(), "advantages": adv.tolist(),
            "betas": beta.view(*adv.shape).tolist() if beta is not None else None}


def run_summary(steps: int, wall_time_s: float, rows: list[dict]) -> dict:
    """Steps, wall time and the reward curve's first, last and last-10 mean of the logged step `rows`."""
    rewards = [s["reward_mean"] for s in rows if s.get("reward_mean") is not None]  # None: skipped step
    return {"steps": steps, "wall_time_s": wall_time_s,
            "reward_first": rewards[0] if rewards else None, "reward_last": rewards[-1] if rewards else None,
            "reward_mean_last_10": float(np.mean(rewards[-10:])) if rewards else None}
