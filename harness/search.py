"""Optuna searches over a study's knobs (RER's beta bounds, VAPR's M, the old-policy period N, ...).

A search file (experiments/searches/*.yaml, format in experiments/README.md) names a preset, the stages every
trial runs, fixed overrides, a search space of dotted RunConfig keys and an objective. Each trial is one arm
of an ordinary experiment (harness/experiments.py) in the search's output folder:

- Optuna (ask/tell) proposes the trial's values; a bound of a parameter may name an earlier parameter, so
  ordered knobs such as `beta_min <= beta_base <= beta_max` are searched without invalid trials;
- the trial becomes arm `t0003` with those values as overrides of its stage, and runs over the search's seeds
  through `run_experiment`: stages that do not depend on the searched values (warm-up, classifier, SFT) resolve
  to the same keys in every trial, so they run once per seed and are shared by all trials;
- the objective is read from the run records: by default the validation score (Eq. 10) of the RL policy
  the arm saves and tests (rl.select: best-validation or final), `val_selected`, averaged over seeds, so a
  search optimises the score of the policy it ships. The test split is never used for selection unless the file asks
  for a `test:<metric>` objective;
- the Optuna study lives in its storage (harness/search_storage.py: an SQLite file `<out>/optuna.db` by
  default, any database URL, or a journal file for shared disks; `storage:` in the file or `--storage`), so a
  search is resumable: run the command again and it continues up to `n_trials` finished trials. Several
  drivers (processes, on one or several machines) may work on one storage at once: each stamps and heartbeats
  its trials, and a trial whose driver is gone (same host: its process is; elsewhere: no heartbeat for the
  grace period) is failed and enqueued again with the same values; since its stage runs have the same keys they
  resume from their checkpoints. A stage run another driver is executing is waited for, then reused;
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
"""

from __future__ import annotations

import copy
import functools
import json
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import ConfigError
from harness.errors import RunPruned
from harness.experiments import (
    DEFAULT_FUNCTIONS,
    NAME_PATTERN,
    STAGES,
    Arm,
    Study,
    _resolve_function,
    check_overrides,
    check_pipeline,
    check_seeds,
    merge_over_preset,
    resolve_config,
    run_experiment,
    yaml_scalar,
)
from harness.grpo.validation import ValidationCallback, ValidationEvent
from harness.records import atomic_write_json, read_json, read_jsonl
from harness.search_storage import HEARTBEAT, Heartbeat, fail_stale, heartbeats, retried_numbers, stamp, storage_url

SEARCH_FORMAT = "regbench.search/1"
_SEARCH_KEYS = {"search", "title", "description", "seeds", "pipeline", "n_trials", "objective", "sampler",
                "pruner", "fixed", "space", "preset", "common", "stages", "storage"}
_PARAM_KEYS = {"type", "low", "high", "log", "step", "choices", "stage"}
# Objectives read from the RL stage's evals.jsonl (validation rows after the first optimizer step) ...
VAL_OBJECTIVES = {
    "val_selected": "validation score (Eq. 10) of the RL policy the arm saves and tests (rl.select)",
    "val_final": "validation score (Eq. 10) of the final RL policy",
    "val_best": "best validation score during RL",
    "val_mean": "mean validation score during RL (rewards stable runs)",
}
# A search stops after this many failed trials in a row: that is a broken setup, not a bad region of the space.
# (Invalid points do not count: they are a bad region, and they count towards n_trials, so the search ends.)
MAX_FAILURES_IN_A_ROW = 3
# Load-time check of the space: every corner is resolved when there are at most this many (else the edges only).
MAX_CORNERS = 256
# Trial attributes: why a proposed point was not run; the driver checked the point (its arm can be planned).
INVALID_ATTR, SURPLUS_ATTR, CHECKED_ATTR = "invalid", "surplus", "regbench_checked"
# Seconds between looks at the study while other drivers run the last trials.
POLL_S = 2.0
# ... or `test:<metric>` from the arm's test evaluation (eval/metrics.json), e.g. test:BLEU_4.
TEST_PREFIX = "test:"


@dataclass
class Param:
    """One searched knob: a dotted RunConfig key of one stage's config."""

    key: str
    stage: str
    type: str                              # float | int | categorical
    low: float | int | str | None = None   # a number, or the key of an earlier parameter
    high: float | int | str | None = None
    log: bool = False
    step: float | int | None = None
    choices: list | None = None

    def bound(self, value: float | int | str | None, sampled: dict[str, Any]) -> float | int | None:
        return sampled[value] if isinstance(value, str) else value


@dataclass
class Objective:
    metric: str
    direction: str = "maximize"

    @property
    def description(self) -> str:
        if self.metric.startswith(TEST_PREFIX):
            return f"test-split {self.metric[len(TEST_PREFIX):]} of the final model"
        return VAL_OBJECTIVES[self.metric]


@dataclass
class Search:
    name: str
    title: str
    path: Path
    preset: str
    preset_file: Path
    seeds: list[int]
    pipeline: list[str]
    n_trials: int
    objective: Objective
    sampler: dict
    pruner: dict
    fixed: dict[str, Any]
    params: list[Param]
    common: dict
    stages: dict = field(default_factory=dict)
    sets: list[str] = field(default_factory=list)  # the --set overrides it was loaded with (for `confirm`)
    storage: str | None = None  # `storage:` of the file (harness/search_storage.py); None: <out>/optuna.db


# ---------------------------------------------------------------------------------------------------------
# Search files


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _parse_param(key: str, spec: Any, earlier: dict[str, Param], where: str) -> Param:
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: space.{key} must be a mapping such as {{type: float, low: 0.0, high: 1.0}}")
    bad = sorted(set(spec) - _PARAM_KEYS)
    if bad:
        raise ConfigError(f"{where}: space.{key}: unknown field '{bad[0]}'; valid: {', '.join(sorted(_PARAM_KEYS))}")
    kind = spec.get("type", "categorical" if "choices" in spec else "float")
    stage = spec.get("stage", "rl")
    if stage not in STAGES:
        raise ConfigError(f"{where}: space.{key}.stage must be one of {', '.join(STAGES)}, got {stage!r}")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}: space.{key}: a categorical parameter needs a non-empty 'choices' list")
        return Param(key, stage, kind, choices=choices)
    if kind not in ("float", "int"):
        raise ConfigError(f"{where}: space.{key}.type must be float, int or categorical, got {kind!r}")
    param = Param(key, stage, kind, low=spec.get("low"), high=spec.get("high"), log=bool(spec.get("log", False)),
                  step=spec.get("step"))
    for side in ("low", "high"):
        value = getattr(param, side)
        if isinstance(value, str):
            if value not in earlier:
                raise ConfigError(f"{where}: space.{key}.{side} names '{value}', which is not a parameter listed "
                                  f"before it (earlier: {', '.join(earlier) or 'none'})")
            if earlier[value].type == "categorical":
                raise ConfigError(f"{where}: space.{key}.{side} names the categorical parameter '{value}'")
        elif not _number(value):
            raise ConfigError(f"{where}: space.{key}.{side} must be a number or an earlier parameter's key, "
                              f"got {value!r}")
    if _number(param.low) and _number(param.high) and param.low > param.high:
        raise ConfigError(f"{where}: space.{key}: low {param.low} is above high {param.high}")
    if param.log and _number(param.low) and param.low <= 0:
        raise ConfigError(f"{where}: space.{key}: a log-scale parameter needs low > 0, got {param.low}")
    if param.step is not None and (not _number(param.step) or param.step <= 0 or param.log):
        raise ConfigError(f"{where}: space.{key}.step must be a positive number (and not with log: true)")
    return param


def load_search(path: str | Path, preset: str | Path | None = None, sets: list[str] | None = None) -> Search:
    """Read a search file over its preset (`base:`, or `preset` to swap it), with dotted `sets` on top."""
    path = Path(path).resolve()
    doc, preset_file, preset_name = merge_over_preset(path, preset, sets, _SEARCH_KEYS, what="search")
    where = str(path)
    name = doc.get("search") or path.stem
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ConfigError(f"{where}: 'search' must match [a-z0-9_]+, got {name!r}")
    seeds = check_seeds(doc.get("seeds", [0]), where)
    n_trials = doc.get("n_trials", 20)
    if not isinstance(n_trials, int) or isinstance(n_trials, bool) or n_trials < 1:
        raise ConfigError(f"{where}: 'n_trials' must be a positive integer, got {n_trials!r}")
    pipeline = check_pipeline(doc.get("pipeline", list(STAGES)), where)
    objective = _parse_objective(doc.get("objective") or {}, pipeline, where)
    sampler = doc.get("sampler") or {}
    if not isinstance(sampler, dict) or sampler.get("name", "tpe") not in ("tpe", "random"):
        raise ConfigError(f"{where}: 'sampler' must be a mapping with name tpe or random, got {sampler!r}")
    bad = sorted(set(sampler) - {"name", "seed", "n_startup_trials"})
    if bad:
        raise ConfigError(f"{where}: sampler: unknown field '{bad[0]}'; valid: name, seed, n_startup_trials")
    pruner = _parse_pruner(doc.get("pruner"), objective, seeds, where)
    fixed = check_overrides(doc.get("fixed"), f"{where}: fixed")
    space = doc.get("space")
    if not isinstance(space, dict) or not space:
        raise ConfigError(f"{where}: 'space' must map dotted config keys (e.g. rl.beta_max) to parameter specs")
    params: dict[str, Param] = {}
    for key, spec in space.items():
        params[key] = _parse_param(str(key), spec, params, where)
    missing = sorted({p.stage for p in params.values()} - set(pipeline))
    if missing:
        raise ConfigError(f"{where}: a parameter sets stage '{missing[0]}', which is not in the pipeline {pipeline}")
    storage = doc.get("storage")
    if storage is not None:
        try:
            storage_url(storage, path.parent)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from e
    search = Search(name=name, title=str(doc.get("title", name)), path=path, preset=preset_name,
                    preset_file=preset_file, seeds=seeds, pipeline=pipeline, n_trials=n_trials,
                    objective=objective, sampler=sampler, pruner=pruner, fixed=fixed, params=list(params.values()),
                    common=doc.get("common") or {}, stages=doc.get("stages") or {}, sets=list(sets or []),
                    storage=storage)
    # Every key must be a real config field: resolve one trial's configs at the middle of the space.
    from harness.experiments import build_plan

    probe = trial_arm(search, 0, midpoint(search.params))
    build_plan(experiment_study(search, [probe]), path.parent / "_probe_never_written", [search.seeds[0]])
    check_space_edges(search)
    return search


def _candidates(p: Param, values: dict[str, Any]) -> list:
    """The extreme values `suggest` can give `p` after `values` (every choice of a categorical)."""
    if p.type == "categorical":
        return list(p.choices)
    low, high = p.bound(p.low, values), p.bound(p.high, values)
    if p.type == "int":
        low, high = int(math.ceil(low)), int(math.floor(high))
    return [low] if low == high else [low, high]


def _complete(params: list[Param], values: dict[str, Any]) -> dict[str, Any]:
    """`values` with the parameters it lacks at the middle of their ranges (resolved in file order)."""
    out: dict[str, Any] = {}
    for p in params:
        out[p.key] = values[p.key] if p.key in values else midpoint([p], out)[p.key]
    return out


def edge_points(params: list[Param]) -> list[tuple[str | None, dict[str, Any]]]:
    """(the parameter at an extreme or None for a corner, point): each parameter at each of its extremes with
    the others at their middle, then every corner when there are at most MAX_CORNERS."""
    points: list[tuple[str | None, dict[str, Any]]] = []
    for i, p in enumerate(params):
        before = _complete(params[:i], {})
        for value in _candidates(p, before):
            points.append((p.key, _complete(params, {**before, p.key: value})))
    corners: list[dict[str, Any]] = [{}]
    for p in params:
        corners = [{**c, p.key: v} for c in corners for v in _candidates(p, c)]
        if len(corners) > MAX_CORNERS:
            return points
    return points + [(None, c) for c in corners]


def point_error(search: Search, values: dict[str, Any]) -> str | None:
    """Why the configs of a trial with `values` do not validate (the stages the parameters set), or None."""
    arm = trial_arm(search, 0, values)
    study = experiment_study(search, [arm])
    for stage in sorted({p.stage for p in search.params}, key=STAGES.index):
        try:
            resolve_config(study, arm, stage, search.seeds[0])
        except ConfigError as e:
            return str(e)
    return None


def check_space_edges(search: Search) -> None:
    """Refuse a space whose edges give invalid configs (a bound outside the validated range, or beyond a preset
    value it must stay ordered with): such a space would propose invalid trials."""
    for key, point in edge_points(search.params):
        error = point_error(search, point)
        if error is None:
            continue
        shown = ", ".join(f"{k}={_short(v)}" for k, v in point.items())
        if key is not None:
            raise ConfigError(f"{search.path}: space.{key}: the value {_short(point[key])} allowed by its range "
                              f"gives an invalid config (at {shown}): {error}. Narrow the range of {key} (or search "
                              "the key it must agree with too)")
        raise ConfigError(f"{search.path}: space: the corner {shown} gives an invalid config: {error}. Narrow the "
                          "ranges, or let a bound name an earlier parameter (low: rl.beta_base) to keep them ordered")


def _parse_pruner(spec: Any, objective: Objective, seeds: list[int], where: str) -> dict:
    """`pruner: {name: median, n_startup_trials: 3, n_warmup_steps: 1}` (Optuna's MedianPruner) or none."""
    spec = spec or {"name": "none"}
    if not isinstance(spec, dict) or spec.get("name", "none") not in ("none", "median"):
        raise ConfigError(f"{where}: 'pruner' must be a mapping with name none or median, got {spec!r}")
    bad = sorted(set(spec) - {"name", "n_startup_trials", "n_warmup_steps"})
    if bad:
        raise ConfigError(f"{where}: pruner: unknown field '{bad[0]}'; valid: name, n_startup_trials, n_warmup_steps")
    if spec.get("name", "none") == "median":
        if objective.metric not in VAL_OBJECTIVES or objective.direction != "maximize":
            raise ConfigError(f"{where}: pruning compares RL validation scores as they come, so it needs a "
                              f"maximized val_* objective, not {objective.metric} ({objective.direction})")
        if len(seeds) != 1:
            raise ConfigError(f"{where}: pruning needs one seed per trial (its intermediate values are one run's "
                              f"validation scores), got seeds {seeds}")
    return {"name": "none", **spec}


def _parse_objective(spec: Any, pipeline: list[str], where: str) -> Objective:
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: 'objective' must be a mapping {{metric: val_final, direction: maximize}}")
    bad = sorted(set(spec) - {"metric", "direction"})
    if bad:
        raise ConfigError(f"{where}: objective: unknown field '{bad[0]}'; valid: metric, direction")
    metric = spec.get("metric", "val_selected")
    direction = spec.get("direction", "maximize")
    if direction not in ("maximize", "minimize"):
        raise ConfigError(f"{where}: objective.direction must be maximize or minimize, got {direction!r}")
    if not isinstance(metric, str) or not (metric in VAL_OBJECTIVES or (metric.startswith(TEST_PREFIX)
                                                                          and len(metric) > len(TEST_PREFIX))):
        raise ConfigError(f"{where}: objective.metric must be one of {', '.join(VAL_OBJECTIVES)} or "
                          f"test:<metric> (e.g. test:BLEU_4), got {metric!r}")
    if metric in VAL_OBJECTIVES and "rl" not in pipeline:
        raise ConfigError(f"{where}: objective '{metric}' reads RL validation scores, but the pipeline {pipeline} "
                          "has no rl stage; use test:<metric>")
    return Objective(metric, direction)


def midpoint(params: list[Param], earlier: dict[str, Any] | None = None) -> dict[str, Any]:
    """A valid point of the space (the middle of each range, the first choice), for checking the keys; bounds
    naming a parameter not in `params` read it from `earlier`."""
    values: dict[str, Any] = dict(earlier or {})
    for p in params:
        if p.type == "categorical":
            values[p.key] = p.choices[0]
            continue
        low, high = p.bound(p.low, values), p.bound(p.high, values)
        mid = math.sqrt(low * high) if p.log else (low + high) / 2
        values[p.key] = int(round(mid)) if p.type == "int" else mid
    return {p.key: values[p.key] for p in params}


# ---------------------------------------------------------------------------------------------------------
# Trials as arms


def suggest(trial, params: list[Param]) -> dict[str, Any]:
    """The trial's values, in file order, each range resolved against the values drawn before it."""
    values: dict[str, Any] = {}
    for p in params:
        if p.type == "categorical":
            values[p.key] = trial.suggest_categorical(p.key, p.choices)
            continue
        low, high = p.bound(p.low, values), p.bound(p.high, values)
        if p.type == "int":
            values[p.key] = trial.suggest_int(p.key, int(math.ceil(low)), int(math.floor(high)), log=p.log,
                                              step=int(p.step or 1))
        else:
            values[p.key] = trial.suggest_float(p.key, float(low), float(high), log=p.log, step=p.step)
    return values


def arm_name(number: int) -> str:
    return f"t{number:04d}"


def trial_arm(search: Search, number: int, values: dict[str, Any]) -> Arm:
    """Trial `number` as an experiment arm: the fixed overrides, then the trial's values on their stages."""
    overrides: dict[str, Any] = {scope: copy.deepcopy(v) for scope, v in search.fixed.items()}
    for p in search.params:
        value = values[p.key]
        current = overrides.get(p.stage)
        item = f"{p.key}={yaml_scalar(value)}"
        if isinstance(current, dict):  # a mapping of fixed overrides: put the value into it
            node = current
            *parents, last = p.key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = value
        else:
            overrides[p.stage] = [*(current or []), item]
    label = f"trial {number}: " + ", ".join(f"{k.split('.')[-1]}={_short(v)}" for k, v in values.items())
    return Arm(name=arm_name(number), label=label, pipeline=list(search.pipeline), overrides=overrides,
               factors=dict(values))


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def experiment_study(search: Search, arms: list[Arm]) -> Study:
    return Study(name=search.name, title=search.title, path=search.path, preset=search.preset,
                 preset_file=search.preset_file, reproduces=None, reference=arms[0].name, seeds=search.seeds,
                 arms=arms, common=search.common, stages=search.stages)


# ---------------------------------------------------------------------------------------------------------
# The objective


def objective_from_evals(rows: list[dict], metric: str) -> float:
    """val_final / val_best / val_mean over the validation rows written after RL started (step > 0)."""
    scores = [float(r["val_score"]) for r in rows
              if r.get("split") == "val" and r.get("val_score") is not None and r.get("step", 0) > 0]
    if not scores:
        raise ValueError("no validation score after the first RL step in evals.jsonl")
    if metric == "val_final":
        return scores[-1]
    if metric == "val_best":
        return max(scores)
    if metric == "val_mean":
        return sum(scores) / len(scores)
    raise ValueError(f"unknown validation objective {metric!r}")


def run_objective(out: Path, run: dict, metric: str) -> float:
    """The objective of one (arm, seed) run of the experiment index."""
    if metric.startswith(TEST_PREFIX):
        key = metric[len(TEST_PREFIX):]
        scores = read_json(out / run["metrics"])
        if not _number(scores.get(key)):
            raise ValueError(f"{out / run['metrics']}: no numeric '{key}' (objective {metric})")
        return float(scores[key])
    if metric == "val_selected":
        # The policy the RL stage saved: its score as recorded with the selection (metrics.json).
        path = out / run["stages"]["rl"]["dir"] / "metrics.json"
        value = read_json(path).get("selected_score")
        if not _number(value):
            raise ValueError(f"{path}: no numeric 'selected_score' (objective val_selected)")
        return float(value)
    evals = out / run["stages"]["rl"]["dir"] / "evals.jsonl"
    try:
        return objective_from_evals(read_jsonl(evals), metric)
    except ValueError as e:
        raise ValueError(f"{evals}: {e}") from e


# ---------------------------------------------------------------------------------------------------------
# Running


def _sampler(search: Search, position: int = 0, parallel: bool = False):
    """The file's sampler for the trial at `position` (its number not counting trials enqueued again), seeded
    with seed + position: a trial's proposal depends on the history only, not on how often the search was
    resumed or how many drivers share it. Parallel trials use TPE's constant liar (running trials count as
    bad), so one batch spreads out."""
    import optuna

    spec = search.sampler
    seed = spec.get("seed", 0) + position
    if spec.get("name", "tpe") == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=int(spec.get("n_startup_trials", 5)),
                                      constant_liar=parallel)


def _pruner(search: Search):
    import optuna

    spec = search.pruner
    if spec.get("name") != "median":
        return optuna.pruners.NopPruner()
    # Steps are RL optimizer steps; a trial is compared with the others at the steps it has reported.
    return optuna.pruners.MedianPruner(n_startup_trials=int(spec.get("n_startup_trials", 3)),
                                       n_warmup_steps=int(spec.get("n_warmup_steps", 0)))


def open_study(out: Path, search: Search | None = None, *, create: bool = True, parallel: bool = False,
               storage: str | None = None, heartbeat: Heartbeat = HEARTBEAT):
    """The search's Optuna study and its storage: `storage` (a URL or spec, harness/search_storage.py), else the
    file's `storage:`, else (reading a folder) the one its search.json names, else `<out>/optuna.db` or an
    older folder's `<out>/optuna.journal`. `create` creates the study (named after the search) if need be."""
    import optuna

    from harness.search_storage import DEFAULT_DB, JOURNAL, open_storage

    out = Path(out)
    spec = storage or (search.storage if search else None)
    summary = out / "search.json"
    if spec is None and not create:
        recorded = read_json(summary).get("storage") if summary.is_file() else None
        if recorded and "***" in recorded:
            raise ConfigError(f"{summary}: the study is in {recorded}; pass --storage with the password")
        spec = recorded
        if spec is None and not (out / DEFAULT_DB).is_file() and not (out / JOURNAL).is_file():
            raise FileNotFoundError(f"{out}: not a search folder (no search.json storage, {DEFAULT_DB} or {JOURNAL})")
    url = storage_url(spec, out)
    if create:
        out.mkdir(parents=True, exist_ok=True)
    store = open_storage(url, heartbeat)
    if create:
        study = optuna.create_study(study_name=search.name, storage=store, load_if_exists=True,
                                    direction=search.objective.direction, sampler=_sampler(search, parallel=parallel),
                                    pruner=_pruner(search))
        _check_same_search(study, search, url)
    else:
        names = optuna.get_all_study_names(store)
        wanted = read_json(summary).get("search") if summary.is_file() else None
        if not names:
            raise FileNotFoundError(f"{out}: no Optuna study in {url}")
        study = optuna.load_study(study_name=wanted if wanted in names else names[0], storage=store)
    return study, store


SEARCH_ATTR = "regbench_search"


def _identity(search: Search) -> dict:
    """What makes two drivers run the same search: the trials they run must mean the same thing."""
    return json.loads(json.dumps({
        "preset": search.preset, "seeds": search.seeds, "pipeline": search.pipeline,
        "objective": {"metric": search.objective.metric, "direction": search.objective.direction},
        "fixed": search.fixed, "space": {p.key: {k: v for k, v in vars(p).items() if k != "key"}
                                         for p in search.params},
        "common": search.common, "stages": search.stages}, sort_keys=True, default=str))


def _check_same_search(study, search: Search, url: str) -> None:
    """A study in a shared storage is one search: refuse a driver whose search differs, naming the keys."""
    from harness.search_storage import display

    mine = _identity(search)
    theirs = study.user_attrs.get(SEARCH_ATTR)
    if theirs is None:
        study.set_user_attr(SEARCH_ATTR, mine)
        return
    differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    if differ:
        shown = "; ".join(f"{k}: {theirs.get(k)!r} in the study, {mine.get(k)!r} here" for k in differ[:3])
        raise ConfigError(f"{search.path}: the study '{search.name}' in {display(url)} was started by another "
                          f"search ({shown}). Give this search another name (--set search=NAME), another --out "
                          "or --storage")


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
    rl = _resolve_function({**DEFAULT_FUNCTIONS, **(functions or {})}["rl"])
    return {**(functions or {}), "rl": functools.partial(rl, on_validation=[hook])}


def _finished(study) -> list:
    """The finished trials that count towards n_trials (not the ones enqueued again, nor surplus asks)."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    retried = retried_numbers(trials)
    return [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
            and t.number not in retried and not t.user_attrs.get(SURPLUS_ATTR)]


def _position(study, number: int) -> int:
    """Trial `number`'s place in the search: its number less the earlier trials enqueued again or surplus."""
    trials = study.get_trials(deepcopy=False)
    retried = retried_numbers(trials)
    return sum(1 for t in trials if t.number < number and t.number not in retried
               and not t.user_attrs.get(SURPLUS_ATTR))


def search_summary(search: Search, study, out: Path, storage: str | None = None) -> dict:
    from optuna.trial import TrialState

    trials = []
    retried = retried_numbers(study.get_trials(deepcopy=False))
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.WAITING:
            continue  # enqueued again, not asked for yet: listed once it runs
        state = "surplus" if t.user_attrs.get(SURPLUS_ATTR) else t.state.name.lower()
        trials.append({"number": t.number, "arm": arm_name(t.number), "state": state,
                       # (Optuna gives a pruned trial its last intermediate value; it has no objective.)
                       "values": t.params, "objective": t.value if t.state == TrialState.COMPLETE else None,
                       "per_seed": t.user_attrs.get("per_seed"), "error": t.user_attrs.get("error"),
                       "pruned": t.user_attrs.get("pruned"), "invalid": bool(t.user_attrs.get(INVALID_ATTR)),
                       "requeued": t.number in retried, "retry_of": t.system_attrs.get("failed_trial"),
                       "duration_s": t.duration.total_seconds() if t.duration else None})
    complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    best = None
    if complete:
        b = study.best_trial
        best = {"number": b.number, "arm": arm_name(b.number), "values": b.params, "objective": b.value}
    return {"format": SEARCH_FORMAT, "search": search.name, "title": search.title, "search_file": str(search.path),
            "preset": search.preset, "preset_file": str(search.preset_file), "sets": search.sets,
            "seeds": search.seeds, "n_trials": search.n_trials,
            "objective": {"metric": search.objective.metric, "direction": search.objective.direction,
                          "description": search.objective.description},
            "sampler": search.sampler or {"name": "tpe"}, "pruner": search.pruner,
            "space": {p.key: {k: v for k, v in vars(p).items() if k != "key" and v not in (None, False)}
                      for p in search.params},
            "trials": trials, "best": best, "index": "index.json", "storage": storage}


@dataclass
class SearchResult:
    out: Path
    summary: dict

    @property
    def best(self) -> dict | None:
        return self.summary["best"]


def run_search(search: Search | str | Path, out: str | Path | None = None, *, n_trials: int | None = None,
               workers: int = 1, parallel_trials: int = 1, functions: dict[str, str] | None = None,
               log: Callable[[str], None] | None = None, argv: list[str] | None = None,
               launcher: str | None = None, stages_dir: str | Path | None = None, storage: str | None = None,
               heartbeat: Heartbeat = HEARTBEAT) -> SearchResult:
    """Run trials until `n_trials` (default: the file's) have finished; see the module docstring.

    `parallel_trials` K asks Optuna for K trials at a time and runs them as K arms of one experiment in K
    worker processes (each on its own GPU where there are several; TPE then uses its constant-liar mode).
    `storage` (a URL or spec, harness/search_storage.py) replaces the file's `storage:`. Other drivers may run
    the same search on the same storage at the same time: this one asks only for the trials still missing
    (not finished, not running elsewhere) and waits for the others' last trials."""
    import optuna
    from optuna.trial import TrialState

    from harness.search_storage import display

    if not isinstance(search, Search):
        search = load_search(search)
    if n_trials is not None and n_trials < 1:
        raise ConfigError(f"--n-trials must be >= 1, got {n_trials}")
    if parallel_trials < 1:
        raise ConfigError(f"--parallel-trials must be >= 1, got {parallel_trials}")
    pruning = search.pruner.get("name") == "median"
    if pruning and (launcher or workers > 1 or parallel_trials > 1):
        raise ConfigError("pruning follows the RL stage's validations in this process: run the search with "
                          "--workers 1, --parallel-trials 1 and without --launcher, or set pruner: {name: none}")
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
        finished = len(_finished(study))
        if finished >= target:
            break
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
            position = _position(study, trial.number)
            if position >= target:  # another driver asked for the last trial at the same time
                trial.set_user_attr(SURPLUS_ATTR, True)
                study.tell(trial, state=TrialState.FAIL)
                continue
            study.sampler = _sampler(search, position, parallel)  # the proposal depends on the history only
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
                                    argv=argv, launcher=launcher, stages_dir=stages_dir, wait_for_locks=True)
        for trial, arm, _ in batch:
            outcome = _tell(search, study, trial, [r for r in result.index["runs"] if r["arm"] == arm.name], out)
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
    summary = write_summary()
    if summary["best"]:
        b = summary["best"]
        log(f"{name} best: trial {b['number']} ({search.objective.metric} = {b['objective']:.4f}) {b['values']}")
    return SearchResult(out, summary)


def _plan_error(search: Search, arm: Arm, out: Path, stages_dir: str | Path | None) -> str | None:
    """Why a trial's arm cannot be planned (its configs do not validate), or None. Planning writes nothing."""
    from harness.experiments import build_plan

    try:
        build_plan(experiment_study(search, [arm]), out, stages_dir=stages_dir)
    except ConfigError as e:
        return str(e)
    return None


def _tell(search: Search, study, trial, runs: list[dict], out: Path) -> str:
    """Tell Optuna how a trial's runs (its rows of the experiment index) went; a line for the log."""
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
    study.reference = PRESET_ARM
    study.seeds = list(seeds or [0, 1, 2])
    return study


def run_confirmation(out: str | Path, top: int = 3, seeds: list[int] | None = None, *, workers: int = 2,
                     functions: dict[str, str] | None = None, log: Callable[[str], None] | None = None,
                     launcher: str | None = None):
    """Run `confirmation_study` into `<out>/confirm`, sharing the search's stage runs (so the searched seed's
    warm-up, SFT and trial RL runs are reused); returns the ExperimentResult."""
    out = Path(out)
    study = confirmation_study(out, top, seeds)
    index = read_json(out / "index.json")
    stages_dir = (out / index.get("stages_dir", "stages")).resolve()
    return run_experiment(study, out / "confirm", workers=workers, functions=functions, log=log,
                          launcher=launcher, stages_dir=stages_dir)
