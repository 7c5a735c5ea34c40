"""EMA reference: the reference slowly tracks the current policy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from regularizers.registry import ReferenceStrategy, register_reference

if TYPE_CHECKING:
    from harness.snapshots import SnapshotStore


@register_reference("ema")
@dataclass
class EMAReference(ReferenceStrategy):
    """Every ``period`` optimizer steps: ``ref <- (1 - rate) * ref + rate * theta``.

    ``rate = 0`` is the static reference; ``rate = 1`` with ``period = k`` copies the policy every k steps.
    """

    rate: float = 0.01
    period: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"EMA rate must be in [0, 1], got {self.rate}")
        if self.period < 1:
            raise ValueError(f"EMA period must be >= 1 step, got {self.period}")

    def after_step(self, store: SnapshotStore, step: int) -> dict[str, Any]:
        if step > 0 and step % self.period == 0:
            store.ema_("ref", self.rate)
            return {"ref_updated": True}
        return {}
