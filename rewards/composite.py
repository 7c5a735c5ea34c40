"""Weighted composite rewards: `R = sum_k w_k R_k` over registered rewards.

`make_composite({"mccs": 0.75, "format": 0.25})` returns a reward function (same signature as every reward)
that calls each component with the same references and context and sums the weighted scores. Weights are
used as given (not renormalised); each must be finite and >= 0 and their sum > 0. Components with weight 0
are not computed. A component is a registered name or ``package.module:function`` (rewards/registry.py:
named_reward); components are resolved when the composite is called, so a composite can be built at import
time; an unknown name fails then, with the registry's error. `rl.reward={bleu4: 0.5, chexpert_f1: 0.5}` builds one
from the config (rewards/spec.py: resolve_reward; checked when the config loads: check_reward).

`score_report_part=True` (the default): components score `rewards.report_part.extract_report(candidate)`, the
`<report>` part of a `<think>...</think><report>...</report>` output (or the tag-stripped text when the
format is broken). Rewards that judge the raw output carry `scores_raw_text = True` (the format reward,
composites) and always get the raw candidate. With `score_report_part=False` every component gets the raw
candidate.

Registered composites (MRG-R1, paper 002: "a weighted sum of clinical (0.75) and format (0.25) terms"):
- `mrg_r1` = `mccs_format` = 0.75 * mccs + 0.25 * format: MRG-R1's full reward (Table 2 "+MCCS+Format");
  the two names are the same function (`mccs_format` is the name used in the reward matrix);
- `ce_f1_format` = 0.75 * ce_f1 + 0.25 * format: MRG-R1's "+CE-F1+Format" ablation.
- `mrg_r1_normal` = 0.75 * mccs_normal + 0.25 * format: `mrg_r1` with a correct normal report credited by its
  MCCS part (rewards/mccs.py, `mccs_normal`; issue 42).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from rewards.registry import named_reward, register_reward
from rewards.report_part import extract_report

__all__ = ["MRG_R1_WEIGHTS", "check_weights", "make_composite"]

MRG_R1_WEIGHTS = {"mccs": 0.75, "format": 0.25}


def check_weights(weights: Mapping[str, float]) -> dict[str, float]:
    if not isinstance(weights, Mapping) or not weights:
        raise ValueError("composite reward: weights must be a non-empty mapping {reward name: weight}")
    checked: dict[str, float] = {}
    for name, weight in weights.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"composite reward: component names must be non-empty strings, got {name!r}")
        try:
            value = float(weight)
        except (TypeError, ValueError):
            raise ValueError(f"composite reward: weight of '{name}' is not a number: {weight!r}") from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"composite reward: weight of '{name}' must be finite and >= 0, got {weight!r}")
        checked[name] = value
    if sum(checked.values()) <= 0:
        raise ValueError(f"composite reward: weights must sum to > 0, got {checked}")
    return checked


def make_composite(weights: Mapping[str, float], score_report_part: bool = True) -> Callable[..., np.ndarray]:
    """A reward `sum_k weights[k] * reward_k(candidates', references, **context)`; see the module docstring."""
    checked = check_weights(weights)
    active = [(name, w) for name, w in checked.items() if w > 0]

    def composite(candidates: list[str], references: list[str], **context) -> np.ndarray:
        if len(candidates) != len(references):
            raise ValueError(f"composite reward: {len(candidates)} candidates but {len(references)} references")
        raw = list(candidates)
        reports = [extract_report(text) for text in raw] if score_report_part else raw
        total = np.zeros(len(raw), dtype=np.float64)
        for name, weight in active:
            fn = named_reward(name)
            texts = raw if getattr(fn, "scores_raw_text", False) else reports
            scores = np.asarray(fn(texts, references, **context), dtype=np.float64)
            if scores.shape != (len(raw),):
                raise ValueError(f"composite reward: component '{name}' gave shape {scores.shape}")
            total += weight * scores
        return total

    composite.__name__ = "composite_" + "_".join(f"{name}{w:g}" for name, w in checked.items())
    composite.__doc__ = "Composite reward " + " + ".join(f"{w:g} * {name}" for name, w in checked.items())
    composite.scores_raw_text = True  # it extracts the report part itself
    composite.weights = dict(checked)
    return composite


mrg_r1 = register_reward("mrg_r1")(make_composite(MRG_R1_WEIGHTS))
register_reward("mccs_format")(mrg_r1)
# MRG-R1's reward with `mccs_normal` (a correct normal report credited; rewards/mccs.py, issue 42).
mrg_r1_normal = register_reward("mrg_r1_normal")(make_composite({"mccs_normal": 0.75, "format": 0.25}))
ce_f1_format = register_reward("ce_f1_format")(make_composite({"ce_f1": 0.75, "format": 0.25}))
