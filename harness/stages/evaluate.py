"""`regbench eval`: decode a split greedily and score it (NLG metrics and findings against the ground truth).

Prompts are rebuilt the way the model was trained: with the classifier's predicted diseases when the stage
checkpoint records a classifier, plain otherwise.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.config import RunConfig
from harness.decoding import generate_reports
from harness.evaluation import nlg_scores
from harness.models.checkpoint import load_base, load_stage_model
from harness.models.presets import get_preset
from harness.records import RunDir, atomic_write_text, dumps
from harness.stages.classifier import instructions_for, reference_labels
from harness.stages.common import load_images, load_splits, seed_everything
from harness.stages.loading import model_device


def label_with(backend: str, reports: list[str], chexbert_mode: str = "paper") -> np.ndarray:
    """[N, 14] labels from the chosen CE backend (1 pos, 0 neg, -1 uncertain, nan blank)."""
    if backend == "chexbert":
        from rewards.chexbert import label_reports_chexbert

        return label_reports_chexbert(reports, mode=chexbert_mode)
    from rewards.chexpert import label_reports

    return label_reports(reports)


def findings_scores(hyp_reports: list[str], ref_labels: np.ndarray, backend: str = "rules",
                    chexbert_mode: str = "paper") -> dict:
    """Findings of generated reports (labeled by `backend`) against the references' labels, positive = 1.

    findings_acc: share of (sample, observation) pairs where presence agrees; findings_exact: share of
    samples whose 14 presence flags all agree; plus the CE micro/macro/example P/R/F1 and per-label scores.
    """
    from harness.evaluation import ce_scores

    hyp = label_with(backend, hyp_reports, chexbert_mode)
    hp, rp = hyp == 1, ref_labels == 1
    out = {"findings_acc": float((hp == rp).mean()), "findings_exact": float((hp == rp).all(axis=1).mean()),
           "ce_backend": backend}
    out.update(ce_scores(hyp, ref_labels))
    return out


def clinical_scores(cfg: RunConfig, hyps: list[str], refs: list[str]) -> dict:
    """Offline entity F1 always; RadGraph F1 when its weights are present (else marked missing, never replaced)."""
    from rewards.entity import entity_f1

    out = {"entity_f1": float(np.mean(entity_f1(hyps, refs)))}
    if cfg.eval.radgraph == "off":
        return out
    from rewards.radgraph import radgraph_available, radgraph_scores

    if radgraph_available(cfg.eval.radgraph_model):
        out.update(radgraph_scores(hyps, refs, cfg.eval.radgraph_model))
    elif cfg.eval.radgraph == "required":
        from rewards.radgraph import check_radgraph_files

        check_radgraph_files(cfg.eval.radgraph_model)  # raises with the path to fill
    else:
        out["radgraph"] = "missing (weights not found; see rewards/radgraph.py)"
    return out


def load_any_model(model_dir: str | Path, cfg: RunConfig):
    """A stage checkpoint (spec.json) or a plain base-model folder."""
    preset = get_preset(cfg.model.preset)
    p = Path(model_dir)
    if (p / "spec.json").is_file():
        return load_stage_model(p, cfg.model.dtype, cfg.model.image_size, preset.attn_implementation)
    model, processor = load_base(p, cfg.model.dtype, cfg.model.image_size, preset.attn_implementation)
    return model, processor, {"base": str(p), "stage": "base"}


def evaluate_model(cfg: RunConfig, model_dir: str | Path, split: str = "test", run: RunDir | None = None,
                   label: str | None = None, progress: bool = True) -> dict:
    seed_everything(cfg.seed)
    model, processor, spec = load_any_model(model_dir, cfg)
    model.to(model_device(cfg))
    splits = load_splits(cfg, progress)
    if split not in splits:
        raise ValueError(f"split '{split}' not in the data set (have: {', '.join(splits)})")
    samples = splits[split]
    instructions = instructions_for(cfg, samples, spec)
    g = cfg.generation
    hyps = generate_reports(model, processor, load_images(samples, cfg.model.image_size), instructions,
                            max_new_tokens=g.max_new_tokens, min_new_tokens=g.min_new_tokens,
                            repetition_penalty=g.repetition_penalty, batch_size=g.batch_size, progress=progress,
                            desc=f"decode {split}", backend=g.backend)
    refs = {s.id: s.report for s in samples}
    scores = nlg_scores(refs, {s.id: h for s, h in zip(samples, hyps, strict=True)})
    ref_labels = reference_labels(samples) if cfg.eval.ce_backend == "rules" or any(
        s.labels is not None for s in samples) else label_with(cfg.eval.ce_backend, [s.report for s in samples],
                                                               cfg.eval.chexbert_mode)
    scores.update(findings_scores(hyps, ref_labels, cfg.eval.ce_backend, cfg.eval.chexbert_mode))
    scores.update(clinical_scores(cfg, hyps, [s.report for s in samples]))
    scores = {"split": split, "stage": spec.get("stage"), "n": len(samples), **scores}
    if label:
        scores["label"] = label
    if run is not None:
        run.log_eval(scores)
        rows = [{"id": s.id, "reference": s.report, "generated": h, "instruction": ins}
                for s, h, ins in zip(samples, hyps, instructions, strict=True)]
        atomic_write_text(run.path / f"predictions_{label or spec.get('stage')}_{split}.jsonl",
                          "".join(dumps(r) + "\n" for r in rows))
    return scores
