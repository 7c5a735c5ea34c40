"""KL in the reward instead of the loss (rl.kl_placement reward): verl's ``algorithm.use_kl_in_reward``.

verl (``apply_kl_penalty``, verl/trainer/ppo/ray_trainer.py) subtracts ``beta * kld`` from the token-level rewards,
``kld = kl_penalty(old_log_probs, ref_log_prob)`` masked to the response, before the advantages; its GRPO advantage
(``compute_grpo_outcome_advantage``) sums the token-level rewards of a response. So a response's shaped reward is
``R_i - beta_i * sum_t KL_{i,t}``, with KL between the sampling (old) policy and the reference: a number, no
gradient. ``reduce="mean"`` divides the sum by the response's length instead (this project).
"""

from __future__ import annotations

import torch

from harness.grpo.core import kl_penalty

KL_REWARD_REDUCTIONS = ("sum", "mean")


def response_kl(logp_old: torch.Tensor, logp_ref: torch.Tensor, mask: torch.Tensor, estimator: str = "k1",
                cap: float | None = 10.0, reduce: str = "sum") -> torch.Tensor:
    """``[N]``: each response's KL to the reference, the per-token estimator (core.kl_penalty: k1, k2, k3) summed
    (or averaged) over its tokens; 0 for a response without tokens."""
    if reduce not in KL_REWARD_REDUCTIONS:
        raise ValueError(f"KL reward reduction must be one of {KL_REWARD_REDUCTIONS}, got {reduce!r}")
    if estimator == "k3_is":
        raise ValueError("kl_estimator k3_is corrects a gradient; the reward's KL has none (use k1, k2 or k3)")
    m = mask.to(logp_old.dtype)
    total = (kl_penalty(logp_old.detach(), logp_ref.detach(), estimator, cap) * m).sum(-1)
    return total if reduce == "sum" else total / m.sum(-1).clamp(min=1.0)


def kl_shaped_rewards(rewards: torch.Tensor, kl: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """``[B, G]``: ``R - beta * KL`` per response (``kl`` and ``beta`` ``[N]`` or ``[B, G]``, rows group-major)."""
    return rewards - beta.reshape(rewards.shape).to(rewards.dtype) * kl.reshape(rewards.shape).to(rewards.dtype)
