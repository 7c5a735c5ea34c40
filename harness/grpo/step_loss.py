"""The loss of one GRPO step (Eq. 3-6) for the updater, `StepLoss`, over the step's micro-batches; and, with
rl.kl_placement reward, the KL-shaped rewards (`kl_in_reward`) the loss then goes without. Moved out of
harness/grpo/trainer.py unchanged (issue 47): the same operations in the same order."""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.config import RLConfig
from harness.grpo.core import (
    aggregation_normalizer,
    aggregation_weights,
    kl_penalty,
    masked_mean,
    policy_loss,
    response_mean,
    token_entropy,
    token_logprobs,
)
from harness.grpo.kl_reward import kl_shaped_rewards, response_kl
from harness.grpo.rollout import Rollout, response_logits


class StepLoss:
    """The loss of one step's micro-batches for `Updater.update`: `loss(forward, (a, b))` runs the current policy
    over rows a..b and returns their share of the step's loss (Eq. 3-6; the aggregation's normalisers are those of
    the whole step, core.aggregation_weights, so the micro-batches add up to the one-batch loss and gradient), or
    why they cannot train. Keeps the betas and the reference entropies (from the frozen pass, or from the
    current pass when ref == current in one micro-batch) and the per-token values for `stats()`."""

    def __init__(self, rl: RLConfig, regularizer, lp_temp: float, ro: Rollout, chunks, frozen: dict,
                 adv: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, kl_in_reward: dict | None = None, *,
                 logits_fn: Callable = response_logits):
        # kl_in_reward (rl.kl_placement reward): {"beta": [N] betas the rewards were shaped with, "stats": {...}};
        # the loss then has no KL term. logits_fn: the run's logits function (harness/grpo/passes.py).
        self.rl, self.regularizer, self.lp_temp, self.ro, self.frozen = rl, regularizer, lp_temp, ro, frozen
        self.logits_fn = logits_fn
        self.adv, self.advantages, self.mask, self.whole = adv, advantages, mask, len(chunks) == 1
        self.kl_in_reward = kl_in_reward
        agg = {"group_size": adv.shape[1], "max_len": rl.max_new_tokens}
        self.kw = dict(eps_low=rl.eps_low, eps_high=rl.eps_high, dual_clip=rl.dual_clip, kl_estimator=rl.kl_estimator,
                       aggregation=rl.aggregation, entropy_coef=rl.entropy_coef, kl_cap=rl.kl_cap,
                       importance_sampling=rl.importance_sampling, surrogate=rl.surrogate,
                       sapo_tau_pos=rl.sapo_tau_pos, sapo_tau_neg=rl.sapo_tau_neg, **agg)
        self.weights = None if self.whole else aggregation_weights(mask, rl.aggregation, **agg)
        self.normalizer = aggregation_normalizer(mask, rl.aggregation, **agg)  # this process's share (Updater)
        self.h_ref = frozen["ref"][1] if "ref" in frozen else None  # [N, T] reference entropies (RER)
        self.beta, self.kept, self.last = None, [], {}
        if kl_in_reward is not None:
            self.beta = kl_in_reward["beta"]
        elif not (regularizer.needs_reference and regularizer.needs_reference_entropy) or self.h_ref is not None:
            self.beta = self._betas(self.h_ref)

    def _betas(self, h_tok: torch.Tensor | None) -> torch.Tensor:
        h = response_mean(h_tok, self.ro.response_mask.float()).view(*self.adv.shape) if h_tok is not None else None
        return self.regularizer.betas(self.adv, h).reshape(-1)

    def __call__(self, forward, rows: tuple[int, int]) -> torch.Tensor | str:
        (a, b), sub, rl, frozen = rows, self.ro.rows(*rows), self.rl, self.frozen
        logits = forward(self.logits_fn, sub)
        logp = token_logprobs(logits, sub.responses, self.lp_temp, rl.logprob_chunk_positions)
        ent = token_entropy(logits, self.lp_temp, rl.logprob_chunk_positions, requires_grad=rl.entropy_coef != 0)
        del logits
        if not (torch.isfinite(logp).all() and torch.isfinite(ent).all()):
            return "logits of the current policy are not finite"
        lp_old = frozen["old"][0][a:b] if "old" in frozen else logp.detach()
        lp_ref = None
        if self.regularizer.needs_reference:
            lp_ref = frozen["ref"][0][a:b] if "ref" in frozen else logp.detach()
            if self.beta is None:  # one micro-batch, ref == current: its entropies are this pass's (detached)
                self.h_ref = ent.detach()
                self.beta = self._betas(self.h_ref)
        if self.kl_in_reward is not None:
            lp_ref = None  # the KL acted on the rewards
        loss, self.last = policy_loss(logp, lp_old, lp_ref, self.advantages[a:b], self.beta[a:b], self.mask[a:b],
                                      entropy=ent, token_weights=None if self.whole else self.weights[a:b], **self.kw)
        if not torch.isfinite(loss):
            return f"the loss is {float(loss.detach())} although rewards and logits are finite"
        self.kept.append((logp.detach(), lp_old, lp_ref, ent.detach()))
        return loss

    def stats(self) -> dict:
        """The step's loss statistics, exactly as one batch gives them (with the reward's KL statistics)."""
        extra = self.kl_in_reward["stats"] if self.kl_in_reward is not None else {}
        if self.whole:
            return {**self.last, **extra}
        cat = [torch.cat(parts) if parts[0] is not None else None for parts in zip(*self.kept, strict=True)]
        with torch.no_grad():
            return {**policy_loss(cat[0], cat[1], cat[2], self.advantages, self.beta, self.mask, entropy=cat[3],
                                  **self.kw)[1], **extra}


def kl_in_reward(rl: RLConfig, regularizer, rewards: torch.Tensor, adv: torch.Tensor, ro: Rollout,
                 frozen: dict) -> tuple[torch.Tensor, dict]:
    """rl.kl_placement reward: the rewards minus beta_i times each response's KL (old vs reference; verl's
    use_kl_in_reward, harness/grpo/kl_reward.py), and what StepLoss needs: the betas (from the regularizer, on
    the task reward's advantages as in the loss placement) and the KL statistics for the log (kl_mean: the
    token mean of the estimator, which the adaptive controller reads)."""
    resp = ro.response_mask.float()
    h = frozen["ref"][1]
    h = response_mean(h, resp).view(*adv.shape) if h is not None else None
    beta = regularizer.betas(adv, h).reshape(-1).to(rewards.device)
    lp_old, lp_ref = frozen["old"][0], frozen["ref"][0]
    kl = response_kl(lp_old, lp_ref, resp, rl.kl_estimator, rl.kl_cap, rl.kl_reward_reduce)
    shaped = kl_shaped_rewards(rewards, kl, beta)
    stats = {"kl_mean": float(masked_mean(kl_penalty(lp_old, lp_ref, rl.kl_estimator, rl.kl_cap), resp)),
             "kl_reward_mean": float((beta * kl.to(beta.dtype)).mean())}
    return shaped, {"beta": beta, "stats": stats}
