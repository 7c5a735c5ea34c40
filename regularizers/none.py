"""No KL regularization: beta = 0, and the loop skips the reference forward pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from regularizers.registry import Regularizer, register_regularizer


@register_regularizer("none")
@dataclass
class NoKL(Regularizer):
    """``beta = 0`` for every response; ``needs_reference = False`` so no reference log-probs are computed."""

    needs_reference: ClassVar[bool] = False

    def betas(self, advantages: torch.Tensor, h_ref: torch.Tensor | None = None) -> torch.Tensor:
        return torch.zeros_like(advantages, dtype=torch.float32)
