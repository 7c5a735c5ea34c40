"""Loss aggregations as plug-ins: a new rule is one module in this folder with one ``@register_aggregation`` class
(contract: harness/aggregation/registry.py ``Aggregation``; the built-ins: builtin.py)."""

from harness.aggregation.registry import (
    AGGREGATIONS,
    Aggregation,
    aggregate,
    aggregation_normalizer,
    aggregation_weights,
    available_aggregations,
    get_aggregation,
    register_aggregation,
)

__all__ = [
    "AGGREGATIONS",
    "Aggregation",
    "aggregate",
    "aggregation_normalizer",
    "aggregation_weights",
    "available_aggregations",
    "get_aggregation",
    "register_aggregation",
]
