"""Two aggregations as TRL's GRPOTrainer computes them (trl/trainer/grpo_trainer.py ``_compute_loss``), where they
differ from the built-ins: a response without tokens counts in the mean over responses."""

from __future__ import annotations

import torch

from harness.aggregation.registry import Aggregation, register_aggregation


def _rows(m: torch.Tensor) -> torch.Tensor:
    return torch.tensor(float(max(m.shape[0], 1)), device=m.device)


@register_aggregation("seq_mean_token_mean_all")
class SeqMeanTokenMeanAll(Aggregation):
    """TRL's ``loss_type="grpo"`` (and ``"sapo"``): each response's token mean, then the mean over all N responses;
    a response without tokens counts as 0 (``seq_mean_token_mean`` leaves it out of the outer mean)."""

    def reduce(self, x, m, group_size, max_len):
        return ((x * m).sum(dim=-1) / m.sum(dim=-1).clamp(min=1.0)).sum() / _rows(m)

    def normalizer(self, m, group_size, max_len):
        return _rows(m)

    def weights(self, m, group_size, max_len):
        return m / (m.sum(dim=-1, keepdim=True).clamp(min=1.0) * _rows(m))


@register_aggregation("seq_sum")
class SeqSum(Aggregation):
    """TRL's ``loss_type="luspo"`` (LUSPO, Length-Unbiased Sequence Policy Optimization): each response's token sum,
    then the mean over all N responses (a sequence-level loss scaled by the response's length)."""

    def reduce(self, x, m, group_size, max_len):
        return (x * m).sum() / _rows(m)

    def normalizer(self, m, group_size, max_len):
        return _rows(m)

    def weights(self, m, group_size, max_len):
        return m / _rows(m)
