"""The experiment's index.json: every run's status, stage runs and test metrics, built from the plan."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from harness.experiments.plan import Plan, RunPlan
from harness.runs.records import git_commit, read_json
from harness.runs.schema import (
    ANALYSIS_STAGE,
    INDEX_FORMAT,
    METRICS_FILE,
    NOT_REQUESTED,
    PRUNED,
    RUN_STATUSES,
    IndexKey,
    RunKey,
    StageKey,
)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _rel(plan: Plan, p: Path | None) -> str | None:
    return None if p is None else os.path.relpath(p, plan.out)


def run_status(plan: Plan, rp: RunPlan) -> tuple[str, str | None, str | None]:
    """(status, error, failed stage) of one run from its nodes."""
    ev = plan.nodes[rp.eval_node]
    if ev.status == "complete":
        return "complete", None, None
    chain = [plan.nodes[i] for i in (*rp.upstream.values(), *rp.stages.values(), rp.eval_node)]
    supports = {d for n in chain for d in n.deps if plan.nodes[d].kind in ("data", "test_data", "pretrain")}
    for n in [plan.nodes[d] for d in sorted(supports)] + chain:
        if n.status == "failed":
            return "failed", f"stage {n.kind}: {n.error}", n.kind
        if n.status == PRUNED:
            return PRUNED, f"stage {n.kind} pruned: {n.error}", n.kind
    if any(n.status == "running" for n in chain):
        return "running", None, None
    return "pending", None, None


def requested_runs(index: dict) -> set[tuple[str, int]] | None:
    """The (arm, seed) runs an index says its runner calls were asked for; None: not recorded (every run)."""
    pairs = index.get(IndexKey.REQUESTED)
    if not isinstance(pairs, list):
        return None
    return {(str(a), int(s)) for a, s in pairs}


def build_index(plan: Plan, run_info: dict, created: str, argv: list[str] | None = None,
                executor: str = "local", requested: set[tuple[str, int]] | None = None) -> dict:
    """index.json's content (layout: harness/runs/schema.py). `requested`: the runs the runner calls were asked
    for (a subset run, `--arms a,b`); a run outside it that is not complete is `not requested`, not pending."""
    study = plan.study
    runs, summary = [], dict.fromkeys(RUN_STATUSES, 0)
    for (arm, seed), rp in plan.runs.items():
        status, error, failed_stage = run_status(plan, rp)
        if status == "pending" and requested is not None and (arm, seed) not in requested:
            status = NOT_REQUESTED
        summary[status] = summary.get(status, 0) + 1  # PRUNED only where a search pruned a run
        stages = {}
        for stage, nid in rp.stages.items():
            n = plan.nodes[nid]
            stages[stage] = {StageKey.KEY: n.key, StageKey.DIR: _rel(plan, n.run_dir), StageKey.STATUS: n.status,
                             StageKey.ELAPSED_S: n.elapsed_s,
                             StageKey.SHARED_BY: sorted({a for a, s in n.users if s == seed})}
            if stage in rp.init_from:
                stages[stage][StageKey.INIT_FROM] = rp.init_from[stage]
            if stage in rp.upstream:  # the upstream study's stage run it starts from (study field `upstream`)
                u = plan.nodes[rp.upstream[stage]]
                stages[stage][StageKey.UPSTREAM] = {"study": plan.study.upstream.study.name, "stage": u.kind,
                                                    StageKey.KEY: u.key, StageKey.DIR: _rel(plan, u.run_dir),
                                                    StageKey.STATUS: u.status}
            if n.error:
                stages[stage][StageKey.PRUNED if n.status == PRUNED else StageKey.ERROR] = n.error
            if n.jobs:
                stages[stage][StageKey.SLURM_JOBS] = list(n.jobs)
        ev = plan.nodes[rp.eval_node]
        info = run_info.get((arm, seed), {})
        if rp.analysis_node:
            an = plan.nodes[rp.analysis_node]
            stages[ANALYSIS_STAGE] = {StageKey.KEY: an.key, StageKey.DIR: _rel(plan, an.run_dir),
                                      StageKey.STATUS: an.status, StageKey.ELAPSED_S: an.elapsed_s,
                                      StageKey.KINDS: an.config["kinds"],
                                      **({StageKey.ERROR: an.error} if an.error else {}),
                                      **({StageKey.SLURM_JOBS: list(an.jobs)} if an.jobs else {})}
        runs.append({
            RunKey.ARM: arm, RunKey.SEED: seed, RunKey.DIR: _rel(plan, rp.dir), RunKey.STATUS: status,
            RunKey.ERROR: error, RunKey.FAILED_STAGE: failed_stage, RunKey.FINAL_STAGE: rp.final_stage,
            RunKey.EVAL_DIR: _rel(plan, ev.run_dir),
            RunKey.METRICS: _rel(plan, ev.run_dir / METRICS_FILE) if status == "complete" else None,
            RunKey.EVAL_KEY: ev.key, RunKey.ELAPSED_S: info.get("elapsed_s"), RunKey.STAGES: stages,
            **({RunKey.EVAL_SLURM_JOBS: list(ev.jobs)} if ev.jobs else {}),
        })
    return {
        IndexKey.FORMAT: INDEX_FORMAT, IndexKey.STUDY: study.name, IndexKey.TITLE: study.title,
        IndexKey.STUDY_FILE: str(study.path), IndexKey.PRESET: study.preset,
        IndexKey.PRESET_FILE: str(study.preset_file), IndexKey.REPRODUCES: study.reproduces,
        IndexKey.BASELINE_ARM: study.baseline, IndexKey.PUBLISHED_DATASET: study.published_dataset,
        IndexKey.SEEDS: plan.seeds, IndexKey.ARMS: [a.describe() for a in study.arms],
        IndexKey.CONTRASTS: study.contrasts, IndexKey.DECIDE: study.decide, IndexKey.TEST_REPORTS: study.test_reports,
        IndexKey.STAGES_DIR: _rel(plan, plan.stages_root), IndexKey.RUNS: runs, IndexKey.SUMMARY: summary,
        **({IndexKey.REQUESTED: sorted([a, s] for a, s in requested)} if requested is not None else {}),
        IndexKey.CREATED: created, IndexKey.UPDATED: now(), IndexKey.GIT_COMMIT: git_commit(),
        IndexKey.ARGV: list(argv if argv is not None else sys.argv), IndexKey.EXECUTOR: executor,
        **({IndexKey.SLURM_JOBS: {nid: list(n.jobs) for nid, n in plan.nodes.items() if n.jobs}}
           if executor == "slurm" else {}),
        IndexKey.STAGE_EVALS: {stage: _stage_eval(plan, plan.nodes[nid]) for stage, nid in plan.stage_evals.items()},
    }


def _stage_eval(plan: Plan, node) -> dict:
    """index.json's record of one `stage_evals` node (StageKey names; `metrics` once it is complete)."""
    done = node.status == "complete"
    return {StageKey.KEY: node.key, StageKey.DIR: _rel(plan, node.run_dir), StageKey.STATUS: node.status,
            StageKey.ELAPSED_S: node.elapsed_s,
            RunKey.METRICS: _rel(plan, node.run_dir / METRICS_FILE) if done else None,
            **({StageKey.ERROR: node.error} if node.error else {})}


def created_at(index_path: Path) -> str:
    """When the experiment's index was first written (kept across reruns), else now."""
    created = now()
    if index_path.is_file():
        try:
            created = read_json(index_path).get(IndexKey.CREATED, created)
        except (ValueError, OSError):
            pass
    return created


def recorded_requests(index_path: Path) -> set[tuple[str, int]] | None:
    """The runs an earlier index says were asked for (None: no index, or one that predates the record)."""
    if not index_path.is_file():
        return None
    try:
        return requested_runs(read_json(index_path))
    except (ValueError, OSError, TypeError):
        return None
