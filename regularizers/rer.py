"""Response-Weighted Regularization (RER), REVA-PO Sec. 3.3, Eq. 7-9."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from regularizers.registry import Regularizer, register_regularizer


def check_beta_bounds(beta_min: float, beta_base: float, beta_max: float) -> None:
    """Raise ValueError unless ``0 <= beta_min <= beta_base <= beta_max``."""
    if not (0 <= beta_min <= beta_base <= beta_max):
        raise ValueError(
            "RER needs 0 <= beta_min <= beta_base <= beta_max, got "
            f"beta_min={beta_min}, beta_base={beta_base}, beta_max={beta_max}"
        )


def rer_betas(
    A: torch.Tensor,
    h_ref: torch.Tensor,
    beta_min: float,
    beta_base: float,
    beta_max: float,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Per-response KL weights from advantages and reference entropies (REVA-PO Eq. 7-9).

    ``A`` and ``h_ref`` are ``[B, G]``; ``h_ref[b, g]`` is the reference policy's full-vocabulary entropy
    averaged over the response's tokens (Eq. 7). Within each group (Eq. 8)
    ``x = (h - min_G h) / (max_G h - min_G h + eps)`` in [0, 1), and (Eq. 9)

    - ``A > 0``: ``beta = beta_min + (beta_base - beta_min)(1 - x)`` -- a good response the reference finds
      uncertain is constrained less (toward beta_min);
    - ``A < 0``: ``beta = beta_base + (beta_max - beta_base) x`` -- a bad response the reference finds
      uncertain is pulled back harder (toward beta_max);
    - ``A == 0``: ``beta = beta_base``.

    A group with equal entropies has ``x = 0``: ``beta_base`` for A > 0 and for A < 0 alike.
    """
    check_beta_bounds(beta_min, beta_base, beta_max)
    if A.dim() != 2 or h_ref.shape != A.shape:
        raise ValueError(f"A and h_ref must both be [B, G], got {tuple(A.shape)} and {tuple(h_ref.shape)}")
    h = h_ref.detach().to(torch.float64 if h_ref.dtype == torch.float64 else torch.float32)
    h_min = h.min(dim=1, keepdim=True).values
    h_max = h.max(dim=1, keepdim=True).values
    x = (h - h_min) / (h_max - h_min + eps)
    beta_pos = beta_min + (beta_base - beta_min) * (1.0 - x)
    beta_neg = beta_base + (beta_max - beta_base) * x
    a = A.detach().to(h.device)
    return torch.where(a > 0, beta_pos, torch.where(a < 0, beta_neg, torch.full_like(x, beta_base)))


@register_regularizer("rer")
@dataclass
class RER(Regularizer):
    """REVA-PO's response-weighted KL. Defaults: MIMIC-CXR (Supp. D.2); IU-Xray uses ``beta_max = 0.15``."""

    needs_reference_entropy: ClassVar[bool] = True

    beta_min: float = 0.05
    beta_base: float = 0.10
    beta_max: float = 0.12
    eps: float = 1e-6

    def __post_init__(self) -> None:
        check_beta_bounds(self.beta_min, self.beta_base, self.beta_max)

    def betas(self, advantages: torch.Tensor, h_ref: torch.Tensor | None = None) -> torch.Tensor:
        if h_ref is None:
            raise ValueError("RER needs the reference entropies h_ref[B, G] (needs_reference_entropy=True)")
        return rer_betas(advantages, h_ref, self.beta_min, self.beta_base, self.beta_max, self.eps)
