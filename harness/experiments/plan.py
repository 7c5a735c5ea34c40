"""The plan graph of a study: one node per distinct stage run (shared by the arms whose keys agree), data set,
stage 0, test evaluation and analysis, with the arm x seed runs that use them."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import ConfigError, RunConfig, from_dict, to_dict
from harness.data.phantom import PhantomConfig, split_counts
from harness.experiments.resolve import config_key, resolve_config
from harness.experiments.study import MODEL_STAGES, STAGES, Study
from harness.runs.records import read_json
from harness.runs.schema import EVAL_KEY, METRICS_FILE
from harness.stages import paths as stage_paths  # the stages' keys and paths: one interface

phantom_splits = stage_paths.phantom.SPLITS

# The order ready nodes start in. The longer kinds first: an RL run's Supp. A analysis (minutes at the paper's
# settings) before the test evaluations, which then fill the workers at the end of a study instead of one
# analysis running alone after them. The test split's own phantom set (`test_data`) is only read by the test
# evaluations, so it waits for a worker that no stage can use: drawn first, it held a worker while stage 0 (the
# head of the longest path of a study from an empty cache) waited for it (issue 27).
NODE_ORDER = ("data", "pretrain", *STAGES, "test_data", "analysis", "eval")


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
    jobs: list[str] = field(default_factory=list)  # --executor slurm: its Slurm job ids, the last one current
    # --executor slurm: kind -> Resources of the study the node comes from when that is not the plan's own (a run of
    # an `upstream:` study asks for what its own preset gives it); None: the plan's study's.
    resources: dict | None = None


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
    upstream: dict[str, str] = field(default_factory=dict)  # stage -> the upstream study's node it starts from


@dataclass
class Plan:
    study: Study
    out: Path
    seeds: list[int]
    nodes: dict[str, Node]
    runs: dict[tuple[str, int], RunPlan]
    stages_root: Path | None = None
    stage_evals: dict[str, str] = field(default_factory=dict)  # study `stage_evals`: stage -> its eval node id

    def stage_nodes(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind in STAGES]


def _data_node(cfg: RunConfig, splits: tuple[str, ...] = phantom_splits) -> tuple[str, str] | None:
    if cfg.data.dataset != "phantom" or cfg.data.annotation is not None:
        return None
    where = str(stage_paths.phantom_dir(cfg, splits).resolve())
    return "data:" + hashlib.sha256(where.encode()).hexdigest()[:10], where


def _pretrain_node(cfg: RunConfig) -> tuple[str, str] | None:
    if not stage_paths.uses_tiny_base(cfg):
        return None
    where = str(stage_paths.base_dir(cfg).resolve())
    return "pretrain:" + hashlib.sha256(where.encode()).hexdigest()[:10], where


def _base_key(cfg: RunConfig) -> str | None:
    """The cache key of the tiny stage-0 base a run starts from (its recipe version included), None for a
    model given by path (the path is in the config already)."""
    if not stage_paths.uses_tiny_base(cfg):
        return None
    return stage_paths.base_key(cfg)


def overlapping_test_split(train: RunConfig, test: RunConfig) -> str | None:
    """Why `test`'s phantom test split would hold studies that `train` trains or validates on, else None.

    A phantom study depends only on its seed and index (harness/data/phantom/writer.py), and the splits are
    index ranges (train, then val, then test). An evaluation may read a larger set of the same seed (a larger
    test split, issue 12) as long as its test range starts after the training set's train and val ranges."""
    a, b = train.data, test.data
    drawn_alike = a.dataset == b.dataset == "phantom" and not (a.annotation or b.annotation)
    if not drawn_alike or a.synth_seed != b.synth_seed or a.synth_n == b.synth_n:
        return None

    fractions = PhantomConfig().split_fractions
    n_train, n_val, _ = split_counts(a.synth_n, fractions)
    b_train, b_val, b_test = split_counts(b.synth_n, fractions)
    start = b_train + b_val
    if start >= n_train + n_val:
        return None
    return (f"the test split of its phantom set (data.synth_n {b.synth_n}, seed {b.synth_seed}) is studies "
            f"{start}-{start + b_test - 1}, but studies 0-{n_train + n_val - 1} of the same seed are the train and "
            f"val splits of the set it was trained on (data.synth_n {a.synth_n}); give the evaluation a "
            f"data.synth_n of at least {a.synth_n}, or another data.synth_seed")


def data_paths(study: Study, out: Path) -> dict[str, str]:
    """Where every run of the study keeps its phantom data: `<out>/data`, unless the study sets data.synth_dir."""
    return {} if "synth_dir" in (study.common.get("data") or {}) else {"data.synth_dir": str(out / "data")}


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

    def support_nodes(cfg: RunConfig, needs_base: bool, user, test_only: bool = False) -> list[str]:
        deps = []
        data = _data_node(cfg, ("test",) if test_only else phantom_splits)
        if data:
            kind = "test_data" if test_only else "data"
            deps.append(add(Node(data[0], kind, data[0].split(":")[1], to_dict(cfg), []), user).id)
        if needs_base:
            pre = _pretrain_node(cfg)
            if pre:
                deps.append(add(Node(pre[0], "pretrain", pre[0].split(":")[1], to_dict(cfg), []), user).id)
        return deps

    upstream = UpstreamNodes(study, out, seeds, stages_root, add) if study.upstream else None
    for arm in study.arms:
        for seed in seeds:
            user = (arm.name, seed)
            run_dir = out / arm.name / f"seed{seed}"
            base_paths = data_paths(study, out)
            prev_model: Node | None = None
            clf: Node | None = None
            stage_ids: dict[str, str] = {}
            trained_on: dict[str, RunConfig] = {}
            init_from: dict[str, str | None] = {}
            from_upstream: dict[str, str] = {}
            for stage in arm.pipeline:
                paths = dict(base_paths)
                inputs: dict[str, Any] = {}
                runner_paths: list[str] = []
                deps: list[str] = []
                needs_base = False
                up = upstream.node(arm, stage, study.stage_seeds.get(stage, seed), user, prev_model) \
                    if upstream else None
                if up is not None:  # another study's stage run is this stage's input (study field `upstream`)
                    field_name = "classifier.pretrained_path" if stage == "classifier" else "init_from"
                    paths[field_name] = str(up.run_dir / ("classifier" if stage == "classifier" else "model"))
                    inputs["pretrained" if stage == "classifier" else "init"] = up.id
                    runner_paths.append(field_name)
                    deps.append(up.id)
                    from_upstream[stage] = up.id
                    trained_on[f"{study.upstream.file.name} {up.kind}"] = from_dict(RunConfig, up.config)
                    if stage in MODEL_STAGES:
                        init_from[stage] = f"{study.upstream.study.name}:{up.kind}"
                elif stage in MODEL_STAGES:
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
                if up is not None:
                    upstream.check_compatible(arm, stage, probe, up)
                elif stage in MODEL_STAGES and prev_model is None:
                    if probe.init_from:
                        init_from[stage] = "path"
                    needs_base = not probe.init_from
                    base = _base_key(probe) if needs_base else None
                    if base:  # the stage-0 base it starts from: a rebuilt base (new recipe) means new runs
                        inputs["base"] = base
                if stage == "sft" and clf is None and not probe.classifier.dir:
                    raise ConfigError(f"{study.path.name}, arm '{arm.name}': stage sft needs 'classifier' in the "
                                      "pipeline or classifier.dir set")
                trained_on[stage] = probe
                key = config_key(stage, probe, inputs, tuple(runner_paths))
                stage_dir = stages_root / f"{stage}-seed{probe.seed}-{key}"
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
            for stage, stage_cfg in trained_on.items():
                leak = overlapping_test_split(stage_cfg, probe)
                if leak:
                    raise ConfigError(f"{study.path.name}, arm '{arm.name}': the test evaluation would test on "
                                      f"studies stage '{stage}' learned from: {leak}")
            final_key = prev_model.id if prev_model is not None else f"base:{_base_key(probe)}"
            ekey = config_key("eval", probe, {"model": final_key})
            cfg = probe
            cfg.out_dir = str(eval_dir)
            deps = support_nodes(cfg, prev_model is None, user, test_only=True)
            deps += [prev_model.id] if prev_model else []
            eid = f"eval:{arm.name}:{seed}"
            nodes[eid] = Node(eid, "eval", ekey, to_dict(cfg), deps, run_dir=eval_dir,
                              model_dir=str(prev_model.run_dir / "model") if prev_model else None, users=[user])
            runs[user] = RunPlan(arm.name, seed, run_dir, stage_ids, eid,
                                 prev_model.kind if prev_model else None, init_from, upstream=from_upstream)
            spec = study.analyses
            if spec and "rl" in stage_ids and (spec["arms"] is None or arm.name in spec["arms"]):
                rl = nodes[stage_ids["rl"]]
                settings = {k: spec[k] for k in ("kinds", "n_prompts", "group_size", "seed")}
                akey = hashlib.sha256(json.dumps([rl.key, settings], sort_keys=True).encode()).hexdigest()[:10]
                runs[user].analysis_node = add(Node(f"analysis:{rl.key}", "analysis", akey, {**settings, "key": akey},
                                                    [rl.id], run_dir=rl.run_dir, model_dir=str(rl.run_dir)), user).id
    stage_evals = {stage: add_stage_eval(study, stage, out, nodes, runs, support_nodes) for stage in study.stage_evals}
    share_whole_sets(nodes)
    return Plan(study, out, seeds, nodes, runs, stages_root, stage_evals)


class UpstreamNodes:
    """The stage runs a study's `upstream:` (harness/experiments/study.py: Upstream) takes as inputs: the upstream
    arm's plan over the seeds needed, into the same stages folder, so a run keeps the key it has in its own study
    (run there first, or with a shared --stages-dir, it is reused). Only the nodes a stage of this study uses join
    the graph (that stage run and what it needs: its earlier stages, data, stage 0), used by that stage's runs."""

    def __init__(self, study: Study, out: Path, seeds: list[int], stages_root: Path, add):
        up = study.upstream
        self.study, self.up, self.add = study, up, add
        arm = up.study.arm(up.arm)
        last = max(STAGES.index(s) for s in up.stages.values())
        # The arm's stages up to the last one used; a later stage never changes an earlier stage's key.
        arm = dataclasses.replace(arm, pipeline=[s for s in arm.pipeline if STAGES.index(s) <= last])
        needed = sorted({study.stage_seeds.get(s, k) for k in seeds for s in up.stages})
        narrowed = dataclasses.replace(up.study, arms=[arm], seeds=needed, baseline=arm.name, analyses=None,
                                       contrasts=[], stage_evals=[], upstream=None)
        self.plan = build_plan(narrowed, out, needed, stages_root)

    def node(self, arm, stage: str, seed: int, user: tuple[str, int], prev_model: Node | None) -> Node | None:
        """The upstream node `stage` of (arm, seed) starts from, joined to the graph for `user`; None when the
        study's upstream does not feed `stage`."""
        theirs = self.up.stages.get(stage)
        if theirs is None:
            return None
        if stage in MODEL_STAGES and prev_model is not None:
            raise ConfigError(f"{self.study.path.name}, arm '{arm.name}': upstream.stages gives stage '{stage}' the "
                              f"model of {self.up.file.name}'s {theirs}, but the arm's {stage} starts from its own "
                              f"{prev_model.kind}; an upstream model feeds the first model stage of a pipeline only")
        nid = self.plan.runs[(self.up.arm, seed)].stages[theirs]
        stack, seen = [nid], set()
        while stack:  # the node and everything it needs
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            node = self.plan.nodes[i]
            self.add(dataclasses.replace(node, users=[], deps=list(node.deps), resources=self.up.study.resources),
                     user)
            stack.extend(node.deps)
        return self.add(self.plan.nodes[nid], user)

    def check_compatible(self, arm, stage: str, cfg: RunConfig, up: Node) -> None:
        """A stage that starts from an upstream run must build the same network: one line naming the field."""
        theirs = from_dict(RunConfig, up.config)
        if stage == "classifier":
            fields = [f"classifier.{f}" for f in ("arch", "img_size", "global_pool")]
        else:
            fields = ["model.preset", *(f"model.{f}" for f in ("tiny_text_hidden", "tiny_text_layers",
                                                                 "tiny_vision_hidden", "tiny_vision_depth",
                                                                 "tiny_vocab_size"))]
        for dotted in fields:
            section, name = dotted.split(".")
            a, b = getattr(getattr(cfg, section), name), getattr(getattr(theirs, section), name)
            if a != b:
                raise ConfigError(f"{self.study.path.name}, arm '{arm.name}': stage '{stage}' starts from "
                                  f"{self.up.file.name}'s {up.kind} run, which has {dotted} = {b!r}, not {a!r}")


STAGE_EVAL_PREFIX = "eval:stage:"  # the node ids of `stage_evals` (arms' evaluations: eval:<arm>:<seed>)


def add_stage_eval(study: Study, stage: str, out: Path, nodes: dict[str, Node], runs: dict, support_nodes) -> str:
    """The node of one `stage_evals` entry: the test evaluation of the baseline arm's `stage` model on the study's
    first seed ("base": the preset's base model), configured as that run's own test evaluation, into
    `<out>/eval_stages/<stage>/`. Its only inputs are that model and the test data, so it runs as soon as they exist."""
    arm, seed = study.arm(study.baseline), study.seeds[0]
    user = (arm.name, seed)
    run_dir = out / "eval_stages" / stage
    cfg = resolve_config(study, arm, "eval", seed, {**data_paths(study, out), "out_dir": str(run_dir)})
    model = nodes[runs[user].stages[stage]] if stage != "base" else None
    key = config_key("eval", cfg, {"model": model.id if model else f"base:{_base_key(cfg)}"})
    deps = support_nodes(cfg, model is None, user, test_only=True) + ([model.id] if model else [])
    nid = STAGE_EVAL_PREFIX + stage
    nodes[nid] = Node(nid, "eval", key, to_dict(cfg), deps, run_dir=run_dir,
                      model_dir=str(model.run_dir / "model") if model else None, users=[user])
    return nid


def share_whole_sets(nodes: dict[str, Node]) -> None:
    """An evaluation reads the test split of a phantom set that a training stage of the plan draws whole from
    that whole set; only a set no stage trains on is drawn as its test split alone (a `test_data` node)."""
    for node in list(nodes.values()):
        if node.kind != "eval":
            continue
        for i, dep in enumerate(node.deps):
            part = nodes[dep]
            if part.kind != "test_data":
                continue
            whole = _data_node(from_dict(RunConfig, node.config))[0]
            if whole in nodes:
                node.deps[i] = whole
                for user in node.users:
                    if user not in nodes[whole].users:
                        nodes[whole].users.append(user)
    used = {dep for node in nodes.values() for dep in node.deps}
    for nid in [nid for nid, node in nodes.items() if node.kind == "test_data" and nid not in used]:
        del nodes[nid]


def node_done(node: Node) -> bool:
    if node.kind in STAGES:
        return (node.run_dir / METRICS_FILE).is_file()
    if node.kind == "eval":
        p = node.run_dir / METRICS_FILE
        if not p.is_file():
            return False
        try:
            return read_json(p).get(EVAL_KEY) == node.key
        except (ValueError, OSError):
            return False
    if node.kind == "data":
        return (stage_paths.phantom_dir(from_dict(RunConfig, node.config)) / "annotation.json").is_file()
    if node.kind == "test_data":
        return (stage_paths.test_split_dir(from_dict(RunConfig, node.config)) / "annotation.json").is_file()
    if node.kind == "analysis":
        return stage_paths.analyses_done(node.run_dir, node.config["kinds"], node.key)
    if node.kind == "pretrain":
        return (stage_paths.base_dir(from_dict(RunConfig, node.config)) / "DONE").is_file()
    return False


def link_stages(plan: Plan) -> None:
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
