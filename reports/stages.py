"""The stage table of an experiment: per arm and seed, each pipeline stage's status, time and sharing, from the
`stages` entries of index.json (harness/experiments/index.py writes them; layout: harness/runs/schema.py)."""

from __future__ import annotations

from harness.runs.schema import NOT_REQUESTED, IndexKey, RunKey, StageKey
from reports.experiment import Experiment
from reports.html import Table

STAGE_ORDER = ("pretrain", "warmup", "classifier", "sft", "rl")


def _cell(entry: dict) -> str:
    cell = str(entry.get(StageKey.STATUS) or "?")
    if isinstance(entry.get(StageKey.ELAPSED_S), int | float):
        cell += f" {entry[StageKey.ELAPSED_S]:.0f}s"
    if len(entry.get(StageKey.SHARED_BY) or []) > 1:
        cell += " *"
    return cell


def stage_table(exp: Experiment) -> Table | None:
    """One row per (arm, seed) run of index.json with a `stages` mapping; None when no run has one."""
    runs = [r for r in exp.index.get(IndexKey.RUNS, []) if isinstance(r.get(RunKey.STAGES), dict) and r[RunKey.STAGES]
            and r.get(RunKey.STATUS) != NOT_REQUESTED]  # a subset run's page is about the runs it was asked for
    if not runs:
        return None
    seen = list(dict.fromkeys(s for r in runs for s in r[RunKey.STAGES]))
    stages = [s for s in STAGE_ORDER if s in seen] + [s for s in seen if s not in STAGE_ORDER]
    labels = {a.name: a.label for a in exp.arms}
    rows = []
    for r in sorted(runs, key=lambda r: ([a.name for a in exp.arms].index(r[RunKey.ARM])
                                         if r[RunKey.ARM] in labels else len(labels), r.get(RunKey.SEED, 0))):
        cells = [_cell(r[RunKey.STAGES][s]) if s in r[RunKey.STAGES] else "–" for s in stages]
        rows.append([labels.get(r[RunKey.ARM], r[RunKey.ARM]), str(r.get(RunKey.SEED, 0)), *cells,
                     str(r.get(RunKey.STATUS) or "?"), str(r.get(RunKey.FINAL_STAGE) or "–")])
    return Table("Stages: every run's pipeline", ["Arm", "Seed", *stages, "Run", "Final stage"], rows,
                 ["Each stage cell: status and wall time of the stage run; * = one stage run shared by several "
                  "arms of this seed (same configuration key, trained once). From index.json."])
