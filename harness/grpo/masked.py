"""Masked means and per-token broadcasting for the GRPO loss (the aggregation rules are plug-ins in
harness/aggregation/)."""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the positions where ``mask`` is set (0 when no position is set)."""
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def response_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-response mean over its tokens, ``[N, T] -> [N]`` (0 for a response without tokens).

    With per-token reference entropies this is ``h_ref`` of REVA-PO Eq. 7: ``(1 / |o_i|) sum_t H_t``.
    """
    m = mask.to(x.dtype)
    return (x * m).sum(dim=-1) / m.sum(dim=-1).clamp(min=1.0)


def per_token(x: torch.Tensor | float, shape: torch.Size, like: torch.Tensor, what: str) -> torch.Tensor:
    """Broadcast a per-response ``[N]`` (or per-token ``[N, T]``, or scalar) quantity to ``[N, T]``."""
    x = torch.as_tensor(x, dtype=like.dtype, device=like.device)
    if x.dim() == 1:
        if x.shape[0] != shape[0]:
            raise ValueError(f"{what} has {x.shape[0]} rows, expected {shape[0]}")
        x = x.unsqueeze(-1)
    elif x.dim() == 2 and x.shape != shape:
        raise ValueError(f"{what} has shape {tuple(x.shape)}, expected {tuple(shape)}")
    elif x.dim() > 2:
        raise ValueError(f"{what} must be [N] or [N, T], got shape {tuple(x.shape)}")
    return x.expand(shape)
