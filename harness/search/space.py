"""A search file's parts (harness/search/run.py): the searched parameters and their space, the objective, pruner
and sampler fields, parsed and checked; the points of the space (middle, edges, corners) and Optuna's
proposals in file order."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import ConfigError
from harness.experiments import STAGES
from harness.search.objective import TEST_PREFIX, VAL_OBJECTIVES, is_number

_SEARCH_KEYS = {"search", "title", "description", "seeds", "pipeline", "n_trials", "objective", "sampler",
                "pruner", "fixed", "space", "preset", "common", "stages", "storage", "resources"}
_PARAM_KEYS = {"type", "low", "high", "log", "step", "choices", "stage"}
# Load-time check of the space: every corner is resolved when there are at most this many (else the edges only).
MAX_CORNERS = 256

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
    storage: str | None = None  # `storage:` of the file (harness/search/storage.py); None: <out>/optuna.db
    resources: dict = field(default_factory=dict)  # `resources:` (harness/experiments/resources.py), by node kind

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
        elif not is_number(value):
            raise ConfigError(f"{where}: space.{key}.{side} must be a number or an earlier parameter's key, "
                              f"got {value!r}")
    if is_number(param.low) and is_number(param.high) and param.low > param.high:
        raise ConfigError(f"{where}: space.{key}: low {param.low} is above high {param.high}")
    if param.log and is_number(param.low) and param.low <= 0:
        raise ConfigError(f"{where}: space.{key}: a log-scale parameter needs low > 0, got {param.low}")
    if param.step is not None and (not is_number(param.step) or param.step <= 0 or param.log):
        raise ConfigError(f"{where}: space.{key}.step must be a positive number (and not with log: true)")
    return param

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
