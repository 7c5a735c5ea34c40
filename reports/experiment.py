"""Loading an experiment folder: its index.json (experiments/README.md; its format, layout and the run
directory's file names: harness/runs/schema.py) and the run records it points to. Reports read nothing else.

An `Experiment` is a list of `ArmRecord`s (a study arm as index.json records it: name, label, published_row,
factors) and runs (arm, seed, test scores,
RL run directory). Without index.json, a folder of run directories is read instead: every directory below
it holding a manifest.json is a run, its arm named by its config (`<regularizer>_<reference>`, plus the
reward when it is not bleu4), its test scores the last `split == "test"` line of its evals.jsonl.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from harness.runs.schema import (
    EVALS_FILE,
    FINAL_TEST_PREDICTIONS,
    INDEX_FILE,
    INDEX_FORMAT,
    MANIFEST_FILE,
    METRICS_FILE,
    NOT_REQUESTED,
    SAMPLES_FILE,
    STEPS_FILE,
    TEST_PREDICTIONS_GLOB,
    ArmKey,
    EvalKey,
    IndexKey,
    ManifestKey,
    RunKey,
    StageKey,
    analysis_file,
)
from reports.bootstrap import report_data_from_rows


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def read_jsonl(path: Path | None) -> list[dict]:
    """Lines of a JSONL file; a missing file gives [], a torn last line is dropped."""
    if path is None or not Path(path).is_file():
        return []
    rows = []
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise
    return rows


def is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(float(v))


@dataclass
class ArmRecord:
    """A study arm as index.json records it (the reader's view; harness.experiments.Arm is the study's arm)."""
    name: str
    label: str
    published_row: str | None = None
    factors: dict = field(default_factory=dict)


@dataclass
class Run:
    arm: str
    seed: int
    dir: Path | None = None
    rl_dir: Path | None = None
    eval_dir: Path | None = None
    scores: dict = field(default_factory=dict)  # flat test scores
    status: str = "complete"
    error: str | None = None
    final_stage: str = "?"  # the stage whose model was tested ("base": the base model; "?": not recorded)

    @cached_property
    def steps(self) -> list[dict]:
        return read_jsonl(self.rl_dir / STEPS_FILE) if self.rl_dir else []

    @cached_property
    def evals(self) -> list[dict]:
        return read_jsonl(self.rl_dir / EVALS_FILE) if self.rl_dir else []

    @property
    def val_evals(self) -> list[dict]:
        return [e for e in self.evals if e.get(EvalKey.SPLIT, "val") == "val"]

    @cached_property
    def samples(self) -> list[dict]:
        return read_jsonl(self.rl_dir / SAMPLES_FILE) if self.rl_dir else []

    @cached_property
    def rl_metrics(self) -> dict:
        """The RL run's metrics.json (rl.select's selected_step, final_step, ...), {} without one."""
        return (_read_json(self.rl_dir / METRICS_FILE) or {}) if self.rl_dir else {}

    @cached_property
    def manifest(self) -> dict:
        if self.rl_dir is None:
            return {}
        return _read_json(self.rl_dir / MANIFEST_FILE) or {}

    @property
    def config(self) -> dict:
        return self.manifest.get(ManifestKey.CONFIG) or {}

    @cached_property
    def predictions_path(self) -> Path | None:
        """The eval stage's per-report test outputs: predictions_final_test.jsonl, else the only
        predictions_*_test.jsonl of the eval directory."""
        if self.eval_dir is None:
            return None
        final = self.eval_dir / FINAL_TEST_PREDICTIONS
        if final.is_file():
            return final
        found = sorted(self.eval_dir.glob(TEST_PREDICTIONS_GLOB))
        return found[0] if len(found) == 1 else None

    @cached_property
    def report_data(self):
        """Per-report statistics for the paired bootstrap over test reports (reports/bootstrap.py), or None
        when the eval stage wrote no per-report outputs."""
        path = self.predictions_path
        return report_data_from_rows(read_jsonl(path), str(path)) if path else None

    def analysis(self, kind: str) -> dict | None:
        """analysis_<kind>.json written by `regbench analyze` in the RL run directory, if present."""
        if self.rl_dir is None:
            return None
        return _read_json(self.rl_dir / analysis_file(kind))

    def reset_steps(self) -> list[int]:
        """Steps at which VAPR reset the policies (evals.jsonl lines with reset = true)."""
        return [int(e[EvalKey.STEP]) for e in self.evals if e.get(EvalKey.RESET) is True and EvalKey.STEP in e]


@dataclass
class Experiment:
    path: Path
    study: str
    title: str
    arms: list[ArmRecord]
    runs: list[Run]
    seeds: list[int]
    baseline_arm: str | None = None  # the study's baseline: every comparison is arm - baseline
    reproduces: str | None = None
    preset: str | None = None
    index: dict = field(default_factory=dict)
    # the study file's arm x seed runs no runner call was asked for (a subset run, `--arms a,b`): not on the page
    not_requested: list[tuple[str, int]] = field(default_factory=list)
    study_arms: int = 0  # how many arms the study file has (the page's arms are those that were run)

    @property
    def contrasts(self) -> list[dict]:
        """The study's primary contrasts as index.json records them ([{arm, baseline, metric, delta}]); empty
        when the study declares none (then every difference is exploratory)."""
        return list(self.index.get(IndexKey.CONTRASTS) or [])

    @property
    def decide(self) -> dict:
        """The decision rule's settings (alpha, looks, spending) as index.json records them."""
        return dict(self.index.get(IndexKey.DECIDE) or {})

    def arm(self, name: str) -> ArmRecord:
        for a in self.arms:
            if a.name == name:
                return a
        raise KeyError(f"no arm '{name}' in {self.path}")

    def runs_of(self, arm: str, complete_only: bool = True) -> list[Run]:
        return sorted((r for r in self.runs if r.arm == arm and (r.status == "complete" or not complete_only)),
                      key=lambda r: r.seed)

    def factors(self, arm: str) -> dict:
        """The arm's factors from index.json, completed from its RL manifests (regularizer, reference, reward)."""
        out = {}
        for run in self.runs_of(arm, complete_only=False):
            rl = run.config.get("rl") or {}
            for key in ("regularizer", "reference", "reward"):
                if key in rl and key not in out:
                    out[key] = rl[key]
        out.update(self.arm(arm).factors or {})
        return out

    def rl_config(self, arm: str) -> dict:
        for run in self.runs_of(arm, complete_only=False):
            if run.config.get("rl"):
                return run.config["rl"]
        return {}

    @property
    def dataset(self) -> str | None:
        for run in self.runs:
            ds = (run.config.get("data") or {}).get("dataset")
            if ds:
                return ds
        return None

    def values(self, arm: str, metric: str) -> dict[int, float]:
        """seed -> test score of `metric` for the arm's complete runs (finite numbers only)."""
        return {r.seed: float(r.scores[metric]) for r in self.runs_of(arm) if is_number(r.scores.get(metric))}


# ------------------------------------------------------------------------------------------------------
def _resolve(base: Path, p) -> Path | None:
    if not p:
        return None
    p = Path(p)
    return p if p.is_absolute() else base / p


def _test_scores(eval_dir: Path | None, metrics_path: Path | None) -> dict:
    if metrics_path is not None and metrics_path.is_file():
        data = _read_json(metrics_path)
        if isinstance(data, dict):
            return data
    if eval_dir is not None:
        rows = [r for r in read_jsonl(eval_dir / EVALS_FILE) if r.get(EvalKey.SPLIT, "test") == "test"]
        if rows:
            return rows[-1]
        data = _read_json(eval_dir / METRICS_FILE)
        if isinstance(data, dict):
            return data
    return {}


def _load_index(path: Path, index: dict) -> Experiment:
    arms = [ArmRecord(a[ArmKey.NAME], a.get(ArmKey.LABEL) or a[ArmKey.NAME], a.get(ArmKey.PUBLISHED_ROW),
                      dict(a.get(ArmKey.FACTORS) or {}))
            for a in index.get(IndexKey.ARMS, [])]
    known = {a.name for a in arms}
    runs = []
    for r in index.get(IndexKey.RUNS, []):
        if r.get(RunKey.ARM) not in known:
            arms.append(ArmRecord(r[RunKey.ARM], r[RunKey.ARM]))
            known.add(r[RunKey.ARM])
        stages = r.get(RunKey.STAGES) or {}
        rl_dir = _resolve(path, (stages.get("rl") or {}).get(StageKey.DIR) or r.get(RunKey.LEGACY_RL_DIR))
        run_dir = _resolve(path, r.get(RunKey.DIR))
        eval_dir = _resolve(path, r.get(RunKey.EVAL_DIR)) or (run_dir / "eval" if run_dir else None)
        scores = r.get(RunKey.LEGACY_SCORES) if isinstance(r.get(RunKey.LEGACY_SCORES), dict) else _test_scores(
            eval_dir, _resolve(path, r.get(RunKey.METRICS)))
        status = r.get(RunKey.STATUS) or ("complete" if scores else "pending")
        final = (r.get(RunKey.FINAL_STAGE) or "base") if RunKey.FINAL_STAGE in r else "?"
        runs.append(Run(r[RunKey.ARM], int(r.get(RunKey.SEED, 0)), run_dir, rl_dir, eval_dir, scores, status,
                        r.get(RunKey.ERROR), final))
    # A subset run (`--arms`, `--seeds`): the page is about the runs that were asked for, not the study file.
    skipped = [(r.arm, r.seed) for r in runs if r.status == NOT_REQUESTED]
    runs = [r for r in runs if r.status != NOT_REQUESTED]
    study_arms = len(arms)
    ran = {r.arm for r in runs}
    if skipped:
        arms = [a for a in arms if a.name in ran]
    seeds = [int(s) for s in index.get(IndexKey.SEEDS) or sorted({r.seed for r in runs})]
    if skipped:
        seeds = [s for s in seeds if any(r.seed == s for r in runs)]
    study = index.get(IndexKey.STUDY)
    title = index.get(IndexKey.TITLE) or study or path.name
    if skipped and len(arms) < study_arms:  # the file's title describes all its arms
        title = (f"{study or path.name}: {', '.join(a.label for a in arms) or 'no arm'} "
                 f"({len(arms)} of the study's {study_arms} arms)")
    baseline = _baseline_arm(index)
    return Experiment(path, study or path.name, title, arms, runs, seeds,
                      baseline if baseline in ran or not skipped else None,
                      index.get(IndexKey.REPRODUCES), index.get(IndexKey.PRESET), index, skipped, study_arms)


def _baseline_arm(index: dict) -> str | None:
    """The baseline arm of index.json; older indexes named it `reference_arm`, the oldest `reference`."""
    for key in (IndexKey.BASELINE_ARM, IndexKey.LEGACY_BASELINE_ARM, IndexKey.LEGACY_REFERENCE):
        if index.get(key):
            return index[key]
    return None


def _arm_name_from_config(cfg: dict) -> str:
    rl = cfg.get("rl") or {}
    name = f"{rl.get('regularizer', 'rl')}_{rl.get('reference', 'static')}"
    reward = rl.get("reward")
    if isinstance(reward, dict):  # a weighted sum (rl.reward={bleu4: 0.5, chexpert_f1: 0.5})
        reward = "+".join(f"{w:g}*{n}" if isinstance(w, int | float) else f"{w}*{n}" for n, w in reward.items())
    if reward and reward != "bleu4":
        name += f"_{reward}"
    return name


def _load_run_dirs(path: Path) -> Experiment:
    manifests = sorted(p for p in path.rglob(MANIFEST_FILE) if "checkpoint" not in p.parts)
    runs, arms = [], {}
    for m in manifests:
        man = _read_json(m) or {}
        if man.get(ManifestKey.STAGE) not in (None, "rl"):
            continue
        arm = _arm_name_from_config(man.get(ManifestKey.CONFIG) or {})
        arms.setdefault(arm, ArmRecord(arm, arm))
        run_dir = m.parent
        scores = _test_scores(run_dir, None)
        runs.append(Run(arm, int(man.get(ManifestKey.SEED, 0)), run_dir, run_dir, run_dir, scores, "complete", None,
                        "rl"))
    if not runs:
        raise FileNotFoundError(f"{path}: neither index.json nor any RL run directory (manifest.json) found")
    return Experiment(path, path.name, path.name, list(arms.values()), runs, sorted({r.seed for r in runs}))


def load_experiment(path: str | Path) -> Experiment:
    """The experiment in `path`: from its index.json, else from the run directories below it."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such experiment folder: {path}")
    index_path = path / INDEX_FILE
    if index_path.is_file():
        index = _read_json(index_path)
        if not isinstance(index, dict):
            raise ValueError(f"{index_path}: not a JSON object")
        fmt = index.get(IndexKey.FORMAT)
        if fmt is not None and fmt != INDEX_FORMAT:
            raise ValueError(f"{index_path}: format {fmt!r}, this version reads {INDEX_FORMAT!r}")
        return _load_index(path, index)
    return _load_run_dirs(path)
