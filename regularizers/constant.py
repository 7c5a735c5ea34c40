"""Constant KL coefficient (the GRPO default; "CKL" in REVA-PO Fig. 3a)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from regularizers.registry import Regularizer, register_regularizer


@register_regularizer("constant")
@dataclass
class ConstantKL(Regularizer):
    """``beta = beta_base`` for every response."""

    beta_base: float = 0.1

    def __post_init__(self) -> None:
        if not self.beta_base >= 0:
            raise ValueError(f"beta_base must be >= 0, got {self.beta_base}")

    def betas(self, advantages: torch.Tensor, h_ref: torch.Tensor | None = None) -> torch.Tensor:
        return torch.full_like(advantages, self.beta_base, dtype=torch.float32)
