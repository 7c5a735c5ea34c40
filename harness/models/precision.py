"""Mixed precision: the frozen base in `model.dtype` (bf16 / fp16 on the real presets), what trains in fp32.

AdamW on bf16 weights loses every update smaller than about 1/256 of the weight (bf16 keeps 8 significant
bits): at the paper's RL learning rate of 3e-6, LoRA and the merger would hardly move. So the parameters that
train are held in float32 (master weights), the frozen base stays in its low precision (its memory is what
matters), and every forward pass runs under `torch.autocast` with the base's dtype, so the matrix products
still run in bf16 / fp16. With a float32 base (the tiny preset) nothing changes.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from harness.models.unwrap import unwrap

LOW_PRECISION = (torch.bfloat16, torch.float16)


def base_dtype(model: nn.Module) -> torch.dtype:
    """The dtype of the frozen base (that of its input embeddings, which never train in stages 1-3)."""
    return unwrap(model).get_input_embeddings().weight.dtype


def upcast(params) -> int:
    """Low-precision parameters -> float32, in place (the same Parameter objects); returns how many."""
    n = 0
    for p in params:
        if p.dtype in LOW_PRECISION:
            p.data = p.data.float()
            n += 1
    return n


def autocast_for(model: nn.Module):
    """Autocast to the base's dtype when it is bf16 / fp16 (a no-op context for a float32 base)."""
    dtype = base_dtype(model)
    if dtype not in LOW_PRECISION:
        return contextlib.nullcontext()
    device = next(model.parameters()).device
    return torch.autocast(device_type=device.type, dtype=dtype)
