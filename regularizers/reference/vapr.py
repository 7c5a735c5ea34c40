"""Validation-Anchored Policy Reset (VAPR), REVA-PO Sec. 3.3.3 and Algorithm 1 lines 15-18.

Every M epochs it resets the reference, the current and the old policy to the best-validation snapshot and
clears the optimizer state, so the accumulated KL pressure drops to zero and exploration restarts from the best
anchor. Which policy is "best" is decided by the RL loop (harness/grpo/selection.py), by the same rule that
selects every arm's test checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from harness.policy.snapshots import reset_optimizer_state
from regularizers.registry import ReferenceStrategy, register_reference

if TYPE_CHECKING:
    from harness.policy.snapshots import SnapshotStore


@register_reference("vapr")
@dataclass
class VAPRReference(ReferenceStrategy):
    """Reset to the best validation snapshot after epochs M, 2M, ... (M = ``reset_every_epochs`` = 3 in the
    paper), i.e. at the start of the epoch that follows, and never after the last validation: a reset there
    would only replace the trained policy by the best one, which is the selection rule's job (``rl.select``),
    not the reference strategy's.

    ``val_every_steps``: also validate every K optimizer steps (the loop reads it); such mid-epoch validations
    can improve "best" but never trigger a reset.
    """

    reset_every_epochs: int = 3
    val_every_steps: int | None = None
    num_resets: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.reset_every_epochs < 1:
            raise ValueError(f"reset_every_epochs (M) must be >= 1, got {self.reset_every_epochs}")
        if self.val_every_steps is not None and self.val_every_steps < 1:
            raise ValueError(f"val_every_steps must be >= 1 or None, got {self.val_every_steps}")

    def after_validation(
        self,
        store: SnapshotStore,
        optimizer: torch.optim.Optimizer | None,
        epoch: int,
        step: int,
        end_of_epoch: bool = True,
        final: bool = False,
    ) -> dict[str, Any]:
        due = end_of_epoch and not final and epoch > 0 and epoch % self.reset_every_epochs == 0
        if not (due and "best" in store):
            return {"reset": False}
        # theta <- best (and the optimizer forgets its moments, and any fp32 master copy is re-synced, so the
        # reset holds after the next step); ref <- best; old <- best.
        store.restore("best")
        store.copy("best", "ref")
        store.copy("best", "old")
        if optimizer is not None:
            reset_optimizer_state(optimizer, store.parameters())
        self.num_resets += 1
        return {"reset": True, "num_resets": self.num_resets}

    def state_dict(self) -> dict[str, Any]:
        # a plain int: checkpoints are read with weights_only=True (harness/runs/checkpoint_io.py)
        return {"num_resets": int(self.num_resets)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.num_resets = int(state.get("num_resets", 0))

    def log_stats(self) -> dict[str, float]:
        return {"vapr_num_resets": float(self.num_resets)}
