"""Static reference: the snapshot taken at the start of RL; it never changes (the GRPO default)."""

from __future__ import annotations

from dataclasses import dataclass

from regularizers.registry import ReferenceStrategy, register_reference


@register_reference("static")
@dataclass
class StaticReference(ReferenceStrategy):
    """``ref`` = the policy at the start of RL, for the whole run."""
