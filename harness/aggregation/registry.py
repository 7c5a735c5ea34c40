"""The registry of loss aggregations: how per-token terms ``[N, T]`` become the step's scalar loss (REVA-PO Eq. 3
and the variants it is compared with), and the three views of each rule that the GRPO loss, micro-batching and
data parallelism use (harness/grpo/core.py, harness/grpo/trainer.py)."""

from __future__ import annotations

import functools

import torch

from harness.registry import Registry


class Aggregation:
    """One rule for reducing a per-token ``[N, T]`` quantity to the step's scalar loss, in three views that must
    agree: ``reduce(x, m) == (weights(m) * x).sum()``, and ``normalizer(m)`` is what ``reduce`` divides by (before
    its clamp at 1). ``m`` is the response mask as a float tensor; rows are group-major (``group_size`` = G) and
    ``max_len`` is the rollout's ``max_new_tokens``. Subclass it with ``@register_aggregation("name")``."""

    name = ""

    def reduce(self, x: torch.Tensor, m: torch.Tensor, group_size: int | None, max_len: int | None) -> torch.Tensor:
        raise NotImplementedError

    def normalizer(self, m: torch.Tensor, group_size: int | None, max_len: int | None) -> torch.Tensor:
        raise NotImplementedError

    def weights(self, m: torch.Tensor, group_size: int | None, max_len: int | None) -> torch.Tensor:
        raise NotImplementedError


# Every module of harness/aggregation/ is imported on first use (the built-ins and plug-ins register themselves on
# import), so a new rule is one file there.
_AGGREGATION_REGISTRY: Registry[type[Aggregation]] = Registry(
    "aggregation", ("harness.aggregation",), base=Aggregation, decorator="register_aggregation", name_attr="name")
_REGISTRY: dict[str, type[Aggregation]] = _AGGREGATION_REGISTRY.entries


def register_aggregation(name: str):
    """Class decorator: makes ``rl.aggregation=name`` use this rule (config validation lists the registered names).
    Every module of ``harness/aggregation/`` is imported on first use, so a new rule is one file there."""
    return _AGGREGATION_REGISTRY.register(name)


def available_aggregations() -> list[str]:
    return _AGGREGATION_REGISTRY.names()


@functools.cache
def _instance(cls: type[Aggregation]) -> Aggregation:
    return cls()


def get_aggregation(mode: str) -> Aggregation:
    """The rule registered as ``mode`` (one instance per class); an unknown name is a ValueError listing the
    registered ones."""
    return _instance(_AGGREGATION_REGISTRY.lookup(mode))


# The built-in rules (harness/aggregation/builtin.py); plug-ins in harness/aggregation/ add to available_aggregations().
AGGREGATIONS = ("token_mean", "group_token_mean", "seq_mean_token_mean", "dr_grpo")


def aggregate(x: torch.Tensor, mask: torch.Tensor, mode: str = "token_mean", *, group_size: int | None = None,
              max_len: int | None = None) -> torch.Tensor:
    """Reduce a per-token ``[N, T]`` quantity to a scalar with the registered rule ``mode`` (see the classes)."""
    rule = get_aggregation(mode)
    return rule.reduce(x, mask.to(x.dtype), group_size, max_len)


def aggregation_normalizer(mask: torch.Tensor, mode: str = "token_mean", *, group_size: int | None = None,
                           max_len: int | None = None) -> torch.Tensor:
    """The denominator :func:`aggregate` divides by (before its clamp at 1): the number of masked tokens
    (``token_mean``), of groups (``group_token_mean``) or responses (``seq_mean_token_mean``) with at least one
    masked token, or N * max_len (``dr_grpo``). Data-parallel training scales each process's loss by its share
    of the global normaliser, so that the average over processes equals the loss of the whole batch; whole groups
    live on one process, so group means are never split."""
    return get_aggregation(mode).normalizer(mask.float(), group_size, max_len)


def aggregation_weights(mask: torch.Tensor, mode: str = "token_mean", *, group_size: int | None = None,
                        max_len: int | None = None) -> torch.Tensor:
    """Per-token weights ``w [N, T]`` with ``aggregate(x, mask, mode) == (w * x).sum()`` for every ``x``.

    Computed once over the whole step, they let micro-batches of rows add up to the one-batch loss: each
    micro-batch contributes ``(w[rows] * x[rows]).sum()``, and no normaliser (token count, tokens per group,
    tokens per response, responses with tokens) is ever taken over a micro-batch alone.
    """
    rule = get_aggregation(mode)
    return rule.weights(mask.float() if not mask.is_floating_point() else mask, group_size, max_len)
