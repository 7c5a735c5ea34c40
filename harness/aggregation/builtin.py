"""The four built-in aggregations (token_mean is this project's default; group_token_mean is what REVA-PO's Eq. 3
and its official code compute, the paper presets' choice: docs/paper_vs_code.md)."""

from __future__ import annotations

import torch

from harness.aggregation.registry import Aggregation, register_aggregation


def _group_sums(x: torch.Tensor, group_size: int | None) -> torch.Tensor:
    """``[N] -> [N / G]`` sums over consecutive groups of G rows (rows are group-major)."""
    if group_size is None or group_size < 1 or x.shape[0] % group_size:
        raise ValueError(f"group_token_mean needs group_size dividing the {x.shape[0]} rows, got {group_size}")
    return x.view(-1, group_size).sum(dim=1)


def _dr_grpo_normalizer(n_rows: int, max_len: int | None) -> float:
    if max_len is None or max_len < 1:
        raise ValueError(f"dr_grpo needs max_len (the rollout's max_new_tokens) >= 1, got {max_len}")
    return float(max(n_rows, 1) * max_len)


@register_aggregation("token_mean")
class TokenMean(Aggregation):
    """DAPO-style (this project's default): sum over all masked tokens of the step / number of masked tokens; every
    token of the step weighs the same, long responses are not down-weighted. Not what REVA-PO's official run
    computes (that is group_token_mean: its ranks hold one prompt each)."""

    def reduce(self, x, m, group_size, max_len):
        return (x * m).sum() / m.sum().clamp(min=1.0)

    def normalizer(self, m, group_size, max_len):
        return m.sum()

    def weights(self, m, group_size, max_len):
        return m / m.sum().clamp(min=1.0)


@register_aggregation("group_token_mean")
class GroupTokenMean(Aggregation):
    """REVA-PO Eq. 3 as written: per group ``1 / sum_i |o_i| * sum_i sum_t``, then the mean over groups. It is also
    what the official code computes: 1 prompt per GPU, each rank's loss the token mean of its one group, DDP
    averaging the ranks; here the same on any number of processes and micro-batches (the trainer scales each
    process's loss by its share of the groups). Groups without a masked token are left out (the official run
    cannot have one: its min_new_tokens is >= 40)."""

    def reduce(self, x, m, group_size, max_len):
        sums, counts = _group_sums((x * m).sum(dim=-1), group_size), _group_sums(m.sum(dim=-1), group_size)
        has_tokens = (counts > 0).to(x.dtype)
        return (sums / counts.clamp(min=1.0) * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)

    def normalizer(self, m, group_size, max_len):
        return (_group_sums(m.sum(dim=-1), group_size) > 0).float().sum()

    def weights(self, m, group_size, max_len):
        counts = _group_sums(m.sum(dim=-1), group_size)  # tokens per group
        n_groups = (counts > 0).to(m.dtype).sum().clamp(min=1.0)
        per_row = (1.0 / (counts.clamp(min=1.0) * n_groups)).repeat_interleave(group_size)
        return m * per_row.unsqueeze(1)


@register_aggregation("seq_mean_token_mean")
class SeqMeanTokenMean(Aggregation):
    """Original GRPO: mean over each response's tokens, then mean over responses. Responses with no masked token
    have no mean and are left out of the outer mean."""

    def reduce(self, x, m, group_size, max_len):
        lengths = m.sum(dim=-1)
        per_seq = (x * m).sum(dim=-1) / lengths.clamp(min=1.0)
        has_tokens = (lengths > 0).to(x.dtype)
        return (per_seq * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)

    def normalizer(self, m, group_size, max_len):
        return (m.sum(dim=-1) > 0).float().sum()

    def weights(self, m, group_size, max_len):
        lengths = m.sum(dim=-1)
        n_seqs = (lengths > 0).to(m.dtype).sum().clamp(min=1.0)
        return m / (lengths.clamp(min=1.0) * n_seqs).unsqueeze(1)


@register_aggregation("dr_grpo")
class DrGRPO(Aggregation):
    """Dr. GRPO (Liu et al. 2025): sum over masked tokens / (N * max_len), a constant normaliser (their code divides
    each response's token sum by the generation budget, then averages over responses)."""

    def reduce(self, x, m, group_size, max_len):
        return (x * m).sum() / _dr_grpo_normalizer(x.shape[0], max_len)

    def normalizer(self, m, group_size, max_len):
        return torch.tensor(_dr_grpo_normalizer(m.shape[0], max_len))

    def weights(self, m, group_size, max_len):
        return m / _dr_grpo_normalizer(m.shape[0], max_len)
