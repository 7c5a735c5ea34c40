"""A run folder whose process is "killed" while it logs one step: the resume tests of the training loops."""

from __future__ import annotations

from harness.runs.records import RunDir


class KilledAt(RunDir):
    """RunDir that raises KeyboardInterrupt when step `step` is logged (the step is lost, as in a kill during it;
    the checkpoints written before it stay)."""

    def __init__(self, path, step: int):
        super().__init__(path)
        self.kill_step = step

    def log_step(self, row):
        if row["step"] == self.kill_step:
            raise KeyboardInterrupt
        super().log_step(row)
