"""The best-validation policy: one rule for every arm's selected policy and for VAPR's anchor.

REVA-PO (Sec. 3.3.3, Algorithm 1 lines 12-14) keeps theta_best, the policy with the highest validation score
s_val seen so far, and the official runner tests that checkpoint for every arm. The tracker below is the single
place that decides "best": the RL loop calls it after every validation, VAPR resets to the snapshot it keeps
(``"best"`` in the SnapshotStore), and ``rl.select: best_val`` saves it. So a VAPR arm and an arm with a static
reference are selected by exactly the same rule.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.policy.snapshots import SnapshotStore

SELECT_RULES = ("best_val", "final")


@dataclass
class BestTracker:
    """Keeps the ``"best"`` snapshot. ``include_start``: whether the policy RL starts from (the validation at step 0)
    may be best; the official code starts from best = -inf, so the first VAPR reset always lands on a trained
    policy. Ties keep the earlier policy (a new best must score strictly higher); a NaN score is never best."""

    include_start: bool = False
    score: float | None = None
    step: int | None = None
    epoch: float | None = None

    def observe(self, store: SnapshotStore, score: float, step: int, epoch: float, candidate: bool = True) -> bool:
        """Capture the live policy as ``"best"`` when it beats the best so far; True when it did."""
        score = float(score)
        if not candidate or math.isnan(score) or (step == 0 and not self.include_start):
            return False
        if self.score is not None and score <= self.score:
            return False
        store.capture("best")
        self.score, self.step, self.epoch = score, step, epoch
        return True

    def state_dict(self) -> dict[str, Any]:
        # plain floats/ints: checkpoints are read with weights_only=True (harness/runs/checkpoint_io.py)
        def plain(v, kind):
            return None if v is None else kind(v)

        return {"score": plain(self.score, float), "step": plain(self.step, int), "epoch": plain(self.epoch, float)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.score, self.step, self.epoch = state.get("score"), state.get("step"), state.get("epoch")

    def log_stats(self) -> dict[str, Any]:
        return {f"best_{k}": v for k, v in asdict(self).items() if k != "include_start"}
