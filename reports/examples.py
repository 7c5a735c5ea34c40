"""Text examples from the run records: REVA-PO Fig. 4 (test reports per stage beside the reference report) and Fig. S6
(a reward inversion: a validation group that BLEU-4 and a clinical reward rank in opposite orders).

Fig. 4 columns: one per pipeline stage that some arm of the study ends with (base model, warm-up, SFT, RL), the
arm with the fullest pipeline for each (for RL: the RER + VAPR arm, else the baseline arm), plus the extra stage
evaluations of the study's `stage_evals` (`<experiment>/eval_stages/<stage>/predictions_final_test.jsonl`) for
stages no arm ends with. Rows: `k` test reports that every column decoded (one seed: the smallest all columns
share), chosen as those with a positive ground-truth finding on which the columns' findings disagree most.
Findings are the eval stage's label vectors (`ref_labels`: the reference's, i.e. the synthetic ground truth on
phantom data; `hyp_labels`: the generated report's), positive = 1; null = not mentioned.

Fig. S6: among the candidates of the analysis records (analysis_reward-variance.json, then
analysis_sign-alignment.json), the group whose BLEU-4 and clinical-reward orders disagree most (Kendall's tau-b,
scipy.stats.kendalltau; -1 = exactly opposite orders). The clinical reward is RadGraph F1 as in the paper when
the records have it, else the offline entity F1, else CheXpert F1 (named in the caption).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.constants import OBSERVATIONS
from harness.runs.schema import ArmKey, IndexKey
from reports.experiment import Experiment, read_jsonl

STAGE_ORDER = ("base", "warmup", "sft", "rl")
STAGE_NAMES = {"base": "Baseline (no fine-tuning)", "warmup": "Stage 1 (warm-up)", "sft": "Stage 2 (SFT)",
               "rl": "Stage 3 (RL)"}
EXTRA_STAGE = {"base": "base", "warm-up": "warmup", "warmup": "warmup", "sft": "sft"}  # eval_stages labels
CLINICAL_REWARDS = ("radgraph_f1", "entity_f1", "chexpert_f1")


def _observations() -> tuple[str, ...]:
    return OBSERVATIONS


# ------------------------------------------------------------------------------------------------------
# Fig. 4


@dataclass
class Column:
    stage: str
    label: str
    rows: dict  # report id -> prediction row
    seed: int | None = None


def _arm_pipeline(exp: Experiment, arm: str) -> list:
    for a in exp.index.get(IndexKey.ARMS, []):
        if a.get(ArmKey.NAME) == arm:
            return list(a.get(ArmKey.PIPELINE) or [])
    return []


def _pick_arm(exp: Experiment, arms: list[str], stage: str) -> str:
    if stage == "rl":
        reva = [a for a in arms if exp.factors(a).get("regularizer") == "rer"
                and exp.factors(a).get("reference") == "vapr"]
        if reva:
            arms = reva
    longest = max(len(_arm_pipeline(exp, a)) for a in arms)
    arms = [a for a in arms if len(_arm_pipeline(exp, a)) == longest]
    return exp.baseline_arm if exp.baseline_arm in arms else arms[0]


def stage_columns(exp: Experiment) -> list[Column]:
    """The Fig. 4 columns of the experiment, in pipeline order (see the module docstring)."""
    by_stage: dict[str, list[str]] = {}
    for a in exp.arms:
        runs = [r for r in exp.runs_of(a.name) if r.predictions_path]
        if runs:
            stage = runs[0].final_stage if runs[0].final_stage in STAGE_ORDER else None
            if stage:
                by_stage.setdefault(stage, []).append(a.name)
    seeds = None
    picked = {s: _pick_arm(exp, arms, s) for s, arms in by_stage.items()}
    for arm in picked.values():
        have = {r.seed for r in exp.runs_of(arm) if r.predictions_path}
        seeds = have if seeds is None else seeds & have
    seed = min(seeds) if seeds else None
    cols = {}
    for stage, arm in picked.items():
        run = next((r for r in exp.runs_of(arm) if r.seed == seed), None)
        if run is not None:
            label = f"{STAGE_NAMES[stage]}: {exp.arm(arm).label}"
            cols[stage] = Column(stage, label, {r["id"]: r for r in read_jsonl(run.predictions_path)}, seed)
    stage_dir = Path(exp.path) / "eval_stages"
    for path, label in _stage_predictions(stage_dir):
        stage = EXTRA_STAGE.get(label.lower())
        if stage and stage not in cols:
            cols[stage] = Column(stage, f"{STAGE_NAMES[stage]} ({path.relative_to(stage_dir.parent)})",
                                 {r["id"]: r for r in read_jsonl(path)}, seed)
    return [cols[s] for s in STAGE_ORDER if s in cols]


def _stage_predictions(stage_dir: Path) -> list[tuple[Path, str]]:
    """(predictions file, label) of the stage evaluations: `<stage>/predictions_final_test.jsonl` (the study's
    `stage_evals` nodes), or `predictions_<label>_test.jsonl` (demo folders written before them)."""
    found = [(p, p.parent.name) for p in sorted(stage_dir.glob("*/predictions_final_test.jsonl"))]
    found += [(p, p.name.removeprefix("predictions_").removesuffix("_test.jsonl"))
              for p in sorted(stage_dir.glob("predictions_*_test.jsonl"))]
    return found


def positive_indices(labels) -> set[int]:
    """The observations a 14-label vector reads positive (1); null, 0 and -1 are not."""
    return {i for i, v in enumerate(labels or []) if v is not None and float(v) == 1.0}


def _known(labels) -> bool:
    return any(v is not None for v in (labels or []))


def findings_text(hyp_labels, ref_labels) -> str:
    """The generated report's positive findings, each marked against the ground truth: `+` agrees, `(FP)` is
    a positive the reference does not have; then the ground-truth positives it missed."""
    names = _observations()
    hyp, ref = positive_indices(hyp_labels), positive_indices(ref_labels)
    if not _known(ref_labels):
        return ", ".join(names[i] for i in sorted(hyp)) or "no positive finding"
    parts = [f"+{names[i]}" if i in ref else f"{names[i]} (FP)" for i in sorted(hyp)]
    missed = [names[i] for i in sorted(ref - hyp)]
    text = ", ".join(parts) or "no positive finding"
    return text + (f"; missed: {', '.join(missed)}" if missed else "")


def ground_truth_text(ref_labels) -> str:
    if not _known(ref_labels):
        return "not known"
    names = _observations()
    return ", ".join(names[i] for i in sorted(positive_indices(ref_labels))) or "no positive finding"


def pick_examples(columns: list[Column], k: int = 3) -> list[str]:
    """k report ids every column has: first those with a known positive ground-truth finding, then the ones
    whose columns disagree most about the findings (distinct predicted sets), then by id."""
    if not columns:
        return []
    ids = set(columns[0].rows)
    for c in columns[1:]:
        ids &= set(c.rows)

    def rank(i):
        ref = columns[0].rows[i].get("ref_labels")
        spread = len({frozenset(positive_indices(c.rows[i].get("hyp_labels"))) for c in columns})
        return (-int(bool(positive_indices(ref))), -spread, str(i))

    return sorted(ids, key=rank)[:k]


def fig4_table(exp: Experiment, k: int = 3):
    """(columns, rows) of Fig. 4 as text: per example a reference row and one row per stage column, or None."""
    columns = stage_columns(exp)
    ids = pick_examples(columns, k)
    if not ids:
        return None
    rows = []
    for i in ids:
        first = columns[0].rows[i]
        ref_labels = first.get("ref_labels")
        rows.append([str(i), "Reference", f"GT: {ground_truth_text(ref_labels)}", first.get("reference", "")])
        for c in columns:
            r = c.rows[i]
            rows.append([str(i), c.label, findings_text(r.get("hyp_labels"), ref_labels), r.get("generated", "")])
    return columns, rows


# ------------------------------------------------------------------------------------------------------
# Fig. S6


@dataclass
class Inversion:
    arm: str
    seed: int
    policy: str
    kind: str
    clinical: str
    tau: float
    report_id: str | None
    reference: str | None
    candidates: list[str]
    bleu: list[float]
    clin: list[float]
    extra: dict = field(default_factory=dict)


def _tau(a, b) -> float:
    # lazy: start-up cost (scipy)
    from scipy.stats import kendalltau

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if np.ptp(a) <= 1e-12 or np.ptp(b) <= 1e-12:
        return math.nan
    return float(kendalltau(a, b).statistic)


def find_inversion(exp: Experiment) -> Inversion | None:
    """The most inverted validation group of the experiment's analysis records (see the module docstring)."""
    best: tuple | None = None
    for kind in ("reward-variance", "sign-alignment"):
        for a in exp.arms:
            for run in exp.runs_of(a.name):
                d = run.analysis(kind)
                if not d:
                    continue
                for pol, res in sorted(d.get("policies", {}).items()):
                    rewards = res.get("rewards") or {}
                    clinical = next((c for c in CLINICAL_REWARDS if c in rewards), None)
                    groups = res.get("candidates")
                    if clinical is None or "bleu4" not in rewards or not groups:
                        continue
                    pref = CLINICAL_REWARDS.index(clinical)
                    for b, (bl, cl) in enumerate(zip(rewards["bleu4"], rewards[clinical], strict=True)):
                        tau = _tau(bl, cl)
                        if math.isnan(tau):
                            continue
                        score = (pref, tau, -len(set(groups[b])), -float(np.ptp(cl)))
                        if best is None or score < best[0]:
                            refs, ids = res.get("references"), res.get("ids")
                            best = (score, Inversion(a.name, run.seed, pol, kind, clinical, tau,
                                                     ids[b] if ids else None, refs[b] if refs else None,
                                                     list(groups[b]), [float(x) for x in bl],
                                                     [float(x) for x in cl]))
    return best[1] if best else None


def _ranks(values: list[float]) -> list[int]:
    """1 = highest; ties share the best rank."""
    return [1 + sum(w > v + 1e-12 for w in values) for v in values]


def inversion_rows(inv: Inversion) -> list[list[str]]:
    rb, rc = _ranks(inv.bleu), _ranks(inv.clin)
    rows = [["Reference", "–", "–", inv.reference or "(not recorded)"]]
    for j, text in enumerate(inv.candidates):
        rows.append([f"Candidate {j + 1}", f"{inv.bleu[j]:.4f} (#{rb[j]})", f"{inv.clin[j]:.4f} (#{rc[j]})", text])
    return rows


# ------------------------------------------------------------------------------------------------------
# Drawing text as a figure (the page shows both the table and this image)


def text_figure(title: str, blocks: list[tuple[str, str, str]], out_dir, name: str, width: int = 110):
    """A figure of text blocks (heading, body, colour), each body wrapped at `width` characters."""
    # lazy: start-up cost (matplotlib, pandas)
    from reports.figures import plt, save_figure

    lines: list[tuple[str, str, bool]] = []
    for heading, body, color in blocks:
        lines.append((heading, color, True))
        lines += [(ln, "#222222", False) for ln in textwrap.wrap(body or "(empty)", width)]
        lines.append(("", "#222222", False))
    height = 0.6 + 0.19 * len(lines)
    fig = plt.figure(figsize=(10, height))
    fig.text(0.01, 1 - 0.25 / height, title, fontsize=11, weight="bold", va="top")
    y = 1 - 0.55 / height
    for text, color, bold in lines:
        fig.text(0.01, y, text, fontsize=8, color=color, weight="bold" if bold else "normal", va="top",
                 family="monospace" if not bold else None)
        y -= 0.19 / height
    return save_figure(fig, out_dir, name)
