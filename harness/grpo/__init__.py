"""The GRPO engine: pure functions (``core``) that the rollout and RL loop plug together."""

from harness.grpo.core import (
    AGGREGATIONS,
    DEFAULT_CHUNK_ROWS,
    KL_ESTIMATORS,
    aggregate,
    aggregation_normalizer,
    group_advantages,
    kl_penalty,
    masked_mean,
    policy_loss,
    response_mean,
    token_entropy,
    token_logprobs,
    zero_std_groups,
)

__all__ = [
    "AGGREGATIONS",
    "DEFAULT_CHUNK_ROWS",
    "KL_ESTIMATORS",
    "aggregate",
    "aggregation_normalizer",
    "group_advantages",
    "kl_penalty",
    "masked_mean",
    "policy_loss",
    "response_mean",
    "token_entropy",
    "token_logprobs",
    "zero_std_groups",
]
