"""run_experiment: the selected arms x seeds of a study, run as one dependency graph (see the package docstring).

`run_experiment` prepares the plan and hands it to an `ExperimentRun` (harness/experiments/graph_run.py) with a
backend that runs the nodes: local workers (`LocalExperimentRun`, harness/experiments/local.py) or Slurm jobs
(`SlurmExperimentRun`, harness/experiments/slurm.py). Its named steps are: pick the nodes
the selected runs still need, start every node whose inputs are complete, collect the finished ones, settle the
runs they complete or fail, and write the index after each round.

Preemption (harness/runs/preemption.py): a node whose stage was preempted (a stop signal to its worker) is
resubmitted at once, up to `max_requeues` times; it resumes from its checkpoint. A stop signal to the runner
itself (a scheduler stopping the whole job) is passed on to the worker processes; the runner starts nothing
new, waits for the running nodes to write their checkpoints, writes the index and returns with `preempted` set
(`regbench experiment run` then exits with status 75, and the same command resumes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.checks.needs import KINDS, check_needs
from harness.config import ConfigError, RunConfig, from_dict
from harness.experiments import slurm_queue
from harness.experiments.graph_run import ExperimentResult
from harness.experiments.index import build_index, created_at, recorded_requests
from harness.experiments.local import LocalExperimentRun
from harness.experiments.nodes import DEFAULT_FUNCTIONS
from harness.experiments.plan import build_plan, node_done
from harness.experiments.slurm import SlurmExperimentRun, SlurmOptions
from harness.experiments.study import STAGES, Study, load_study
from harness.runs.lock import LOCK_NAME, holder_alive, read_holders
from harness.runs.records import atomic_write_json, read_json
from harness.runs.schema import (
    INDEX_FILE,
    NOT_REQUESTED,
    PRUNED,
    IndexKey,
    RunKey,
)

# Where stage runs execute: worker processes of this machine, or jobs of a Slurm cluster.
EXECUTORS = ("local", "slurm")


def run_experiment(study: Study | str | Path, out: str | Path | None = None, *, workers: int = 2,
                   seeds: list[int] | None = None, arms: list[str] | None = None,
                   functions: dict[str, str | Callable] | None = None, log: Callable[[str], None] | None = None,
                   argv: list[str] | None = None, launcher: str | None = None,
                   stages_dir: str | Path | None = None, wait_for_locks: bool = False,
                   executor: str = "local", slurm=None,
                   runs: list[tuple[str, int]] | None = None, max_requeues: int = 3) -> ExperimentResult:
    """Run the selected arms x seeds of a study (all by default); see the package docstring.

    `runs`: exactly these (arm, seed) runs instead (their seeds must be the study's or in `seeds`), in one pool of
    workers: e.g. the demo's verdict arms on three seeds and its other arms on one.

    `stages_dir` puts the stage runs in a folder shared with other studies (see `build_plan`); a stage run
    another runner is executing (its lock file names a live process) fails here with a message saying so, or,
    with `wait_for_locks` (search drivers sharing a folder), is waited for and then reused.

    `launcher` (e.g. "torchrun --nproc_per_node 8") runs the warm-up, SFT and RL stages as launched
    multi-process commands, one at a time (so `workers` must be 1); see `launch_stage`.

    `executor` "slurm" submits every stage run as a Slurm job instead (harness/experiments/slurm.py; `slurm`: its
    SlurmOptions); `workers` then does not apply, and `launcher` runs inside the jobs of multi-GPU stages.

    `max_requeues`: how often one stage run is resubmitted after a preemption before it counts as failed."""
    if max_requeues < 0:
        raise ConfigError(f"--max-requeues must be >= 0, not {max_requeues}")
    if executor not in EXECUTORS:
        raise ConfigError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    check_workers(workers)
    if executor == "slurm":  # before the plan: a refused runner writes no index.json and no run links (issue 49)
        why = slurm_queue.slurm_available()  # looked up when called: one name for every check and its tests
        if why:
            raise ConfigError(f"--executor slurm: {why}")
    if launcher and workers > 1 and executor == "local":
        raise ConfigError(f"--launcher runs each stage over all the machine's processes: use --workers 1, not "
                          f"{workers}")
    if not isinstance(study, Study):
        study = load_study(study)
    out = Path(out) if out else Path("runs") / f"{study.name}-{study.preset}"
    log = log or (lambda s: print(s, flush=True))
    fns = {**DEFAULT_FUNCTIONS, **(functions or {})}
    for a in arms or []:
        study.arm(a)  # unknown names are errors
    plan = build_plan(study, out, with_recorded_seeds(out, seeds), stages_dir)
    if runs is not None:
        missing = [r for r in runs if tuple(r) not in plan.runs]
        if missing:
            raise ConfigError(f"{study.path.name}: runs {missing} are not in the study (arms x seeds {plan.seeds})")
        selected = [k for k in plan.runs if k in {tuple(r) for r in runs}]
    else:
        selected = [k for k in plan.runs if (not arms or k[0] in arms) and (k[1] in (seeds or study.seeds))]
    check_plan_needs(plan, selected)  # before any stage run starts: the last one must not find CheXbert missing
    if executor == "slurm":
        return SlurmExperimentRun(plan, selected, fns, log, argv, launcher, workers, wait_for_locks,
                                  slurm or SlurmOptions()).run()
    return LocalExperimentRun(plan, selected, fns, log, argv, launcher, workers, wait_for_locks, max_requeues).run()


def check_plan_needs(plan, selected: list[tuple[str, int]]) -> None:
    """The scorer weights, base model, classifier checkpoint and vLLM that the stage runs and test evaluations of
    the selected runs will need (harness/checks/needs.py), checked before the first of them starts: a test evaluation
    that needs CheXbert, or an RL validation that needs RadGraph, is refused before the hours of the stages
    that come first. Runs already complete are not checked; `classifier.dir` is left to the SFT run (in a plan
    it is the classifier run's output, which does not exist yet)."""
    chosen = set(selected)
    for node in plan.nodes.values():
        if node.kind not in (*STAGES, "eval") or not chosen & set(node.users) or node_done(node):
            continue
        try:
            check_needs(from_dict(RunConfig, node.config), node.kind, [k for k in KINDS if k != "classifier_dir"],
                        produced_under=plan.stages_root)
        except ConfigError as e:
            arm, seed = node.users[0]
            raise ConfigError(f"{plan.study.path.name}: the {node.kind} run of arm '{arm}', seed {seed}: {e}") from e


def with_recorded_seeds(out: Path, seeds: list[int] | None) -> list[int] | None:
    """`seeds` plus the seeds that out/index.json already lists: a study run into the same folder seed by seed
    (`--seeds 3`, then `--seeds 4`) keeps every earlier seed's runs in its index and its report, not only the
    study's own seeds and the last call's. None (the study's seeds) when there is nothing to add."""
    recorded: list[int] = []
    try:
        recorded = [s for s in read_json(out / INDEX_FILE).get(IndexKey.SEEDS, []) if isinstance(s, int)]
    except (OSError, ValueError, AttributeError):
        pass  # no index yet, or one that cannot be read: rebuilt from the plan
    merged = sorted(set(seeds or []) | set(recorded))
    return merged or seeds


def check_workers(workers: object, option: str = "--workers") -> None:
    """A count of worker processes: an integer >= 1 (1 runs the stage runs one at a time in this process)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"{option} = {workers!r} must be an integer >= 1 (1 runs the stage runs one at a time)")


def rebuild_index(study: Study, out: str | Path, *, stages_dir: str | Path | None = None,
                  argv: list[str] | None = None, outcomes: dict[str, tuple[str, str]] | None = None) -> dict:
    """Write `<out>/index.json` for every run of `study` from what the stage folders hold now, and return it.

    Several processes may write one index (search drivers sharing a folder); each writes what it knew when it
    planned, so the last writer can list as pending a run another process has completed since. Rebuilt from
    the folders (a run is complete when its records say so, running while a live process holds its stage's
    lock), the index is never stale; a run still not complete keeps the failure or pruning an earlier index
    recorded for it, or the one `outcomes` gives for its arm ({arm: (failed or pruned, why)}: a search's trials
    as its storage records them)."""
    plan = build_plan(study, Path(out), with_recorded_seeds(Path(out), None), stages_dir)
    for n in plan.nodes.values():
        if node_done(n):
            n.status = "complete"
        elif n.kind in STAGES and any(holder_alive(h) for h in read_holders(n.run_dir / LOCK_NAME)):
            n.status = "running"
    index_path = plan.out / INDEX_FILE
    old = {}
    if index_path.is_file():
        try:
            old = {(r[RunKey.ARM], r[RunKey.SEED]): r for r in read_json(index_path).get(IndexKey.RUNS, [])}
        except (ValueError, OSError, KeyError, TypeError):
            old = {}
    run_info = {k: {"elapsed_s": r.get(RunKey.ELAPSED_S)} for k, r in old.items()}
    index = build_index(plan, run_info, created_at(index_path), argv, requested=recorded_requests(index_path))
    rows = []
    for row in index[IndexKey.RUNS]:
        before = old.get((row[RunKey.ARM], row[RunKey.SEED]))
        outcome = (outcomes or {}).get(row[RunKey.ARM])
        waiting = row[RunKey.STATUS] in ("pending", NOT_REQUESTED)
        if waiting and before and before.get(RunKey.STATUS) in ("failed", PRUNED):
            row = before
        elif waiting and outcome:
            row = {**row, RunKey.STATUS: outcome[0], RunKey.ERROR: outcome[1]}
        rows.append(row)
    index[IndexKey.RUNS] = rows
    summary = dict.fromkeys(index[IndexKey.SUMMARY], 0)
    for r in rows:
        summary[r[RunKey.STATUS]] = summary.get(r[RunKey.STATUS], 0) + 1
    index[IndexKey.SUMMARY] = summary
    atomic_write_json(index_path, index)
    return index
