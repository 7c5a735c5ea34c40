"""EMA reference: the reference slowly tracks the current policy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from regularizers.registry import ReferenceStrategy, register_reference

if TYPE_CHECKING:
    from harness.policy.snapshots import SnapshotStore


@register_reference("ema")
@dataclass
class EMAReference(ReferenceStrategy):
    """Every ``ema_period`` optimizer steps: ``ref <- (1 - ema_rate) * ref + ema_rate * theta``.

    ``ema_rate = 0`` is the static reference; ``ema_rate = 1`` with ``ema_period = k`` copies the policy every k
    steps. The average is taken over the trainable parameters as stored, so with LoRA the adapters' A and B
    are averaged separately: the reference's weight update is EMA(B) EMA(A), which is not EMA(BA) (the average
    of the weight updates). Parameter-space EMA of the trained tensors is what EMA-reference methods do
    (e.g. WARP's EMA anchor, Rame et al. 2024); averaging BA would need a third, full-rank copy per layer.
    """

    ema_rate: float = 0.01
    ema_period: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.ema_rate <= 1.0:
            raise ValueError(f"ema_rate must be in [0, 1], got {self.ema_rate}")
        if self.ema_period < 1:
            raise ValueError(f"ema_period must be >= 1 step, got {self.ema_period}")

    def after_step(self, store: SnapshotStore, step: int) -> dict[str, Any]:
        if step > 0 and step % self.ema_period == 0:
            store.ema_("ref", self.ema_rate)
            return {"ref_updated": True}
        return {}
