"""Experiment runner: a study (experiments/*.yaml) = arms x seeds over a preset, run as one dependency graph.

A study file starts with `base: presets/<preset>.yaml` and lists arms (a name, per-stage overrides, the
stages it runs), its reference arm, seeds and the published table it reproduces (experiments/README.md has the
format). The runner

- resolves every (arm, seed, stage) into a validated RunConfig (through `harness.config.load_config`);
- keys each stage run by a hash of its resolved config (locations left out) and the keys of its inputs, so
  arms that resolve to the same stage run share one run directory (`<out>/stages/<stage>-seed<k>-<key>`),
  e.g. warm-up, classifier and SFT once per seed for all RL arms; the tiny preset's stage 0 and the phantom
  data are nodes of the graph too, so no two processes ever build the same folder;
- runs the graph in `workers` spawned processes (`torch.set_num_threads(1)` in each; one worker runs in this
  process), skipping what is complete (metrics.json) and resuming what was interrupted (the stages resume from
  their checkpoints);
- evaluates each arm's final model on the test split into `<out>/<arm>/seed<k>/eval/`, links the arm's
  stage runs into `<out>/<arm>/seed<k>/`, and keeps `<out>/index.json` (atomic writes) up to date.
A failing stage fails the arms that need it (recorded in the index with the error) and nothing else.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import multiprocessing
import os
import re
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import (
    ConfigError,
    RunConfig,
    apply_overrides,
    from_dict,
    load_config,
    load_yaml,
    read_yaml_mapping,
    to_dict,
)
from harness.records import atomic_write_json, atomic_write_text, git_commit, read_json
from harness.runlock import LOCK_NAME  # noqa: F401 - the lock file's name, for callers of this module

INDEX_FORMAT = "regbench.experiment-index/1"
STAGES = ("warmup", "classifier", "sft", "rl")
MODEL_STAGES = ("warmup", "sft", "rl")
OVERRIDE_SCOPES = ("all", *STAGES, "eval")
NODE_ORDER = ("data", "pretrain", *STAGES, "eval", "analysis")

# What runs each node: "module:function", looked up at call time (so tests can monkeypatch the stage modules,
# or pass importable fakes that also work in spawned workers).
#   data / pretrain / stages: fn(cfg: RunConfig, progress: bool) -> Path
#   eval:                     fn(cfg: RunConfig, model_dir: str | None, progress: bool) -> dict of scores
DEFAULT_FUNCTIONS = {
    "data": "harness.experiments:prepare_data",
    "pretrain": "harness.stages.loading:base_path",
    "warmup": "harness.stages.warmup:run_warmup",
    "classifier": "harness.stages.classifier:run_classifier_training",
    "sft": "harness.stages.sft:run_sft",
    "rl": "harness.stages.rl:run_rl",
    "eval": "harness.experiments:evaluate_final",
    # Supp. A records of an RL run (study field `analyses`): fn(rl_run_dir, kinds, n_prompts, group_size, seed,
    # key=..., progress=...) -> paths
    "analysis": "harness.stages.analyze:run_analyses",
}

_STUDY_KEYS = {"study", "title", "description", "reproduces", "reference", "seeds", "pipeline", "arms", "preset",
               "common", "stages", "analyses", "published_dataset"}
_ARM_KEYS = {"name", "label", "published_row", "factors", "pipeline", "overrides", "presets", "description"}
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_]*$")  # names of arms and searches: folder names


# ---------------------------------------------------------------------------------------------------------
# Study files


@dataclass
class Arm:
    name: str
    label: str
    pipeline: list[str]
    overrides: dict[str, Any] = field(default_factory=dict)
    published_row: str | None = None
    factors: dict[str, Any] = field(default_factory=dict)
    presets: list[str] | None = None

    def describe(self) -> dict:
        return {"name": self.name, "label": self.label, "published_row": self.published_row,
                "factors": self.factors, "pipeline": self.pipeline, "overrides": self.overrides}

    @property
    def final_stage(self) -> str | None:
        models = [s for s in self.pipeline if s in MODEL_STAGES]
        return models[-1] if models else None


@dataclass
class Study:
    name: str
    title: str
    path: Path
    preset: str
    preset_file: Path
    reproduces: str | None
    reference: str
    seeds: list[int]
    arms: list[Arm]
    # The merged document: the preset's `common` and `stages` sections with the study's on top.
    common: dict
    stages: dict
    # `analyses:` (harness/stages/analyze.py: parse_study_analyses): Supp. A records after the RL arms, or None.
    analyses: dict | None = None
    # `published_dataset:` the data set whose published rows the report shows when ours is synthetic.
    published_dataset: str | None = None

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise ConfigError(f"{self.path}: no arm '{name}' (arms: {', '.join(a.name for a in self.arms)})")


def _deep_merge(dst: dict, src: dict) -> dict:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _deep_merge(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)
    return dst


def check_pipeline(pipeline: Any, where: str) -> list[str]:
    if not isinstance(pipeline, list) or any(s not in STAGES for s in pipeline):
        raise ConfigError(f"{where}: 'pipeline' must be a list of stages from {', '.join(STAGES)}, got {pipeline!r}")
    if len(set(pipeline)) != len(pipeline) or sorted(pipeline, key=STAGES.index) != pipeline:
        raise ConfigError(f"{where}: 'pipeline' {pipeline} must list each stage once, in the order "
                          f"{' -> '.join(STAGES)}")
    # `sft` without `classifier` needs classifier.dir in the config (checked when the plan is built).
    return list(pipeline)


def check_seeds(seeds: Any, where: str) -> list[int]:
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                           for s in seeds):
        raise ConfigError(f"{where}: 'seeds' must be a non-empty list of integers, got {seeds!r}")
    return list(seeds)


def check_overrides(overrides: Any, where: str) -> dict[str, Any]:
    if overrides is None:
        return {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"{where}: 'overrides' must map a stage ({', '.join(OVERRIDE_SCOPES)}) to overrides")
    for scope, value in overrides.items():
        if scope not in OVERRIDE_SCOPES:
            raise ConfigError(f"{where}: unknown override scope '{scope}'; valid: {', '.join(OVERRIDE_SCOPES)}")
        ok = isinstance(value, dict) or (isinstance(value, list) and all(isinstance(x, str) and "=" in x
                                                                         for x in value))
        if not ok:
            raise ConfigError(f"{where}: overrides.{scope} must be a mapping or a list of key=value strings")
    return overrides


def merge_over_preset(path: Path, preset: str | Path | None, sets: list[str] | None,
                      valid_keys: set[str], what: str = "study") -> tuple[dict, Path, str]:
    """A study-like file (a study or a search) deep-merged over its preset, dotted `sets` on top.

    Returns (document, preset file, preset name); the document's keys are checked against `valid_keys`, and
    its `common` / `stages` sections against the stage names.
    """
    raw = read_yaml_mapping(path, f"{what} file")
    base = raw.pop("base", None)
    preset_file = Path(preset).resolve() if preset else (path.parent / base).resolve() if base else None
    if preset_file is None:
        raise ConfigError(f"{path}: a {what} needs 'base: presets/<preset>.yaml' (or --preset)")
    doc = load_yaml(preset_file)
    unknown = sorted(set(doc) - {"preset", "description", "common", "stages"})
    if unknown:
        raise ConfigError(f"{preset_file}: unknown key '{unknown[0]}'; a preset has preset, description, common, "
                          "stages")
    preset_name = doc.get("preset") or preset_file.stem
    doc.pop("description", None)
    _deep_merge(doc, raw)
    doc["preset"] = preset_name
    apply_overrides(doc, list(sets or []))
    unknown = sorted(set(doc) - valid_keys)
    if unknown:
        raise ConfigError(f"{path}: unknown key '{unknown[0]}'; valid keys: {', '.join(sorted(valid_keys))}")
    for section in ("common", "stages"):
        if not isinstance(doc.get(section) or {}, dict):
            raise ConfigError(f"{path}: '{section}' must be a mapping")
    bad = sorted(set(doc.get("stages") or {}) - {*STAGES, "eval"})
    if bad:
        raise ConfigError(f"{path}: unknown stage '{bad[0]}' under 'stages'; valid: {', '.join((*STAGES, 'eval'))}")
    return doc, preset_file, preset_name


def load_study(path: str | Path, preset: str | Path | None = None, sets: list[str] | None = None) -> Study:
    """Read a study file over its preset (`base:`, or `preset` to swap it), with dotted `sets` on top."""
    path = Path(path).resolve()
    doc, preset_file, preset_name = merge_over_preset(path, preset, sets, _STUDY_KEYS)
    name = doc.get("study") or path.stem
    seeds = check_seeds(doc.get("seeds", [0]), str(path))
    default_pipeline = check_pipeline(doc.get("pipeline", list(STAGES)), str(path))
    arms = []
    for i, a in enumerate(doc.get("arms") or []):
        where = f"{path}: arms[{i}]"
        if not isinstance(a, dict):
            raise ConfigError(f"{where} must be a mapping")
        bad = sorted(set(a) - _ARM_KEYS)
        if bad:
            raise ConfigError(f"{where}: unknown key '{bad[0]}'; valid keys: {', '.join(sorted(_ARM_KEYS))}")
        arm_name = a.get("name")
        if not isinstance(arm_name, str) or not NAME_PATTERN.match(arm_name):
            raise ConfigError(f"{where}: 'name' must match [a-z0-9_]+ (it names a folder), got {arm_name!r}")
        presets = a.get("presets")
        if presets is not None and (not isinstance(presets, list) or not all(isinstance(p, str) for p in presets)):
            raise ConfigError(f"{where}: 'presets' must be a list of preset names")
        if presets is not None and preset_name not in presets:
            continue  # this arm does not apply to the chosen preset
        arms.append(Arm(name=arm_name, label=str(a.get("label", arm_name)),
                        pipeline=check_pipeline(a.get("pipeline", default_pipeline), where),
                        overrides=check_overrides(a.get("overrides"), where),
                        published_row=a.get("published_row"), factors=dict(a.get("factors") or {}),
                        presets=presets))
    if not arms:
        raise ConfigError(f"{path}: no arms (for preset '{preset_name}')")
    names = [a.name for a in arms]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{path}: arm name '{dup[0]}' appears twice")
    reference = doc.get("reference", arms[0].name)
    if reference not in names:
        raise ConfigError(f"{path}: reference arm '{reference}' is not one of the arms: {', '.join(names)}")
    from harness.stages.analyze import parse_study_analyses

    try:
        analyses = parse_study_analyses(doc.get("analyses"), str(path), names)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    return Study(name=name, title=str(doc.get("title", name)), path=path, preset=preset_name,
                 preset_file=preset_file, reproduces=doc.get("reproduces"), reference=reference, seeds=seeds,
                 arms=arms, common=doc.get("common") or {}, stages=doc.get("stages") or {}, analyses=analyses,
                 published_dataset=doc.get("published_dataset"))


# ---------------------------------------------------------------------------------------------------------
# Resolving configs


def yaml_scalar(value: Any) -> str:
    """A value as override text that YAML reads back as the same value."""
    if isinstance(value, float):
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            text = text.replace("e", ".0e", 1)  # YAML 1.1 floats need a dot
        return text
    return json.dumps(value)


def _flatten(data: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in data.items():
        if isinstance(v, dict):
            out.extend(_flatten(v, f"{prefix}{k}."))
        else:
            out.append(f"{prefix}{k}={yaml_scalar(v)}")
    return out


def stage_document(study: Study, arm: Arm, stage: str) -> dict:
    """The RunConfig mapping of one stage of an arm: common <- stages.<stage> <- arm (all, then stage)."""
    doc = copy.deepcopy(study.common)
    _deep_merge(doc, copy.deepcopy(study.stages.get(stage) or {}))
    for scope in ("all", stage):
        value = arm.overrides.get(scope)
        if isinstance(value, dict):
            _deep_merge(doc, copy.deepcopy(value))
        elif value:
            apply_overrides(doc, list(value))
    return doc


def resolve_config(study: Study, arm: Arm, stage: str, seed: int, paths: dict[str, Any] | None = None) -> RunConfig:
    """A validated RunConfig for (arm, seed, stage), `paths` (out_dir, init_from, ...) set on top."""
    doc = stage_document(study, arm, stage)
    overrides = _flatten(doc) + [f"seed={seed}"] + [f"{k}={yaml_scalar(v)}" for k, v in (paths or {}).items()]
    try:
        return load_config(None, overrides)
    except ConfigError as e:
        raise ConfigError(f"{study.path.name}, arm '{arm.name}', stage '{stage}': {e}") from e


# ---------------------------------------------------------------------------------------------------------
# The graph


_LOCATIONS = ("out_dir", "cache_dir", "data.synth_dir", "model.device",  # where, not what
              "train.dist_timeout_s", "train.dist_load_timeout_s")  # how long to wait, not what


def config_key(kind: str, cfg: RunConfig, inputs: dict[str, Any], runner_paths: tuple[str, ...] = ()) -> str:
    """sha256 of the stage, its resolved config without locations (and without the input paths the runner set,
    which `inputs` replaces by the keys of the runs they come from)."""
    d = to_dict(cfg)
    for dotted in (*_LOCATIONS, *runner_paths):
        node = d
        *parents, last = dotted.split(".")
        for p in parents:
            node = node[p]
        node[last] = None
    payload = json.dumps({"stage": kind, "config": d, "inputs": inputs}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:10]


@dataclass
class Node:
    id: str
    kind: str
    key: str
    config: dict
    deps: list[str]
    run_dir: Path | None = None        # stage run directory (stages), eval directory (eval)
    model_dir: str | None = None       # eval: the model to evaluate (None = the preset's base model)
    users: list[tuple[str, int]] = field(default_factory=list)
    status: str = "pending"
    error: str | None = None
    traceback: str | None = None
    elapsed_s: float | None = None


@dataclass
class RunPlan:
    arm: str
    seed: int
    dir: Path
    stages: dict[str, str]             # stage -> node id
    eval_node: str
    final_stage: str | None
    init_from: dict[str, str | None]   # model stage -> the stage it starts from (None = base model)
    analysis_node: str | None = None   # the Supp. A records of its RL run (study field `analyses`)


@dataclass
class Plan:
    study: Study
    out: Path
    seeds: list[int]
    nodes: dict[str, Node]
    runs: dict[tuple[str, int], RunPlan]
    stages_root: Path | None = None

    def stage_nodes(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind in STAGES]


def _data_node(cfg: RunConfig) -> tuple[str, str] | None:
    if cfg.data.dataset != "phantom" or cfg.data.annotation is not None:
        return None
    from harness.stages.common import phantom_dir

    where = str(phantom_dir(cfg).resolve())
    return "data:" + hashlib.sha256(where.encode()).hexdigest()[:10], where


def _pretrain_node(cfg: RunConfig) -> tuple[str, str] | None:
    if cfg.model.preset != "tiny" or cfg.model.path:
        return None
    from harness.stages.pretrain import base_dir

    where = str(base_dir(cfg).resolve())
    return "pretrain:" + hashlib.sha256(where.encode()).hexdigest()[:10], where


def build_plan(study: Study, out: str | Path, seeds: list[int] | None = None,
               stages_dir: str | Path | None = None) -> Plan:
    """Every (arm, seed) of the study with its stage nodes (shared where the keys agree) and its eval node.

    Stage runs live in `<out>/stages/`, or in `stages_dir` when given: studies pointed at one stages folder
    share every stage run whose key agrees (e.g. one warm-up / SFT per seed for Tables 3, 4 and S5)."""
    out = Path(out).resolve()
    stages_root = Path(stages_dir).resolve() if stages_dir else out / "stages"
    seeds = sorted(set(study.seeds) | set(seeds or []))
    nodes: dict[str, Node] = {}
    runs: dict[tuple[str, int], RunPlan] = {}

    def add(node: Node, user: tuple[str, int]) -> Node:
        node = nodes.setdefault(node.id, node)
        if user not in node.users:
            node.users.append(user)
        return node

    def support_nodes(cfg: RunConfig, needs_base: bool, user) -> list[str]:
        deps = []
        data = _data_node(cfg)
        if data:
            deps.append(add(Node(data[0], "data", data[0].split(":")[1], to_dict(cfg), []), user).id)
        if needs_base:
            pre = _pretrain_node(cfg)
            if pre:
                deps.append(add(Node(pre[0], "pretrain", pre[0].split(":")[1], to_dict(cfg), []), user).id)
        return deps

    for arm in study.arms:
        for seed in seeds:
            user = (arm.name, seed)
            run_dir = out / arm.name / f"seed{seed}"
            base_paths = {}
            if "synth_dir" not in (study.common.get("data") or {}):
                base_paths["data.synth_dir"] = str(out / "data")
            prev_model: Node | None = None
            clf: Node | None = None
            stage_ids: dict[str, str] = {}
            init_from: dict[str, str | None] = {}
            for stage in arm.pipeline:
                paths = dict(base_paths)
                inputs: dict[str, Any] = {}
                runner_paths: list[str] = []
                deps: list[str] = []
                needs_base = False
                if stage in MODEL_STAGES:
                    if prev_model is not None:
                        paths["init_from"] = str(prev_model.run_dir / "model")
                        inputs["init"] = prev_model.id
                        runner_paths.append("init_from")
                        deps.append(prev_model.id)
                        init_from[stage] = prev_model.kind
                    else:
                        init_from[stage] = None
                if stage == "sft" and clf is not None:
                    paths["classifier.dir"] = str(clf.run_dir / "classifier")
                    inputs["classifier"] = clf.id
                    runner_paths.append("classifier.dir")
                    deps.append(clf.id)
                probe = resolve_config(study, arm, stage, seed, {**paths, "out_dir": "<out>"})
                if stage in MODEL_STAGES and prev_model is None:
                    if probe.init_from:
                        init_from[stage] = "path"
                    needs_base = not probe.init_from
                if stage == "sft" and clf is None and not probe.classifier.dir:
                    raise ConfigError(f"{study.path.name}, arm '{arm.name}': stage sft needs 'classifier' in the "
                                      "pipeline or classifier.dir set")
                key = config_key(stage, probe, inputs, tuple(runner_paths))
                stage_dir = stages_root / f"{stage}-seed{seed}-{key}"
                cfg = probe
                cfg.out_dir = str(stage_dir)
                deps = support_nodes(cfg, needs_base, user) + deps
                node = add(Node(f"{stage}:{key}", stage, key, to_dict(cfg), deps, run_dir=stage_dir), user)
                stage_ids[stage] = node.id
                if stage == "classifier":
                    clf = node
                else:
                    prev_model = node
            # Test evaluation of the final model stage (or of the base model when the arm trains none).
            eval_dir = run_dir / "eval"
            probe = resolve_config(study, arm, "eval", seed, {**base_paths, "out_dir": "<out>"})
            final_key = prev_model.id if prev_model is not None else "base"
            ekey = config_key("eval", probe, {"model": final_key})
            cfg = probe
            cfg.out_dir = str(eval_dir)
            deps = support_nodes(cfg, prev_model is None, user) + ([prev_model.id] if prev_model else [])
            eid = f"eval:{arm.name}:{seed}"
            nodes[eid] = Node(eid, "eval", ekey, to_dict(cfg), deps, run_dir=eval_dir,
                              model_dir=str(prev_model.run_dir / "model") if prev_model else None, users=[user])
            runs[user] = RunPlan(arm.name, seed, run_dir, stage_ids, eid,
                                 prev_model.kind if prev_model else None, init_from)
            spec = study.analyses
            if spec and "rl" in stage_ids and (spec["arms"] is None or arm.name in spec["arms"]):
                rl = nodes[stage_ids["rl"]]
                settings = {k: spec[k] for k in ("kinds", "n_prompts", "group_size", "seed")}
                akey = hashlib.sha256(json.dumps([rl.key, settings], sort_keys=True).encode()).hexdigest()[:10]
                runs[user].analysis_node = add(Node(f"analysis:{rl.key}", "analysis", akey, {**settings, "key": akey},
                                                    [rl.id], run_dir=rl.run_dir, model_dir=str(rl.run_dir)), user).id
    return Plan(study, out, seeds, nodes, runs, stages_root)


def _node_done(node: Node) -> bool:
    if node.kind in STAGES:
        return (node.run_dir / "metrics.json").is_file()
    if node.kind == "eval":
        p = node.run_dir / "metrics.json"
        if not p.is_file():
            return False
        try:
            return read_json(p).get("eval_key") == node.key
        except (ValueError, OSError):
            return False
    if node.kind == "data":
        from harness.stages.common import phantom_dir

        return (phantom_dir(from_dict(RunConfig, node.config)) / "annotation.json").is_file()
    if node.kind == "analysis":
        from harness.stages.analyze import analyses_done

        return analyses_done(node.run_dir, node.config["kinds"], node.key)
    if node.kind == "pretrain":
        from harness.stages.pretrain import base_dir

        return (base_dir(from_dict(RunConfig, node.config)) / "DONE").is_file()
    return False


def acquire_lock(run_dir: Path) -> str | None:
    """Mark a stage run as being executed by this runner (harness/runlock.py); None, or why another live process
    holds it. The stage itself, in a worker or under a launcher, joins the lock as a co-holder."""
    from harness.runlock import RunLocked, acquire

    try:
        acquire(run_dir)
    except RunLocked as e:
        return str(e)
    return None


def release_lock(run_dir: Path) -> None:
    from harness.runlock import release

    release(run_dir)


def _link_stages(plan: Plan) -> None:
    """`<out>/<arm>/seed<k>/<stage>` -> `../../stages/<stage>-seed<k>-<key>` (relative symlinks)."""
    for rp in plan.runs.values():
        rp.dir.mkdir(parents=True, exist_ok=True)
        for stage, nid in rp.stages.items():
            link = rp.dir / stage
            target = os.path.relpath(plan.nodes[nid].run_dir, rp.dir)
            if link.is_symlink():
                if os.readlink(link) == target:
                    continue
                link.unlink()
            elif link.exists():
                continue  # a real folder of the user's: leave it
            try:
                link.symlink_to(target, target_is_directory=True)
            except OSError:
                (rp.dir / f"{stage}.path").write_text(target + "\n")


# ---------------------------------------------------------------------------------------------------------
# Node functions (run in workers)


def prepare_data(cfg: RunConfig, progress: bool = False) -> Path:
    """Synthesize the phantom data set of `cfg` unless it exists (a node of its own: built by one process)."""
    from harness.stages.common import ensure_phantom, phantom_dir

    d = cfg.data
    return ensure_phantom(phantom_dir(cfg), d.synth_n, d.synth_seed, d.synth_image_size, progress)


def evaluate_final(cfg: RunConfig, model_dir: str | None, progress: bool = False) -> dict:
    """Test evaluation of an arm's final model into cfg.out_dir (stale files of an earlier try removed)."""
    from harness.records import RunDir
    from harness.stages.evaluate import evaluate_model
    from harness.stages.loading import base_path

    out = Path(cfg.out_dir)
    if out.is_dir():
        for p in [out / "evals.jsonl", out / "metrics.json", *out.glob("predictions_*.jsonl")]:
            p.unlink(missing_ok=True)
    if model_dir is None:
        model_dir = str(base_path(cfg, progress))
    return evaluate_model(cfg, model_dir, "test", run=RunDir(out), label="final", progress=progress)


def _resolve_function(spec: str) -> Callable:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


# Seconds between looks at a stage run another runner holds (wait_for_locks).
LOCK_POLL_S = 2.0
# Torch threads of every stage run the runner executes (worker processes and workers = 1 alike).
WORKER_THREADS = 1


def gpu_slots(workers: int) -> list[str | None]:
    """The GPU each worker process gets: round robin over the visible GPUs (CUDA_VISIBLE_DEVICES, else all),
    so that `--workers 8` on an 8-GPU machine runs eight stage runs side by side, one per GPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip() and v.strip() != "-1"]
    else:
        import torch

        ids = [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return [ids[i % len(ids)] for i in range(workers)] if ids else [None] * workers


def die_with_parent() -> None:
    """Linux: the kernel sends this process SIGKILL when its parent dies (kill -9 of the runner included), so no
    orphaned worker goes on writing a run folder that a restarted runner then takes over."""
    setter = death_signal_setter()
    if setter is None:
        return
    setter()
    if os.getppid() == 1:  # the parent died before the call above
        os._exit(1)


def death_signal_setter() -> Callable[[], None] | None:
    """A function that asks the kernel for SIGKILL when the calling process's parent dies (Linux; else None).
    Resolved here, in the parent, so that a child can call it between fork and exec without loading anything."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


# Set in a launched stage's environment: its processes (the launcher's ranks, running `harness.cli`) then die
# with their parent as well, so the whole launched tree goes when the runner does.
DIE_WITH_PARENT_ENV = "REGBENCH_DIE_WITH_PARENT"


def die_with_parent_if_launched() -> None:
    if os.environ.get(DIE_WITH_PARENT_ENV) == "1":
        die_with_parent()


def _init_worker(slots=None) -> None:
    die_with_parent()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    gpu = slots.get() if slots is not None else None
    if gpu is not None:  # before torch touches CUDA: this worker then sees one GPU, as cuda:0
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    import torch

    torch.set_num_threads(WORKER_THREADS)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


# Stages a launcher (`--launcher "torchrun --nproc_per_node 8"`) runs across processes; the classifier, the
# evaluation, stage 0 and the data set stay in the runner's worker.
LAUNCHED_STAGES = ("warmup", "sft", "rl")


def launch_stage(kind: str, cfg: RunConfig, launcher: str) -> Path:
    """Run a model stage as `<launcher> -m harness.cli train <stage> <out_dir>/launch_config.yaml`, e.g. under
    torchrun over the machine's GPUs (harness/distributed.py); its output goes to <out_dir>/launch.log.

    The launcher dies with this process (parent-death signal), and its ranks with the launcher (they run
    harness.cli, which sets the same signal when DIE_WITH_PARENT_ENV is set): kill -9 of the runner leaves no
    rank writing the run folder."""
    import shlex
    import subprocess

    import yaml

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config_path = out / "launch_config.yaml"
    atomic_write_text(config_path, yaml.safe_dump(to_dict(cfg), sort_keys=False))
    cmd = [*shlex.split(launcher), "-m", "harness.cli", "train", kind, str(config_path), "--no-progress"]
    log_path = out / "launch.log"
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(cmd)}\n")
        log.flush()
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False,
                            env={**os.environ, DIE_WITH_PARENT_ENV: "1"},
                            preexec_fn=death_signal_setter()).returncode  # noqa: PLW1509 - no allocation in it
    if rc != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
        raise RuntimeError(f"`{shlex.join(cmd)}` exited with status {rc}; the end of {log_path}:\n{tail}")
    return out / "model"


def execute_node(kind: str, function: str, config: dict, model_dir: str | None,
                 launcher: str | None = None) -> dict:
    """Run one node; never raises (the error and traceback come back in the result)."""
    from harness.runlock import scope

    t0 = time.time()
    try:
        with scope():  # the run folders the stage locked are given back when it ends (workers run many)
            return _execute_node(kind, function, config, model_dir, launcher, t0)
    except Exception as e:  # noqa: BLE001 - recorded in the index; other arms go on
        return {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(),
                "elapsed_s": time.time() - t0}


def _execute_node(kind: str, function: str, config: dict, model_dir: str | None, launcher: str | None,
                  t0: float) -> dict:
    cfg = from_dict(RunConfig, config) if kind != "analysis" else None
    if launcher and kind in LAUNCHED_STAGES:
        result = str(launch_stage(kind, cfg, launcher))
    elif kind == "eval":
        result = _resolve_function(function)(cfg, model_dir, progress=False)
    elif kind == "analysis":  # `config` holds the analysis settings, `model_dir` the RL run directory
        result = [str(p) for p in _resolve_function(function)(model_dir, **config, progress=False)]
    else:
        result = str(_resolve_function(function)(cfg, progress=False))
    return {"ok": True, "result": result, "elapsed_s": time.time() - t0}


class _InlineExecutor:
    """The executor interface, running each task at once in this process (workers = 1), on WORKER_THREADS torch
    threads like the worker processes: a stage run's numbers depend on the thread count, and stage runs are
    shared by key, so they must not depend on `--workers`."""

    def submit(self, fn, *args) -> Future:
        import torch

        f: Future = Future()
        before = torch.get_num_threads()
        torch.set_num_threads(WORKER_THREADS)
        try:
            f.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001
            f.set_exception(e)
        finally:
            torch.set_num_threads(before)
        return f

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


def _node_label(node: Node) -> str:
    """Which arms and seeds a graph node serves, for progress lines."""
    users = sorted({f"{arm} seed {seed}" for arm, seed in node.users})
    return ", ".join(users[:3]) + (f", +{len(users) - 3} more" if len(users) > 3 else "")


def _make_executor(workers: int):
    if workers <= 1:
        return _InlineExecutor()
    context = multiprocessing.get_context("spawn")
    slots = context.Queue()
    for gpu in gpu_slots(workers):
        slots.put(gpu)
    return ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker,
                               initargs=(slots,))


# ---------------------------------------------------------------------------------------------------------
# The index


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _rel(plan: Plan, p: Path | None) -> str | None:
    return None if p is None else os.path.relpath(p, plan.out)


def _run_status(plan: Plan, rp: RunPlan) -> tuple[str, str | None, str | None]:
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
        status, error, failed_stage = _run_status(plan, rp)
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
        "updated": _now(), "git_commit": git_commit(),
        "argv": list(argv if argv is not None else sys.argv),
    }


# ---------------------------------------------------------------------------------------------------------
# Running


@dataclass
class ExperimentResult:
    index_path: Path
    index: dict
    failed: list[tuple[str, int]]
    ran: list[tuple[str, int]]

    @property
    def ok(self) -> bool:
        return not self.failed


def run_experiment(study: Study | str | Path, out: str | Path | None = None, *, workers: int = 2,
                   seeds: list[int] | None = None, arms: list[str] | None = None,
                   functions: dict[str, str] | None = None, log: Callable[[str], None] | None = None,
                   argv: list[str] | None = None, launcher: str | None = None,
                   stages_dir: str | Path | None = None, wait_for_locks: bool = False) -> ExperimentResult:
    """Run the selected arms x seeds of a study (all by default); see the module docstring.

    `stages_dir` puts the stage runs in a folder shared with other studies (see `build_plan`); a stage run
    another runner is executing (its lock file names a live process) fails here with a message saying so, or,
    with `wait_for_locks` (search drivers sharing a folder), is waited for and then reused.

    `launcher` (e.g. "torchrun --nproc_per_node 8") runs the warm-up, SFT and RL stages as launched
    multi-process commands, one at a time (so `workers` must be 1); see `launch_stage`."""
    if launcher and workers > 1:
        raise ConfigError(f"--launcher runs each stage over all the machine's processes: use --workers 1, not "
                          f"{workers}")
    if not isinstance(study, Study):
        study = load_study(study)
    out = Path(out) if out else Path("runs") / f"{study.name}-{study.preset}"
    log = log or (lambda s: print(s, flush=True))
    fns = {**DEFAULT_FUNCTIONS, **(functions or {})}
    for a in arms or []:
        study.arm(a)  # unknown names are errors
    plan = build_plan(study, out, seeds, stages_dir)
    selected = [k for k in plan.runs if (not arms or k[0] in arms) and (k[1] in (seeds or study.seeds))]
    index_path = plan.out / "index.json"
    created = _now()
    if index_path.is_file():
        try:
            created = read_json(index_path).get("created", created)
        except (ValueError, OSError):
            pass
    _link_stages(plan)
    for n in plan.nodes.values():
        if _node_done(n):
            n.status = "complete"
    # Only what the selected, incomplete runs need.
    needed: set[str] = set()
    stack = [plan.runs[k].eval_node for k in selected if plan.nodes[plan.runs[k].eval_node].status != "complete"]
    stack += [plan.runs[k].analysis_node for k in selected if plan.runs[k].analysis_node]
    while stack:
        nid = stack.pop()
        if nid in needed or plan.nodes[nid].status == "complete":
            continue
        needed.add(nid)
        stack.extend(plan.nodes[nid].deps)
    order = sorted(needed, key=lambda i: (NODE_ORDER.index(plan.nodes[i].kind),
                                          min(s for _, s in plan.nodes[i].users), i))
    run_info: dict[tuple[str, int], dict] = {}
    t0 = time.time()
    pending_runs = {k for k in selected if plan.nodes[plan.runs[k].eval_node].status != "complete"}
    n_sel = len(selected)
    done_count = [n_sel - len(pending_runs)]
    stage_time: dict[tuple[str, int], float] = {}

    def write_index() -> dict:
        index = build_index(plan, run_info, created, argv)
        atomic_write_json(index_path, index)
        return index

    def settle_runs() -> None:
        for k in sorted(pending_runs):
            rp = plan.runs[k]
            status, error, _ = _run_status(plan, rp)
            if status not in ("complete", "failed"):
                continue
            pending_runs.discard(k)
            done_count[0] += 1
            wall = time.time() - t0
            run_info[k] = {"elapsed_s": round(wall, 2)}
            own = stage_time.get(k, 0.0)
            if status == "complete":
                scores = read_json(plan.nodes[rp.eval_node].run_dir / "metrics.json")
                tail = "; test " + ", ".join(f"{m} {scores[m]:.4f}" for m in ("BLEU_4", "ROUGE_L", "ce_micro_f1")
                                             if isinstance(scores.get(m), int | float))
            else:
                tail = f"; {error}"
                tb = "\n\n".join(plan.nodes[i].traceback for i in (*rp.stages.values(), rp.eval_node)
                                 if plan.nodes[i].traceback)
                (rp.dir / "error.txt").write_text((error or "") + "\n\n" + tb)
            log(f"[experiment {study.name}] {done_count[0]}/{n_sel} {k[0]} seed {k[1]}: {status} "
                f"(stages {own:.0f}s, elapsed {wall:.0f}s){tail}")

    for k in selected:
        if k not in pending_runs:
            log(f"[experiment {study.name}] {k[0]} seed {k[1]}: already complete, skipped")
    log(f"[experiment {study.name}] preset {study.preset}: {len(pending_runs)} of {n_sel} runs to do, "
        f"{len(order)} stage runs, {workers} worker(s); index {index_path}")
    write_index()
    remaining = list(order)
    running: dict[Future, str] = {}
    waiting: set[str] = set()  # stage runs another runner holds (wait_for_locks)
    executor = _make_executor(workers)
    limit = max(1, workers)
    try:
        while remaining or running:
            progressed = False
            for nid in list(remaining):
                node = plan.nodes[nid]
                dep_status = [plan.nodes[d].status for d in node.deps]
                if any(s in ("failed", "skipped") for s in dep_status):
                    bad = next(plan.nodes[d] for d in node.deps if plan.nodes[d].status in ("failed", "skipped"))
                    node.status, node.error = "skipped", f"needs {bad.kind} run {bad.key}, which did not finish"
                    remaining.remove(nid)
                    progressed = True
                    continue
                if all(s == "complete" for s in dep_status) and len(running) < limit:
                    if node.kind in STAGES or node.kind == "eval":
                        node.run_dir.mkdir(parents=True, exist_ok=True)
                    if node.kind in STAGES:
                        held = acquire_lock(node.run_dir)
                        if held and wait_for_locks:
                            if nid not in waiting:
                                waiting.add(nid)
                                log(f"[experiment {study.name}] waiting for {node.kind} ({_node_label(node)}): "
                                    f"{held}")
                            continue
                        waiting.discard(nid)
                        remaining.remove(nid)
                        progressed = True
                        if held:
                            node.status, node.error = "failed", held
                            log(f"[experiment {study.name}] FAILED {node.kind} ({_node_label(node)}): {held}")
                            continue
                        if _node_done(node):  # another runner finished it while this one planned or waited
                            release_lock(node.run_dir)
                            node.status = "complete"
                            log(f"[experiment {study.name}] {node.kind} ({_node_label(node)}) was finished by "
                                "another runner: reused")
                            continue
                    else:
                        remaining.remove(nid)
                        progressed = True
                    node.status = "running"
                    fut = executor.submit(execute_node, node.kind, fns[node.kind], node.config, node.model_dir,
                                          launcher)
                    running[fut] = nid
                    log(f"[experiment {study.name}] started {node.kind} ({_node_label(node)})")
                    progressed = True
            if progressed:
                settle_runs()
                write_index()
            if not running:
                if remaining and not progressed:
                    if waiting:
                        time.sleep(LOCK_POLL_S)
                        continue
                    raise RuntimeError(f"experiment graph is stuck at {remaining[:3]}")  # pragma: no cover
                continue
            finished, _ = wait(list(running), timeout=LOCK_POLL_S if waiting else None,
                               return_when=FIRST_COMPLETED)
            broken = False
            for fut in finished:
                nid = running.pop(fut)
                node = plan.nodes[nid]
                try:
                    res = fut.result()
                except BrokenProcessPool:
                    res = {"ok": False, "error": "worker process died (killed, e.g. out of memory?)",
                           "traceback": traceback.format_exc(), "elapsed_s": None}
                    broken = True
                node.elapsed_s = None if res.get("elapsed_s") is None else round(res["elapsed_s"], 2)
                for user in node.users:
                    stage_time[user] = stage_time.get(user, 0.0) + (res.get("elapsed_s") or 0.0)
                if res["ok"] and node.kind == "eval":
                    scores = dict(res["result"])
                    scores.update(eval_key=node.key, final_stage=plan.runs[node.users[0]].final_stage,
                                  model_dir=node.model_dir)
                    atomic_write_json(node.run_dir / "metrics.json", scores)
                if node.kind in STAGES:
                    release_lock(node.run_dir)
                log(f"[experiment {study.name}] {'finished' if res['ok'] else 'FAILED'} {node.kind} "
                    f"({_node_label(node)}) in {res.get('elapsed_s') or 0:.0f}s")
                if res["ok"]:
                    node.status = "complete"
                else:
                    node.status, node.error, node.traceback = "failed", res["error"], res.get("traceback")
            if broken:
                for fut, nid in list(running.items()):
                    plan.nodes[nid].status = "failed"
                    plan.nodes[nid].error = "worker process died (killed, e.g. out of memory?)"
                    running.pop(fut)
                executor.shutdown(wait=False, cancel_futures=True)
                executor = _make_executor(workers)
            settle_runs()
            write_index()
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
        for nid in running.values():
            plan.nodes[nid].status = "pending"
            if plan.nodes[nid].kind in STAGES:
                release_lock(plan.nodes[nid].run_dir)
        index = write_index()
    failed = [(r["arm"], r["seed"]) for r in index["runs"] if r["status"] == "failed"
              and (r["arm"], r["seed"]) in selected]
    ran = [k for k in selected if k in run_info]
    n_ok = sum(1 for k in selected if _run_status(plan, plan.runs[k])[0] == "complete")
    log(f"[experiment {study.name}] done in {time.time() - t0:.0f}s: {n_ok} complete, {len(failed)} failed; "
        f"index {index_path}")
    return ExperimentResult(index_path, index, failed, ran)


def describe_plan(plan: Plan, seeds: list[int] | None = None, arms: list[str] | None = None) -> str:
    """A text table of the plan: arm, seed, pipeline, stage keys (shared ones marked), status."""
    study = plan.study
    lines = [f"study {study.name} ({study.title}); preset {study.preset}; reproduces {study.reproduces}; "
             f"reference arm {study.reference}; seeds {plan.seeds}; out {plan.out}"]
    for a in study.arms:
        lines.append(f"  arm {a.name:<16} {a.label!r:<36} pipeline {'+'.join(a.pipeline) or '(base)'}")
    lines.append("")
    lines.append("| arm | seed | stage runs (key, *shared) | status |")
    lines.append("|---|---|---|---|")
    for (arm, seed), rp in plan.runs.items():
        if (arms and arm not in arms) or (seeds and seed not in seeds):
            continue
        cells = []
        for stage, nid in rp.stages.items():
            n = plan.nodes[nid]
            cells.append(f"{stage} {n.key}{'*' if len(n.users) > 1 else ''}")
        ev = plan.nodes[rp.eval_node]
        status = "complete" if _node_done(ev) else "pending"
        lines.append(f"| {arm} | {seed} | {', '.join(cells) or '-'} | {status} |")
    distinct = plan.stage_nodes()
    lines.append("")
    lines.append(f"{len(plan.runs)} runs; {len(distinct)} distinct stage runs "
                 f"({sum(len(r.stages) for r in plan.runs.values())} without sharing)")
    return "\n".join(lines)
