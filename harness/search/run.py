"""Optuna searches over a study's knobs (RER's beta bounds, VAPR's M, the old-policy period N, ...).

A search file (experiments/searches/*.yaml, format in experiments/README.md) names a preset, the stages every
trial runs, fixed overrides, a search space of dotted RunConfig keys and an objective. Each trial is one arm
of an ordinary experiment (harness/experiments/) in the search's output folder:

- Optuna (ask/tell) proposes the trial's values; a bound of a parameter may name an earlier parameter, so
  ordered knobs such as `beta_min <= beta_base <= beta_max` are searched without invalid trials;
- the trial becomes arm `t0003` with those values as overrides of its stage, and runs over the search's seeds
  through `run_experiment`: stages that do not depend on the searched values (warm-up, classifier, SFT) resolve
  to the same keys in every trial, so they run once per seed and are shared by all trials;
- the objective is read from the run records: by default the validation score (Eq. 10) of the RL policy
  the arm saves and tests (rl.select: best-validation or final), `val_selected`, averaged over seeds, so a
  search optimises the score of the policy it ships. The test split is never used for selection unless the file asks
  for a `test:<metric>` objective;
- the Optuna study lives in its storage (harness/search/storage.py: an SQLite file `<out>/optuna.db` by
  default, any database URL, or a journal file for shared disks; `storage:` in the file or `--storage`), so a
  search is resumable: run the command again and it continues up to `n_trials` finished trials. Several
  drivers (processes, on one or several machines) may work on one storage at once: each stamps and heartbeats
  its trials, and a trial whose driver is gone (same host: its process is; elsewhere: no heartbeat for the
  grace period) is failed and enqueued again with the same values; since its stage runs have the same keys they
  resume from their checkpoints. A stage run another driver is executing is waited for, then reused. A stop
  signal (SIGTERM / SIGUSR1) to a driver does the same to its own unfinished trials once their stage runs have
  checkpointed, asks for no new trial and ends with `Preempted` (exit 75);
- a proposed point whose configs do not validate (the space allowed it, the config checks do not) is recorded as
  a failed trial with the reason (user attribute `error`, `invalid`) and the search goes on; at load time every
  edge of the space (each bound, with the other parameters at their middle, and every corner where there are at
  most MAX_CORNERS) is resolved, so a space whose bounds leave the validated range is refused before anything runs;
- `<out>/search.json` (format `regbench.search/1`) lists every trial with its values, objective, per-seed
  values, state and arm, and the best trial; `<out>/index.json` is the experiment index of all trial arms, so
  `regbench report` works on a search folder too. `regbench search report OUT` draws the Optuna plots;
- optional median pruning stops a trial at an RL validation (a validation callback bound to the RL stage
  raises RunPruned; the runner records the stage as pruned);
  `parallel_trials` runs several trials at once; `run_confirmation` (`regbench search confirm`) reruns the
  best trials and the preset's values over several seeds, the step that turns a one-seed ranking into a claim.

The sampler is seeded per trial (`sampler.seed` + the trial's position, i.e. its number not counting the trials
that were enqueued again), so the same history gives the same proposal: an uninterrupted search proposes the same
trials every time, and a resumed one goes on as the uninterrupted one would have.

This module drives the trials; the parts live below it: the file's fields and space (search_space.py), loading
and trials as arms (search_file.py), the objective (search_objective.py), Optuna's sampler, pruner and study
(search_optuna.py), the storage (search_storage.py) and search.json (search_summary.py).
"""

from __future__ import annotations

import copy
import functools
import math
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from harness.config import ConfigError
from harness.errors import RunPruned
from harness.experiments import DEFAULT_FUNCTIONS, Arm, Study, build_plan, run_experiment
from harness.experiments.run import check_workers, rebuild_index
from harness.experiments.workers import resolve_function
from harness.grpo.validation import ValidationCallback, ValidationEvent
from harness.runs import preemption
from harness.runs.records import atomic_write_json, read_json
from harness.runs.schema import PRUNED
from harness.search.file import experiment_study, load_search, trial_arm
from harness.search.objective import run_objective
from harness.search.optuna_study import (
    CHECKED_ATTR,
    INVALID_ATTR,
    SURPLUS_ATTR,
    counted_trials,
    open_study,
    trial_position,
    trial_sampler,
)
from harness.search.space import Search, suggest
from harness.search.storage import (
    HEARTBEAT,
    Heartbeat,
    display,
    fail_stale,
    heartbeats,
    requeue,
    retried_numbers,
    stamp,
    storage_url,
)
from harness.search.summary import SearchResult, search_summary

# A search stops after this many failed trials in a row: that is a broken setup, not a bad region of the space.
# (Invalid points do not count: they are a bad region, and they count towards n_trials, so the search ends.)
MAX_FAILURES_IN_A_ROW = 3
# Seconds between looks at the study while other drivers run the last trials.
POLL_S = 2.0

def _pruning_hook(trial) -> ValidationCallback:
    """A trainer validation callback: report the score as the trial's intermediate value; stop the run
    (RunPruned, recorded by the runner as a pruned stage) if Optuna prunes."""

    def hook(event: ValidationEvent) -> None:
        step, score = event.step, event.score
        if step == 0:  # the starting policy, the same in every trial (and it would count as "best so far")
            return
        trial.report(score, step)
        if trial.should_prune():
            raise RunPruned(f"at RL step {step}, validation score {score:.4f} is below the median of "
                            "earlier trials at that step", step, score)
    return hook


def _with_validation_callback(functions: dict | None, hook: ValidationCallback) -> dict:
    """`functions` with the RL stage bound to `hook` (in-process runs only: pruning needs workers = 1)."""
    rl = resolve_function({**DEFAULT_FUNCTIONS, **(functions or {})}["rl"])
    return {**(functions or {}), "rl": functools.partial(rl, on_validation=[hook])}

@preemption.handled  # a stop signal: the running trials checkpoint and are enqueued again; exit 75
def run_search(search: Search | str | Path, out: str | Path | None = None, *, n_trials: int | None = None,
               workers: int = 1, parallel_trials: int = 1, functions: dict[str, str] | None = None,
               log: Callable[[str], None] | None = None, argv: list[str] | None = None,
               launcher: str | None = None, stages_dir: str | Path | None = None, storage: str | None = None,
               heartbeat: Heartbeat = HEARTBEAT, executor: str = "local", slurm=None) -> SearchResult:
    """Run trials until `n_trials` (default: the file's) have finished; see the module docstring.

    `parallel_trials` K asks Optuna for K trials at a time and runs them as K arms of one experiment in K
    worker processes (each on its own GPU where there are several; TPE then uses its constant-liar mode).
    `storage` (a URL or spec, harness/search/storage.py) replaces the file's `storage:`. Other drivers may run
    the same search on the same storage at the same time: this one asks only for the trials still missing
    (not finished, not running elsewhere) and waits for the others' last trials. `executor` "slurm" runs each
    batch of trials' stage runs as Slurm jobs (run_experiment; `slurm`: its SlurmOptions)."""
    # lazy: start-up cost (optuna)
    import optuna
    from optuna.trial import TrialState


    if not isinstance(search, Search):
        search = load_search(search)
    if n_trials is not None and n_trials < 1:
        raise ConfigError(f"--n-trials must be >= 1, got {n_trials}")
    if parallel_trials < 1:
        raise ConfigError(f"--parallel-trials must be >= 1, got {parallel_trials}")

    check_workers(workers)
    pruning = search.pruner.get("name") == "median"
    if pruning and (launcher or workers > 1 or parallel_trials > 1 or executor != "local"):
        raise ConfigError("pruning follows the RL stage's validations in this process: run the search with "
                          "--workers 1, --parallel-trials 1, the local executor and without --launcher, or set "
                          "pruner: {name: none}")
    if launcher and parallel_trials > 1:
        raise ConfigError("--launcher runs one stage at a time over all processes: use --parallel-trials 1")
    out = Path(out) if out else Path("runs") / f"{search.name}-{search.preset}"
    log = log or (lambda s: print(s, flush=True))
    target = n_trials or search.n_trials
    parallel = parallel_trials > 1
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study, store = open_study(out, search, parallel=parallel, storage=storage, heartbeat=heartbeat)
    shown_url = display(storage_url(storage or search.storage, out))
    name = f"[search {search.name}]"

    def arms_so_far() -> list[Arm]:
        """Every trial with checked values (this batch and other drivers' running ones included)."""
        trials = study.get_trials(deepcopy=False)
        retried = retried_numbers(trials)
        return [trial_arm(search, t.number, t.params) for t in trials
                if t.params and t.number not in retried and not t.user_attrs.get(INVALID_ATTR)
                and not t.user_attrs.get(SURPLUS_ATTR)
                and (t.state != TrialState.RUNNING or t.system_attrs.get(CHECKED_ATTR))]

    def write_summary() -> dict:
        summary = search_summary(search, study, out, shown_url)
        atomic_write_json(out / "search.json", summary)
        return summary

    failures_in_a_row = 0
    while True:
        fail_stale(study, store, heartbeat, lambda s: log(f"{name} {s}"))
        finished = len(counted_trials(study))
        if finished >= target:
            break
        if preemption.requested():  # a stop signal: no new trial (the finished ones are in the storage)
            write_summary()
            preemption.check(f"search {search.name} ({out})", f"{finished} of {target} trials finished")
        running = len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
        slots = min(parallel_trials, target - finished - running)
        if slots <= 0:  # the last trials run in other drivers: wait (a dead one's come back through fail_stale)
            write_summary()
            time.sleep(POLL_S)
            continue
        batch = []
        for _ in range(slots):
            with warnings.catch_warnings():  # heartbeats are recorded here, by `heartbeats` below
                warnings.filterwarnings("ignore", message="Heartbeat of storage")
                trial = study.ask()
            tid = stamp(store, study, trial.number)
            position = trial_position(study, trial.number)
            if position >= target:  # another driver asked for the last trial at the same time
                trial.set_user_attr(SURPLUS_ATTR, True)
                study.tell(trial, state=TrialState.FAIL)
                continue
            study.sampler = trial_sampler(search, position, parallel)  # the proposal depends on the history only
            arm = trial_arm(search, trial.number, suggest(trial, search.params))
            error = _plan_error(search, arm, out, stages_dir)
            if error:
                trial.set_user_attr("error", f"invalid point: {error}")
                trial.set_user_attr(INVALID_ATTR, True)
                study.tell(trial, state=TrialState.FAIL)
                log(f"{name} trial {trial.number} ({position + 1}/{target}): invalid point, recorded as failed; "
                    f"the search goes on: {error}")
                continue
            store.set_trial_system_attr(tid, CHECKED_ATTR, True)
            batch.append((trial, arm, tid))
            log(f"{name} trial {trial.number} ({position + 1}/{target}): {arm.label.split(': ', 1)[1]}")
        if not batch:
            write_summary()
            continue
        t0 = time.time()
        fns = _with_validation_callback(functions, _pruning_hook(batch[0][0])) if pruning else functions
        with heartbeats(store, [tid for _, _, tid in batch], heartbeat.interval):
            result = run_experiment(experiment_study(search, arms_so_far()), out,
                                    workers=max(workers, len(batch)) if len(batch) > 1 else workers,
                                    arms=[arm.name for _, arm, _ in batch], functions=fns, log=log,
                                    argv=argv, launcher=launcher, stages_dir=stages_dir, wait_for_locks=True,
                                    executor=executor, slurm=slurm)
        for trial, arm, tid in batch:
            runs = [r for r in result.index["runs"] if r["arm"] == arm.name]
            if result.preempted and not all(r["status"] in TRIAL_ENDS for r in runs):
                _requeue_preempted(study, store, tid)  # its stage runs checkpointed: the rerun resumes them
                log(f"{name} trial {trial.number} preempted: enqueued again with the same values")
                continue
            outcome = _tell(search, study, trial, runs, out)
            if outcome.startswith("failed"):
                failures_in_a_row += 1
            else:
                failures_in_a_row = 0
            log(f"{name} trial {trial.number} {outcome} ({time.time() - t0:.0f}s)")
            if failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
                write_summary()
                last = outcome.removeprefix("failed ")
                raise RuntimeError(f"search {search.name}: {failures_in_a_row} trials in a row failed, the last "
                                   f"{last}. Stopped (a broken setup, not a bad region of the space); fix it and "
                                   f"run the same command to continue ({out / 'search.json'})")
        write_summary()
    # index.json from the storage's trials and the stage folders: other drivers' trials are listed as they are
    # now, not as this driver planned them (a trial another driver completed would show as pending).
    arms = arms_so_far()
    if arms:
        rebuild_index(experiment_study(search, arms), out, stages_dir=stages_dir, argv=argv,
                      outcomes=trial_outcomes(search, study))
    summary = write_summary()
    if summary["best"]:
        b = summary["best"]
        log(f"{name} best: trial {b['number']} ({search.objective.metric} = {b['objective']:.4f}) {b['values']}")
    return SearchResult(out, summary)

# The statuses of a trial's runs that end it (anything else, after a stop signal, is a run left to resume).
TRIAL_ENDS = ("complete", "failed", PRUNED)


def _requeue_preempted(study, store, tid: int) -> None:
    """A trial whose runs a stop signal interrupted: failed and enqueued again with the same values (as a gone
    driver's, harness/search/storage.py), so the rerun asks for it first and its stage runs resume from their
    checkpoints; it does not count towards n_trials, nor as a failure."""
    # lazy: start-up cost (optuna)
    from optuna.trial import TrialState

    store.set_trial_user_attr(tid, "error", f"preempted by {preemption.requested()}: enqueued again")
    store.set_trial_state_values(tid, TrialState.FAIL)
    requeue(study, store.get_trial(tid))


def trial_outcomes(search: Search, study) -> dict[str, tuple[str, str]]:
    """{arm: ("failed" or "pruned", why)} of the study's failed and pruned trials, as the storage records them."""
    # lazy: start-up cost (optuna)
    from optuna.trial import TrialState

    out = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL, TrialState.PRUNED)):
        if t.params and not t.user_attrs.get(INVALID_ATTR) and not t.user_attrs.get(SURPLUS_ATTR):
            name = trial_arm(search, t.number, t.params).name
            if t.state == TrialState.PRUNED:
                out[name] = (PRUNED, f"pruned {t.user_attrs.get('pruned', '')}".strip())
            else:
                out[name] = ("failed", t.user_attrs.get("error") or "failed")
    return out


def _plan_error(search: Search, arm: Arm, out: Path, stages_dir: str | Path | None) -> str | None:
    """Why a trial's arm cannot be planned (its configs do not validate), or None. Planning writes nothing."""
    try:
        build_plan(experiment_study(search, [arm]), out, stages_dir=stages_dir)
    except ConfigError as e:
        return str(e)
    return None


def _tell(search: Search, study, trial, runs: list[dict], out: Path) -> str:
    """Tell Optuna how a trial's runs (its rows of the experiment index) went; a line for the log."""
    # lazy: start-up cost (optuna)
    from optuna.trial import TrialState

    pruned = [r for r in runs if r["status"] == "pruned"]
    if pruned:  # the runner's structured record of a RunPruned (see _pruning_hook)
        why = pruned[0]["stages"][pruned[0]["failed_stage"]]["pruned"]
        trial.set_user_attr("pruned", why)
        study.tell(trial, state=TrialState.PRUNED)
        return f"pruned {why}"
    failed = [r for r in runs if r["status"] != "complete"]
    per_seed, error = {}, None
    if failed:
        error = failed[0]["error"] or f"seed {failed[0]['seed']}: {failed[0]['status']}"
    else:
        try:
            per_seed = {str(r["seed"]): run_objective(out, r, search.objective.metric) for r in runs}
        except (ValueError, OSError, KeyError) as e:
            error = f"objective: {e}"
    if not error and not all(math.isfinite(v) for v in per_seed.values()):
        error = f"objective {search.objective.metric} is not a number: {per_seed} (a diverged run?)"
    if error:
        trial.set_user_attr("error", error)
        study.tell(trial, state=TrialState.FAIL)
        return f"failed with: {error}"
    value = sum(per_seed.values()) / len(per_seed)
    trial.set_user_attr("per_seed", per_seed)
    study.tell(trial, value)
    best = study.best_trial
    return f"{search.objective.metric} = {value:.4f}; best so far: trial {best.number} = {best.value:.4f}"

# ---------------------------------------------------------------------------------------------------------
# Confirming the best trials over several seeds

PRESET_ARM = "preset"


def confirmation_study(out: str | Path, top: int = 3, seeds: list[int] | None = None) -> Study:
    """A study of the search's `top` best complete trials plus arm `preset` (the fixed overrides on the
    preset's own values of the searched keys, e.g. the paper's beta bounds: the reference), over `seeds`."""
    if top < 1:
        raise ConfigError(f"--top must be >= 1, got {top}")
    out = Path(out)
    summary = read_json(out / "search.json")
    search = load_search(summary["search_file"], preset=summary.get("preset_file"), sets=summary.get("sets"))
    direction = summary["objective"]["direction"]
    complete = [t for t in summary["trials"] if t["state"] == "complete" and t["objective"] is not None]
    if not complete:
        raise ValueError(f"{out / 'search.json'}: no complete trial to confirm")
    complete.sort(key=lambda t: t["objective"], reverse=direction == "maximize")
    arms = [Arm(name=PRESET_ARM, label=f"preset ({search.preset}) values of the searched keys",
                pipeline=list(search.pipeline), overrides=copy.deepcopy(search.fixed), factors={})]
    for t in complete[:top]:
        arm = trial_arm(search, t["number"], t["values"])
        arm.label = f"{arm.label} (search {summary['objective']['metric']} {t['objective']:.4f})"
        arms.append(arm)
    study = experiment_study(search, arms)
    study.name, study.title = f"{search.name}_confirm", f"{search.title}: the best {len(arms) - 1} trials, confirmed"
    study.baseline = PRESET_ARM
    study.seeds = list(seeds or [0, 1, 2])
    return study


def run_confirmation(out: str | Path, top: int = 3, seeds: list[int] | None = None, *, workers: int = 2,
                     functions: dict[str, str] | None = None, log: Callable[[str], None] | None = None,
                     launcher: str | None = None, executor: str = "local", slurm=None):
    """Run `confirmation_study` into `<out>/confirm`, sharing the search's stage runs (so the searched seed's
    warm-up, SFT and trial RL runs are reused); returns the ExperimentResult."""
    out = Path(out)
    study = confirmation_study(out, top, seeds)
    index = read_json(out / "index.json")
    stages_dir = (out / index.get("stages_dir", "stages")).resolve()
    return run_experiment(study, out / "confirm", workers=workers, functions=functions, log=log,
                          launcher=launcher, stages_dir=stages_dir, executor=executor, slurm=slurm)
