"""Study files (experiments/*.yaml): parsing and validating a study over its preset into a `Study` of `Arm`s.

A study file starts with `base: presets/<preset>.yaml` and lists arms (a name, per-stage overrides, the
stages it runs), its baseline arm (`baseline:`, the arm every comparison is against), seeds and the published
table it reproduces (experiments/README.md has the format).
"""

from __future__ import annotations

import copy
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import ConfigError, apply_overrides, load_yaml, preset_overrides, read_yaml_mapping
from harness.constants import PIPELINE_STAGES
from harness.experiments.contrasts import check_contrasts, check_decide
from harness.experiments.resources import check_resources
from harness.runs.schema import ArmKey
from harness.stages.analyze import parse_study_analyses

STAGES = PIPELINE_STAGES
MODEL_STAGES = ("warmup", "sft", "rl")
OVERRIDE_SCOPES = ("all", *STAGES, "eval")

_STUDY_KEYS = {"study", "title", "description", "reproduces", "baseline", "seeds", "pipeline", "arms", "preset",
               "common", "stages", "analyses", "published_dataset", "stage_seeds", "contrasts", "decide",
               "test_reports", "resources", "stage_evals", "upstream",
               "reference"}  # the deprecated name of `baseline` (load_study warns)
_ARM_KEYS = {"name", "label", "published_row", "factors", "pipeline", "overrides", "presets", "description"}
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_]*$")  # names of arms and searches: folder names


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
        """The arm as index.json records it."""
        return {ArmKey.NAME: self.name, ArmKey.LABEL: self.label, ArmKey.PUBLISHED_ROW: self.published_row,
                ArmKey.FACTORS: self.factors, ArmKey.PIPELINE: self.pipeline, ArmKey.OVERRIDES: self.overrides}

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
    baseline: str  # the arm every comparison is against (`baseline:`; default: the first arm)
    seeds: list[int]
    arms: list[Arm]
    # The merged document: the preset's `common` and `stages` sections with the study's on top.
    common: dict
    stages: dict
    # `analyses:` (harness/stages/analyze.py: parse_study_analyses): Supp. A records after the RL arms, or None.
    analyses: dict | None = None
    # `published_dataset:` the data set whose published rows the report shows when ours is synthetic.
    published_dataset: str | None = None
    # `stage_seeds:` {stage: seed}: these stages run with this seed for every study seed, so the seeds share
    # them (e.g. one SFT model for all RL seeds, as a paper's RL runs start from one SFT model).
    stage_seeds: dict[str, int] = field(default_factory=dict)
    # `contrasts:` the primary contrasts, one entry per (arm, baseline, metric, delta): the family the decision
    # rule runs over (harness/stats/decisions.py); every other difference in the tables is exploratory.
    contrasts: list[dict] = field(default_factory=list)
    # `decide:` the rule's settings: alpha, the planned seed counts of `--until-decided` (looks), alpha spending.
    decide: dict = field(default_factory=dict)
    # `test_reports:` "shared" (default: every seed is tested on the same test split, so a verdict is about that
    # split) or "per_seed" (phantom data: each seed is tested on its own draw of studies that no stage trained on,
    # so a verdict is about the testbed's population; harness/experiments/resolve.py).
    test_reports: str = "shared"
    # `resources:` (harness/experiments/resources.py) what each kind of stage run asks a Slurm cluster for; the
    # local executor ignores it. node kind -> Resources, every kind present.
    resources: dict = field(default_factory=dict)
    # `stage_evals:` test evaluations of the models the arms start from, as nodes of the plan (so they run while
    # the workers would otherwise wait, e.g. the base during the warm-up): "base" (the preset's base model), "warmup",
    # "sft" (the baseline arm's stage runs on the study's first seed). Each lands in `<out>/eval_stages/<stage>/`.
    stage_evals: list[str] = field(default_factory=list)
    # `upstream:` stages that start from another study's stage runs (e.g. IU-Xray's warm-up and classifier from
    # MIMIC-CXR's, as the official code does); None: every stage starts from the base model or this study's runs.
    upstream: Upstream | None = None

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise ConfigError(f"{self.path}: no arm '{name}' (arms: {', '.join(a.name for a in self.arms)})")


@dataclass
class Upstream:
    """A study's `upstream:`: its `stages` (this study's stage -> the upstream arm's stage) take their input from
    the stage runs of `arm` of `study` (loaded with the preset `upstream.presets` maps this study's preset to, else
    with this study's preset file): a model stage's `init_from` is that run's model, the classifier's
    `classifier.pretrained_path` that run's classifier. The plan adds those runs as nodes of its graph, keyed as in
    their own study (harness/experiments/plan.py), so they run first, or are reused where a shared --stages-dir
    holds them."""
    study: Study
    arm: str
    stages: dict[str, str]
    file: Path


UPSTREAM_KEYS = ("study", "arm", "stages", "presets", "sets")


def load_upstream(value: Any, where: Path, preset_name: str, preset_file: Path) -> Upstream | None:
    """`upstream: {study: FILE, arm: NAME (default: its baseline arm), stages: {this stage: its stage},
    presets: {this study's preset name: its preset file}, sets: [KEY=VALUE, ...]}`, checked and loaded."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - set(UPSTREAM_KEYS) or not {"study", "stages"} <= set(value):
        raise ConfigError(f"{where}: 'upstream' must be a mapping with keys study, stages and optionally arm, presets, "
                          f"sets; got {value!r}")
    stages = value["stages"]
    if not isinstance(stages, dict) or not stages:
        raise ConfigError(f"{where}: upstream.stages must map this study's stages to the upstream arm's, e.g. "
                          "{warmup: warmup, classifier: classifier}")
    for mine, theirs in stages.items():
        if mine not in STAGES or theirs not in STAGES or (mine == "classifier") != (theirs == "classifier"):
            raise ConfigError(f"{where}: upstream.stages maps '{mine}' to '{theirs}': a model stage "
                              f"({', '.join(MODEL_STAGES)}) must take a model stage, the classifier the classifier")
    presets = value.get("presets") or {}
    sets = value.get("sets") or []
    if not isinstance(presets, dict) or not isinstance(sets, list) or not all(isinstance(x, str) for x in sets):
        raise ConfigError(f"{where}: upstream.presets must map preset names to preset files and upstream.sets be a "
                          "list of KEY=VALUE strings")
    file = (where.parent / str(value["study"])).resolve()
    up_preset = (where.parent / str(presets[preset_name])).resolve() if preset_name in presets else preset_file
    study = load_study(file, preset=up_preset, sets=sets)
    if study.upstream is not None:
        raise ConfigError(f"{where}: the upstream study {file.name} declares an upstream of its own; chain at most "
                          "one level")
    arm = study.arm(str(value.get("arm") or study.baseline))
    missing = [theirs for theirs in stages.values() if theirs not in arm.pipeline]
    if missing:
        raise ConfigError(f"{where}: upstream arm '{arm.name}' of {file.name} does not run stage '{missing[0]}' "
                          f"(pipeline: {', '.join(arm.pipeline)})")
    return Upstream(study=study, arm=arm.name, stages={str(k): str(v) for k, v in stages.items()}, file=file)


def deep_merge(dst: dict, src: dict) -> dict:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            deep_merge(dst[k], v)
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


def fold_preset_overrides(doc: dict, source: str) -> dict:
    """A preset file whose top level also sets config sections (`base: tiny.yaml` then `rl: {reward: ..}`, the
    form a single stage command reads) as a plain preset: those sections go on top of every stage's, as
    `stage_view` applies them."""
    top = preset_overrides(doc, source)
    if not top:
        return doc
    doc = {k: v for k, v in doc.items() if k not in top}
    stages = doc.setdefault("stages", {}) or {}
    doc["stages"] = stages
    for stage in (*STAGES, "eval"):
        section = stages.setdefault(stage, {}) or {}
        stages[stage] = section
        deep_merge(section, copy.deepcopy(top))
    return doc


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
    doc = fold_preset_overrides(load_yaml(preset_file), str(preset_file))
    preset_name = doc.get("preset") or preset_file.stem
    doc.pop("description", None)
    deep_merge(doc, raw)
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
    baseline = check_baseline(doc, str(path), names)

    try:
        analyses = parse_study_analyses(doc.get("analyses"), str(path), names)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    return Study(name=name, title=str(doc.get("title", name)), path=path, preset=preset_name,
                 preset_file=preset_file, reproduces=doc.get("reproduces"), baseline=baseline, seeds=seeds,
                 arms=arms, common=doc.get("common") or {}, stages=doc.get("stages") or {}, analyses=analyses,
                 published_dataset=doc.get("published_dataset"),
                 stage_seeds=check_stage_seeds(doc.get("stage_seeds"), str(path)),
                 contrasts=check_contrasts(doc.get("contrasts"), str(path), names, baseline),
                 decide=check_decide(doc.get("decide"), str(path)),
                 test_reports=check_test_reports(doc.get("test_reports", "shared"), str(path)),
                 resources=check_resources(doc.get("resources"), str(path)),
                 stage_evals=check_stage_evals(doc.get("stage_evals"), str(path), next(a for a in arms
                                                                                        if a.name == baseline)),
                 upstream=load_upstream(doc.get("upstream"), path, preset_name, preset_file))


def check_baseline(doc: dict, where: str, names: list[str]) -> str:
    """The study's baseline arm: `baseline:`, or the first arm. The old key `reference:` (which also names the
    reference policy of the KL term) is still read, with a warning naming the new one."""
    if "reference" in doc:
        if "baseline" in doc:
            raise ConfigError(f"{where}: both 'baseline' and its deprecated name 'reference' are set; keep 'baseline'")
        warnings.warn(f"{where}: the key 'reference' is deprecated: it names the baseline arm, so write "
                      f"'baseline: {doc['reference']}'", FutureWarning, stacklevel=3)
    baseline = doc.get("baseline", doc.get("reference", names[0]))
    if baseline not in names:
        raise ConfigError(f"{where}: baseline arm '{baseline}' is not one of the arms: {', '.join(names)}")
    return baseline


def check_stage_seeds(value: Any, where: str) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(k in STAGES and isinstance(v, int) and not isinstance(v, bool)
                                              for k, v in value.items()):
        raise ConfigError(f"{where}: 'stage_seeds' must map stages ({', '.join(STAGES)}) to integer seeds, "
                          f"got {value!r}")
    return dict(value)


TEST_REPORTS = ("shared", "per_seed")


STAGE_EVALS = ("base", "warmup", "sft")


def check_stage_evals(value: Any, where: str, baseline: Arm) -> list[str]:
    """`stage_evals:` a list of "base", "warmup", "sft"; a trained stage must be in the baseline arm's pipeline."""
    if value is None:
        return []
    if not isinstance(value, list) or any(v not in STAGE_EVALS for v in value) or len(set(value)) != len(value):
        raise ConfigError(f"{where}: 'stage_evals' must list each of {', '.join(STAGE_EVALS)} at most once, "
                          f"got {value!r}")
    missing = [v for v in value if v != "base" and v not in baseline.pipeline]
    if missing:
        raise ConfigError(f"{where}: 'stage_evals' names '{missing[0]}', which the baseline arm "
                          f"'{baseline.name}' does not train (pipeline: {', '.join(baseline.pipeline)})")
    return sorted(value, key=STAGE_EVALS.index)


def check_test_reports(value: Any, where: str) -> str:
    if value not in TEST_REPORTS:
        raise ConfigError(f"{where}: test_reports must be one of {', '.join(TEST_REPORTS)}, got {value!r}")
    return value
