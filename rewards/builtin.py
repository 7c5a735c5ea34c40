"""Registrations of the built-in rewards (each reward's code lives in its own module)."""

from __future__ import annotations

import numpy as np

from rewards.registry import register_reward


@register_reward("bleu4")
def bleu4_reward(candidates: list[str], references: list[str], **_) -> np.ndarray:
    """REVA-PO's reward: sentence BLEU-4 of the whitespace-split candidate against the cleaned reference."""
    from rewards.bleu import bleu4

    return bleu4(candidates, references)
