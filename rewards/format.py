"""Format reward (MRG-R1, paper 002): the output must be `<think>...</think>` followed by `<report>...</report>`.

MRG-R1 states "a format-only reward that enforces a <think> -> <report> structure"; the exact layout accepted
here is this project's choice. `format` gives 1.0 to a text with that layout, exactly as rewards/report_part.py
defines it (`format_ok`), and 0.0 to anything else: a missing or unclosed tag, tags in the wrong order, a second
`<think>` or `<report>` block, text before `<think>` or after `</report>`, an empty report. The part the clinical
rewards score is `rewards.report_part.extract_report`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rewards.registry import register_reward
from rewards.report_part import format_ok

__all__ = ["format_reward"]


@register_reward("format")
def format_reward(candidates: Sequence[str], references: Sequence[str] = (), **_) -> np.ndarray:
    """MRG-R1's format reward: 1.0 for `<think>...</think><report>...</report>`, else 0.0. References unused."""
    return np.array([1.0 if format_ok(text) else 0.0 for text in candidates], dtype=np.float64)


# Composites (rewards.composite) give this reward the raw output, never the extracted report.
format_reward.scores_raw_text = True
