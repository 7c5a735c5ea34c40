"""The policy an RL run ends with: the one rl.select names (best_val or final), the same rule for every arm."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.grpo.selection import BestTracker
    from harness.policy.snapshots import SnapshotStore


def select_policy(select: str, store: SnapshotStore, best: BestTracker, evals: list[dict], step: int,
                  steps_per_epoch: int) -> dict:
    """Leave the policy that `select` names in the model (through `store`) and say where it came from. best_val
    without any candidate validation (no validation set, or a run cut before its first epoch end) keeps the final
    policy and says so. `evals`: the run's evaluation rows; `step`: the last step taken."""
    evals = [e for e in evals if e.get("split") == "val"]
    final_score = evals[-1]["val_score"] if evals and evals[-1].get("step") == step else None
    if select == "best_val" and "best" in store:
        store.restore("best")
        return {"select": "best_val", "selected_step": best.step, "selected_epoch": best.epoch,
                "selected_score": best.score, "final_step": step, "final_score": final_score}
    why = "final" if select == "final" else "final (no candidate validation for best_val)"
    return {"select": why, "selected_step": step, "selected_epoch": step / steps_per_epoch,
            "selected_score": final_score, "final_step": step, "final_score": final_score}
