"""Loading a search file (harness/search/run.py) over its preset, and its trials as arms of an ordinary experiment:
every key is checked by resolving a trial at the middle of the space, and every edge of the space by
resolving the trials there."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from harness.config import ConfigError
from harness.experiments import (
    NAME_PATTERN,
    STAGES,
    Arm,
    Study,
    build_plan,
    check_overrides,
    check_pipeline,
    check_seeds,
    merge_over_preset,
    resolve_config,
    yaml_scalar,
)
from harness.experiments.resources import check_resources
from harness.search.space import (
    _SEARCH_KEYS,
    Param,
    Search,
    _parse_objective,
    _parse_param,
    _parse_pruner,
    edge_points,
    midpoint,
)
from harness.search.storage import storage_url


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
                    storage=storage, resources=check_resources(doc.get("resources"), where))
    # Every key must be a real config field: resolve one trial's configs at the middle of the space.

    probe = trial_arm(search, 0, midpoint(search.params))
    build_plan(experiment_study(search, [probe]), path.parent / "_probe_never_written", [search.seeds[0]])
    check_space_edges(search)
    return search

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
                 preset_file=search.preset_file, reproduces=None, baseline=arms[0].name, seeds=search.seeds,
                 arms=arms, common=search.common, stages=search.stages, resources=search.resources)
