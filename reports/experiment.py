"""Loading an experiment folder: its index.json (experiments/README.md, format
`regbench.experiment-index/1`) and the run records it points to. Reports read nothing else.

An `Experiment` is a list of arms (name, label, published_row, factors) and runs (arm, seed, test scores,
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

INDEX_FORMAT = "regbench.experiment-index/1"


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
class Arm:
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
        return read_jsonl(self.rl_dir / "steps.jsonl") if self.rl_dir else []

    @cached_property
    def evals(self) -> list[dict]:
        return read_jsonl(self.rl_dir / "evals.jsonl") if self.rl_dir else []

    @property
    def val_evals(self) -> list[dict]:
        return [e for e in self.evals if e.get("split", "val") == "val"]

    @cached_property
    def samples(self) -> list[dict]:
        return read_jsonl(self.rl_dir / "samples.jsonl") if self.rl_dir else []

    @cached_property
    def rl_metrics(self) -> dict:
        """The RL run's metrics.json (rl.select's selected_step, final_step, ...), {} without one."""
        return (_read_json(self.rl_dir / "metrics.json") or {}) if self.rl_dir else {}

    @cached_property
    def manifest(self) -> dict:
        if self.rl_dir is None:
            return {}
        return _read_json(self.rl_dir / "manifest.json") or {}

    @property
    def config(self) -> dict:
        return self.manifest.get("config") or {}

    @cached_property
    def predictions_path(self) -> Path | None:
        """The eval stage's per-report test outputs: predictions_final_test.jsonl, else the only
        predictions_*_test.jsonl of the eval directory."""
        if self.eval_dir is None:
            return None
        final = self.eval_dir / "predictions_final_test.jsonl"
        if final.is_file():
            return final
        found = sorted(self.eval_dir.glob("predictions_*_test.jsonl"))
        return found[0] if len(found) == 1 else None

    @cached_property
    def report_data(self):
        """Per-report statistics for the paired bootstrap over test reports (reports/bootstrap.py), or None
        when the eval stage wrote no per-report outputs."""
        from reports.bootstrap import report_data_from_rows

        path = self.predictions_path
        return report_data_from_rows(read_jsonl(path), str(path)) if path else None

    def analysis(self, kind: str) -> dict | None:
        """analysis_<kind>.json written by `regbench analyze` in the RL run directory, if present."""
        if self.rl_dir is None:
            return None
        return _read_json(self.rl_dir / f"analysis_{kind}.json")

    def reset_steps(self) -> list[int]:
        """Steps at which VAPR reset the policies (evals.jsonl lines with reset = true)."""
        return [int(e["step"]) for e in self.evals if e.get("reset") is True and "step" in e]


@dataclass
class Experiment:
    path: Path
    study: str
    title: str
    arms: list[Arm]
    runs: list[Run]
    seeds: list[int]
    reference_arm: str | None = None
    reproduces: str | None = None
    preset: str | None = None
    index: dict = field(default_factory=dict)

    def arm(self, name: str) -> Arm:
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
        rows = [r for r in read_jsonl(eval_dir / "evals.jsonl") if r.get("split", "test") == "test"]
        if rows:
            return rows[-1]
        data = _read_json(eval_dir / "metrics.json")
        if isinstance(data, dict):
            return data
    return {}


def _load_index(path: Path, index: dict) -> Experiment:
    arms = [Arm(a["name"], a.get("label") or a["name"], a.get("published_row"), dict(a.get("factors") or {}))
            for a in index.get("arms", [])]
    known = {a.name for a in arms}
    runs = []
    for r in index.get("runs", []):
        if r.get("arm") not in known:
            arms.append(Arm(r["arm"], r["arm"]))
            known.add(r["arm"])
        stages = r.get("stages") or {}
        rl_dir = _resolve(path, (stages.get("rl") or {}).get("dir") or r.get("rl_dir"))
        run_dir = _resolve(path, r.get("dir"))
        eval_dir = _resolve(path, r.get("eval_dir")) or (run_dir / "eval" if run_dir else None)
        scores = r.get("scores") if isinstance(r.get("scores"), dict) else _test_scores(
            eval_dir, _resolve(path, r.get("metrics")))
        status = r.get("status") or ("complete" if scores else "pending")
        final = (r.get("final_stage") or "base") if "final_stage" in r else "?"
        runs.append(Run(r["arm"], int(r.get("seed", 0)), run_dir, rl_dir, eval_dir, scores, status, r.get("error"),
                        final))
    seeds = [int(s) for s in index.get("seeds") or sorted({r.seed for r in runs})]
    return Experiment(path, index.get("study") or path.name, index.get("title") or index.get("study") or path.name,
                      arms, runs, seeds, index.get("reference_arm") or index.get("reference"),
                      index.get("reproduces"), index.get("preset"), index)


def _arm_name_from_config(cfg: dict) -> str:
    rl = cfg.get("rl") or {}
    name = f"{rl.get('regularizer', 'rl')}_{rl.get('reference', 'static')}"
    if rl.get("reward") and rl.get("reward") != "bleu4":
        name += f"_{rl['reward']}"
    return name


def _load_run_dirs(path: Path) -> Experiment:
    manifests = sorted(p for p in path.rglob("manifest.json") if "checkpoint" not in p.parts)
    runs, arms = [], {}
    for m in manifests:
        man = _read_json(m) or {}
        if man.get("stage") not in (None, "rl"):
            continue
        arm = _arm_name_from_config(man.get("config") or {})
        arms.setdefault(arm, Arm(arm, arm))
        run_dir = m.parent
        scores = _test_scores(run_dir, None)
        runs.append(Run(arm, int(man.get("seed", 0)), run_dir, run_dir, run_dir, scores, "complete", None, "rl"))
    if not runs:
        raise FileNotFoundError(f"{path}: neither index.json nor any RL run directory (manifest.json) found")
    return Experiment(path, path.name, path.name, list(arms.values()), runs, sorted({r.seed for r in runs}))


def load_experiment(path: str | Path) -> Experiment:
    """The experiment in `path`: from its index.json, else from the run directories below it."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such experiment folder: {path}")
    index_path = path / "index.json"
    if index_path.is_file():
        index = _read_json(index_path)
        if not isinstance(index, dict):
            raise ValueError(f"{index_path}: not a JSON object")
        fmt = index.get("format")
        if fmt is not None and fmt != INDEX_FORMAT:
            raise ValueError(f"{index_path}: format {fmt!r}, this version reads {INDEX_FORMAT!r}")
        return _load_index(path, index)
    return _load_run_dirs(path)
