"""Adaptive KL coefficient: the PPO target-KL controller of Ziegler et al. (2019), "Fine-tuning language
models from human preferences", Sec. 2.2."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from regularizers.registry import Regularizer, register_regularizer

# Ziegler et al. clip the proportional error to +-0.2 so one noisy batch moves beta only a little.
ERROR_CLIP = 0.2


def adaptive_beta_update(
    beta: float, kl: float, target: float, n: int, horizon: float
) -> tuple[float, float]:
    """One controller update: ``e = clip(KL / target - 1, -0.2, 0.2)``,
    ``beta <- beta * (1 + e * n / horizon)``.

    Returns ``(new_beta, e)``. ``n`` is the number of samples since the last update.
    """
    e = min(max(kl / target - 1.0, -ERROR_CLIP), ERROR_CLIP)
    return beta * (1.0 + e * n / horizon), e


@register_regularizer("adaptive")
@dataclass
class AdaptiveKL(Regularizer):
    """One beta for all responses, steered toward a target KL once per optimizer step.

    ``target`` is in the unit of the loop's ``kl_mean``: the token mean of the KL estimator (per-token
    nats), not Ziegler et al.'s per-sequence KL; hence a much smaller default than their 6 nats.
    """

    init_beta: float = 0.1
    target: float = 0.02
    horizon: float = 10000.0
    beta: float = field(init=False)
    last_error: float = field(init=False, default=0.0)
    num_updates: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if not self.init_beta >= 0:
            raise ValueError(f"init_beta must be >= 0, got {self.init_beta}")
        if not self.target > 0:
            raise ValueError(f"target must be > 0, got {self.target}")
        if not self.horizon > 0:
            raise ValueError(f"horizon must be > 0, got {self.horizon}")
        self.beta = float(self.init_beta)

    def betas(self, advantages: torch.Tensor, h_ref: torch.Tensor | None = None) -> torch.Tensor:
        return torch.full_like(advantages, self.beta, dtype=torch.float32)

    def after_step(self, kl_mean: float, n: int) -> None:
        self.beta, self.last_error = adaptive_beta_update(
            self.beta, float(kl_mean), self.target, n, self.horizon
        )
        self.num_updates += 1

    def state_dict(self) -> dict[str, Any]:
        # plain floats/ints: checkpoints are read with weights_only=True (harness/checkpoint_io.py)
        return {"beta": float(self.beta), "last_error": float(self.last_error), "num_updates": int(self.num_updates)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.beta = float(state["beta"])
        self.last_error = float(state.get("last_error", 0.0))
        self.num_updates = int(state.get("num_updates", 0))

    def log_stats(self) -> dict[str, float]:
        return {"kl_coef": self.beta, "kl_ctl_error": self.last_error}
