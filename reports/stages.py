"""The stage table of an experiment: per arm and seed, each pipeline stage's status, time and sharing, from the
`stages` entries of index.json (harness/experiments.py writes them)."""

from __future__ import annotations

from reports.experiment import Experiment
from reports.html import Table

STAGE_ORDER = ("pretrain", "warmup", "classifier", "sft", "rl")


def _cell(entry: dict) -> str:
    cell = str(entry.get("status") or "?")
    if isinstance(entry.get("elapsed_s"), int | float):
        cell += f" {entry['elapsed_s']:.0f}s"
    if len(entry.get("shared_by") or []) > 1:
        cell += " *"
    return cell


def stage_table(exp: Experiment) -> Table | None:
    """One row per (arm, seed) run of index.json with a `stages` mapping; None when no run has one."""
    runs = [r for r in exp.index.get("runs", []) if isinstance(r.get("stages"), dict) and r["stages"]]
    if not runs:
        return None
    seen = list(dict.fromkeys(s for r in runs for s in r["stages"]))
    stages = [s for s in STAGE_ORDER if s in seen] + [s for s in seen if s not in STAGE_ORDER]
    labels = {a.name: a.label for a in exp.arms}
    rows = []
    for r in sorted(runs, key=lambda r: ([a.name for a in exp.arms].index(r["arm"])
                                         if r["arm"] in labels else len(labels), r.get("seed", 0))):
        cells = [_cell(r["stages"][s]) if s in r["stages"] else "–" for s in stages]
        rows.append([labels.get(r["arm"], r["arm"]), str(r.get("seed", 0)), *cells, str(r.get("status") or "?"),
                     str(r.get("final_stage") or "–")])
    return Table("Stages: every run's pipeline", ["Arm", "Seed", *stages, "Run", "Final stage"], rows,
                 ["Each stage cell: status and wall time of the stage run; * = one stage run shared by several "
                  "arms of this seed (same configuration key, trained once). From index.json."])
