"""The experiment's index.json: every run's status, stage runs and test metrics, built from the plan."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from harness.experiments.plan import Plan, RunPlan
from harness.records import git_commit

INDEX_FORMAT = "regbench.experiment-index/1"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _rel(plan: Plan, p: Path | None) -> str | None:
    return None if p is None else os.path.relpath(p, plan.out)


def run_status(plan: Plan, rp: RunPlan) -> tuple[str, str | None, str | None]:
    """(status, error, failed stage) of one run from its nodes."""
    ev = plan.nodes[rp.eval_node]
    if ev.status == "complete":
        return "complete", None, None
    chain = [plan.nodes[i] for i in (*rp.stages.values(), rp.eval_node)]
    supports = {d for n in chain for d in n.deps if plan.nodes[d].kind in ("data", "pretrain")}
    for n in [plan.nodes[d] for d in sorted(supports)] + chain:
        if n.status == "failed":
            return "failed", f"stage {n.kind}: {n.error}", n.kind
    if any(n.status == "running" for n in chain):
        return "running", None, None
    return "pending", None, None


def build_index(plan: Plan, run_info: dict, created: str, argv: list[str] | None = None) -> dict:
    study = plan.study
    runs, summary = [], {"complete": 0, "failed": 0, "pending": 0, "running": 0}
    for (arm, seed), rp in plan.runs.items():
        status, error, failed_stage = run_status(plan, rp)
        summary[status] += 1
        stages = {}
        for stage, nid in rp.stages.items():
            n = plan.nodes[nid]
            stages[stage] = {"key": n.key, "dir": _rel(plan, n.run_dir), "status": n.status,
                             "elapsed_s": n.elapsed_s, "shared_by": sorted({a for a, s in n.users if s == seed})}
            if stage in rp.init_from:
                stages[stage]["init_from"] = rp.init_from[stage]
            if n.error:
                stages[stage]["error"] = n.error
        ev = plan.nodes[rp.eval_node]
        info = run_info.get((arm, seed), {})
        if rp.analysis_node:
            an = plan.nodes[rp.analysis_node]
            stages["analysis"] = {"key": an.key, "dir": _rel(plan, an.run_dir), "status": an.status,
                                  "elapsed_s": an.elapsed_s, "kinds": an.config["kinds"],
                                  **({"error": an.error} if an.error else {})}
        runs.append({
            "arm": arm, "seed": seed, "dir": _rel(plan, rp.dir), "status": status, "error": error,
            "failed_stage": failed_stage, "final_stage": rp.final_stage, "eval_dir": _rel(plan, ev.run_dir),
            "metrics": _rel(plan, ev.run_dir / "metrics.json") if status == "complete" else None,
            "eval_key": ev.key, "elapsed_s": info.get("elapsed_s"), "stages": stages,
        })
    return {
        "format": INDEX_FORMAT, "study": study.name, "title": study.title, "study_file": str(study.path),
        "preset": study.preset, "preset_file": str(study.preset_file), "reproduces": study.reproduces,
        "reference_arm": study.reference, "published_dataset": study.published_dataset, "seeds": plan.seeds,
        "arms": [a.describe() for a in study.arms],
        "stages_dir": _rel(plan, plan.stages_root), "runs": runs, "summary": summary, "created": created,
        "updated": now(), "git_commit": git_commit(),
        "argv": list(argv if argv is not None else sys.argv),
    }
