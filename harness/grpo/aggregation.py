"""How per-token terms become one loss: masked means and the four aggregations (token_mean, group_token_mean,
seq_mean_token_mean, dr_grpo), with the normalisers and per-token weights that let micro-batches add up to the
whole step's loss."""

from __future__ import annotations

import torch

AGGREGATIONS = ("token_mean", "group_token_mean", "seq_mean_token_mean", "dr_grpo")


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


def _group_sums(x: torch.Tensor, group_size: int | None) -> torch.Tensor:
    """``[N] -> [N / G]`` sums over consecutive groups of G rows (rows are group-major)."""
    if group_size is None or group_size < 1 or x.shape[0] % group_size:
        raise ValueError(f"group_token_mean needs group_size dividing the {x.shape[0]} rows, got {group_size}")
    return x.view(-1, group_size).sum(dim=1)


def aggregate(x: torch.Tensor, mask: torch.Tensor, mode: str = "token_mean", *, group_size: int | None = None,
              max_len: int | None = None) -> torch.Tensor:
    """Reduce a per-token ``[N, T]`` quantity to a scalar.

    - ``token_mean`` (default, DAPO-style; the official REVA-PO code): sum over all masked tokens of the step /
      number of masked tokens; every token weighs the same, long responses are not down-weighted.
    - ``group_token_mean`` (REVA-PO Eq. 3 as written): per group ``1 / sum_i |o_i| * sum_i sum_t``, then the
      mean over groups (rows are group-major, ``group_size`` = G). Groups without a masked token are left out.
    - ``seq_mean_token_mean`` (original GRPO): mean over each response's tokens, then mean over responses.
      Responses with no masked token have no mean and are left out of the outer mean.
    - ``dr_grpo`` (Dr. GRPO, Liu et al. 2025): sum over masked tokens / (N * ``max_len``), a constant
      normaliser (their code divides each response's token sum by the generation budget, then averages over
      responses); ``max_len`` is the rollout's ``max_new_tokens``.
    """
    m = mask.to(x.dtype)
    if mode == "token_mean":
        return (x * m).sum() / m.sum().clamp(min=1.0)
    if mode == "group_token_mean":
        sums, counts = _group_sums((x * m).sum(dim=-1), group_size), _group_sums(m.sum(dim=-1), group_size)
        has_tokens = (counts > 0).to(x.dtype)
        return (sums / counts.clamp(min=1.0) * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    if mode == "seq_mean_token_mean":
        lengths = m.sum(dim=-1)
        per_seq = (x * m).sum(dim=-1) / lengths.clamp(min=1.0)
        has_tokens = (lengths > 0).to(x.dtype)
        return (per_seq * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    if mode == "dr_grpo":
        return (x * m).sum() / _dr_grpo_normalizer(x.shape[0], max_len)
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {mode!r}")


def _dr_grpo_normalizer(n_rows: int, max_len: int | None) -> float:
    if max_len is None or max_len < 1:
        raise ValueError(f"dr_grpo needs max_len (the rollout's max_new_tokens) >= 1, got {max_len}")
    return float(max(n_rows, 1) * max_len)


def aggregation_normalizer(mask: torch.Tensor, mode: str = "token_mean", *, group_size: int | None = None,
                           max_len: int | None = None) -> torch.Tensor:
    """The denominator :func:`aggregate` divides by (before its clamp at 1): the number of masked tokens
    (``token_mean``), of groups (``group_token_mean``) or responses (``seq_mean_token_mean``) with at least one
    masked token, or N * max_len (``dr_grpo``). Data-parallel training scales each process's loss by its share
    of the global normaliser, so that the average over processes equals the loss of the whole batch
    (harness/distributed.py); whole groups live on one process, so group means are never split."""
    m = mask.float()
    if mode == "token_mean":
        return m.sum()
    if mode == "group_token_mean":
        return (_group_sums(m.sum(dim=-1), group_size) > 0).float().sum()
    if mode == "seq_mean_token_mean":
        return (m.sum(dim=-1) > 0).float().sum()
    if mode == "dr_grpo":
        return torch.tensor(_dr_grpo_normalizer(m.shape[0], max_len))
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {mode!r}")


def aggregation_weights(mask: torch.Tensor, mode: str = "token_mean", *, group_size: int | None = None,
                        max_len: int | None = None) -> torch.Tensor:
    """Per-token weights ``w [N, T]`` with ``aggregate(x, mask, mode) == (w * x).sum()`` for every ``x``.

    Computed once over the whole step, they let micro-batches of rows add up to the one-batch loss: each
    micro-batch contributes ``(w[rows] * x[rows]).sum()``, and no normaliser (token count, tokens per group,
    tokens per response, responses with tokens) is ever taken over a micro-batch alone.
    """
    m = mask.float() if not mask.is_floating_point() else mask
    if mode == "token_mean":
        return m / m.sum().clamp(min=1.0)
    if mode == "group_token_mean":
        counts = _group_sums(m.sum(dim=-1), group_size)  # tokens per group
        n_groups = (counts > 0).to(m.dtype).sum().clamp(min=1.0)
        per_row = (1.0 / (counts.clamp(min=1.0) * n_groups)).repeat_interleave(group_size)
        return m * per_row.unsqueeze(1)
    if mode == "seq_mean_token_mean":
        lengths = m.sum(dim=-1)
        n_seqs = (lengths > 0).to(m.dtype).sum().clamp(min=1.0)
        return m / (lengths.clamp(min=1.0) * n_seqs).unsqueeze(1)
    if mode == "dr_grpo":
        return m / _dr_grpo_normalizer(m.shape[0], max_len)
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {mode!r}")


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
