"""Which sequence positions get logits: `logits_to_keep` as an index tensor, never as an int.

For an int k, transformers computes `lm_head(hidden_states[:, -k:, :])` on a non-contiguous [B, k, H] view. On
the CPU, a bf16/fp16 product with such a view broadcasts the [V, H] lm_head weight to one copy per row (B x 622 MB
at Qwen2.5-VL-3B's vocabulary and width, B x 1.09 GB at 7B's); fp32 does not, and CUDA was not measured (profiled
with torch.profiler, benchmarks/RESULTS.md, issue 14). An index tensor makes transformers gather the positions
into a contiguous [B, k, H] tensor first, and the product runs over the weight as it is; the logits are the same
numbers (tests/harness/models/test_logit_positions.py).
"""

from __future__ import annotations

import torch


def last_positions(k: int, length: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The `logits_to_keep` index tensor of the last `k` of `length` positions (`arange(length - k, length)`)."""
    if not 1 <= k <= length:
        raise ValueError(f"logits for the last {k} of {length} positions: k must be in [1, {length}]")
    return torch.arange(length - k, length, device=device)


def last_hidden(hidden: torch.Tensor) -> torch.Tensor:
    """The last position's hidden state as a contiguous [B, H] tensor (a product with it never copies the weight)."""
    return hidden[:, -1, :].contiguous()
