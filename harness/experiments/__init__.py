"""Experiment runner: a study (experiments/*.yaml) = arms x seeds over a preset, run as one dependency graph.

A study file starts with `base: presets/<preset>.yaml` and lists arms (a name, per-stage overrides, the
stages it runs), its baseline arm (the arm every comparison is against), seeds and the published table it
reproduces (experiments/README.md has the format). The runner

- resolves every (arm, seed, stage) into a validated RunConfig (through `harness.config.load_config`);
- keys each stage run by a hash of its resolved config (locations left out) and the keys of its inputs, so
  arms that resolve to the same stage run share one run directory (`<out>/stages/<stage>-seed<k>-<key>`),
  e.g. warm-up, classifier and SFT once per seed for all RL arms; the tiny preset's stage 0 and the phantom
  data are nodes of the graph too, so no two processes ever build the same folder;
- runs the graph in `workers` spawned processes (`torch.set_num_threads(1)` in each; one worker runs in this
  process), skipping what is complete (metrics.json) and resuming what was interrupted (the stages resume from
  their checkpoints);
- evaluates each arm's final model on the test split into `<out>/<arm>/seed<k>/eval/`, links the arm's
  stage runs into `<out>/<arm>/seed<k>/`, and keeps `<out>/index.json` (atomic writes) up to date;
- keeps each finished evaluation under `<stages>/evals/` too, so a study sharing the stages folder whose arm
  evaluates the same model the same way takes it from there instead of decoding the test set again.
A failing stage fails the arms that need it (recorded in the index with the error) and nothing else.

Modules, one job each (each imports only those before it, in reading order):
  study.py    study files -> Study / Arm          resolve.py  (study, arm, stage, seed) -> RunConfig, stage keys
  plan.py     the graph of nodes and runs         nodes.py    the functions that run each kind of node
  workers.py  locks, worker processes, launchers  index.py    index.json from the plan
  run.py      run_experiment                      resources.py  a preset's `resources:` (per job, for Slurm)
  eval_cache.py  finished test evaluations kept in the stages folder and taken by studies that share it
  graph_run.py  the graph while it runs, with a backend that runs its nodes: local.py (worker processes), slurm.py
  slurm.py    --executor slurm: every node a Slurm job (submitit), afterok dependencies, resubmission, status
  contrasts.py  a study's `contrasts:` / `decide:` (read by study.py)   plan_text.py  the plan as text
  slurm_queue.py  job states and the cluster's commands   slurm_job.py  what a job runs (both used by slurm.py)
"""

from harness.experiments.index import INDEX_FORMAT, build_index
from harness.experiments.nodes import DEFAULT_FUNCTIONS, evaluate_final, prepare_data
from harness.experiments.plan import NODE_ORDER, Node, Plan, RunPlan, build_plan
from harness.experiments.plan_text import describe_plan
from harness.experiments.resolve import config_key, resolve_config, stage_document, yaml_scalar
from harness.experiments.run import ExperimentResult, run_experiment
from harness.experiments.study import (
    MODEL_STAGES,
    NAME_PATTERN,
    OVERRIDE_SCOPES,
    STAGES,
    Arm,
    Study,
    check_overrides,
    check_pipeline,
    check_seeds,
    load_study,
    merge_over_preset,
)
from harness.experiments.workers import (
    DIE_WITH_PARENT_ENV,
    LAUNCHED_STAGES,
    LOCK_POLL_S,
    WORKER_THREADS,
    die_with_parent,
    die_with_parent_if_launched,
    execute_node,
    gpu_slots,
    launch_stage,
)
from harness.runs.lock import LOCK_NAME  # the lock file's name, for callers

__all__ = [
    "DEFAULT_FUNCTIONS",
    "DIE_WITH_PARENT_ENV",
    "INDEX_FORMAT",
    "LAUNCHED_STAGES",
    "LOCK_NAME",
    "LOCK_POLL_S",
    "MODEL_STAGES",
    "NAME_PATTERN",
    "NODE_ORDER",
    "OVERRIDE_SCOPES",
    "STAGES",
    "WORKER_THREADS",
    "Arm",
    "ExperimentResult",
    "Node",
    "Plan",
    "RunPlan",
    "Study",
    "build_index",
    "build_plan",
    "check_overrides",
    "check_pipeline",
    "check_seeds",
    "config_key",
    "describe_plan",
    "die_with_parent",
    "die_with_parent_if_launched",
    "evaluate_final",
    "execute_node",
    "gpu_slots",
    "launch_stage",
    "load_study",
    "merge_over_preset",
    "prepare_data",
    "resolve_config",
    "run_experiment",
    "stage_document",
    "yaml_scalar",
]
