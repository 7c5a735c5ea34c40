"""`regbench eval`: decode a split greedily and score it (NLG metrics, CE findings of the `eval.ce_backend`
labeler against the references' labels, and on the phantom the gold reader against what was drawn: `gold_*`).

Prompts are rebuilt the way the model was trained: with the classifier's predicted diseases when the stage
model records a classifier, plain otherwise.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import numpy as np

from harness.checks.preflight import check_scorers, model_device
from harness.config import RunConfig
from harness.data.phantom.gold_reader import disagreement, gold_scores, read_reports
from harness.models.checkpoint import adopt_checkpoint_settings, load_any_model
from harness.prompting.output_format import report_part, well_formatted_fraction
from harness.runs import preemption
from harness.runs.records import RunDir, atomic_write_text, dumps
from harness.sampling.decoding import generate_reports, greedy_settings
from harness.sampling.vllm_rollout import start_engine
from harness.scoring.evaluation import findings_scores, label_with, nlg_scores_and_reports
from harness.stages.common import load_splits, preemptible, seed_everything
from harness.stages.paths import eval_pixel_dir
from harness.stages.prompts import instructions_for, load_images, reference_labels
from rewards.entity import entity_f1
from rewards.radgraph import check_radgraph_files, radgraph_available, radgraph_scores


def clinical_scores(cfg: RunConfig, hyps: list[str], refs: list[str]) -> dict:
    """Offline entity F1 always; RadGraph F1 when its weights are present (else marked missing, never replaced)."""
    out = {"entity_f1": float(np.mean(entity_f1(hyps, refs)))}
    if cfg.eval.radgraph == "off":
        return out

    if radgraph_available(cfg.eval.radgraph_model):
        out.update(radgraph_scores(hyps, refs, cfg.eval.radgraph_model))
    elif cfg.eval.radgraph == "required":
        check_radgraph_files(cfg.eval.radgraph_model)  # raises with the path to fill
    else:
        out["radgraph"] = "missing (weights not found; see rewards/radgraph.py)"
    return out


def _labels_json(row: np.ndarray) -> list:
    return [None if np.isnan(v) else float(v) for v in np.asarray(row, dtype=np.float64)]


def gold_eval(samples, hyps: list[str], ref_labels: np.ndarray, labeler: np.ndarray,
              reader: str = "v1") -> tuple[dict, np.ndarray | None]:
    """The phantom's gold (harness/data/phantom/gold_reader.py) when every sample carries its image truth: the
    reader's scores against what was drawn (`gold_*`) and against the stored report labels (`gold_report_*`),
    and how often the rule labeler's positives (`labeler`) differ from the reader's; with the reader's labels."""
    # lazy: start-up cost (transformers)
    from harness.stages.rl import image_truth

    truth = image_truth(samples)
    if truth is None:
        return {}, None

    read = read_reports(hyps, reader)  # eval.gold_reader
    return {**gold_scores(read, truth, ref_labels), **disagreement(labeler, read)}, read


def prediction_rows(samples, hyps: list[str], instructions: list[str], hyp_labels: np.ndarray,
                    ref_labels: np.ndarray, nlg: dict[str, dict[str, float]],
                    gold_labels: np.ndarray | None = None) -> list[dict]:
    """One row per test report: the texts and what the report's paired bootstrap (reports/bootstrap.py)
    rescores resamples from: per-report NLG statistics (`nlg`, harness.scoring.evaluation.nlg_report_scores), both label
    vectors (null = not mentioned), entity F1; on the phantom also the gold reader's labels (`gold_labels`) and
    the image truth (`present`)."""
    refs = [s.report for s in samples]
    entity = entity_f1(hyps, refs)
    rows = [{"id": s.id, "reference": s.report, "generated": h, "instruction": ins, "nlg": nlg[s.id],
             "hyp_labels": _labels_json(hl), "ref_labels": _labels_json(rl), "entity_f1": float(e)}
            for s, h, ins, hl, rl, e in zip(samples, hyps, instructions, hyp_labels, ref_labels, entity, strict=True)]
    if gold_labels is not None:
        for row, s, gl in zip(rows, samples, gold_labels, strict=True):
            row.update(gold_labels=_labels_json(gl), present=[int(v) for v in s.present])
    return rows


def _stop_between_batches(model_dir: str | Path, split: str, n: int) -> Callable[[int], None]:
    """The decode loop's safe point: on a stop signal the evaluation ends before it writes anything (its scores
    need every report), so the rerun decodes the split again, to the same greedy reports."""
    def check(done: int) -> None:
        preemption.check(f"eval of {model_dir} on {split}", f"{done} of {n} reports decoded, nothing written")
    return check


@preemptible
def evaluate_model(cfg: RunConfig, model_dir: str | Path, split: str = "test",
                   run: RunDir | Callable[[], RunDir] | None = None,
                   label: str | None = None, progress: bool = True) -> dict:
    check_scorers(cfg, "eval")  # CheXbert / RadGraph weights before the model loads and the split is decoded
    seed_everything(cfg.seed)
    cfg = copy.deepcopy(cfg)
    adopt_checkpoint_settings(cfg.model, model_dir)  # e.g. `eval --model RUN/model` alone: the run's image size
    model, processor, spec = load_any_model(model_dir, cfg.model)
    model.to(model_device(cfg.model))
    splits = load_splits(cfg, progress, only=split if split == "test" else None)
    if split not in splits:
        raise ValueError(f"split '{split}' not in the data set (have: {', '.join(splits)})")
    samples = splits[split]
    instructions = instructions_for(cfg.prompt, cfg.model, samples, spec)
    images = load_images(samples, cfg.model.image_size, cache_dir=eval_pixel_dir(cfg, split))
    if cfg.generation.backend == "vllm":  # sized by this split's prompts (harness/sampling/vllm_rollout.py)
        start_engine(model, processor, cfg.generation, [(images, instructions, cfg.generation.max_new_tokens)],
                     seed=cfg.seed)
    outputs = generate_reports(model, processor, images, instructions,
                               **greedy_settings(cfg.generation), progress=progress, desc=f"decode {split}",
                               before_batch=_stop_between_batches(model_dir, split, len(samples)))
    # think_report models are scored on their <report> part (harness/prompting/output_format.py); plain: unchanged.
    hyps = [report_part(text, cfg.prompt.output_format) for text in outputs]
    refs = {s.id: s.report for s in samples}
    scores, nlg_each = nlg_scores_and_reports(refs, {s.id: h for s, h in zip(samples, hyps, strict=True)})
    ref_labels = reference_labels(samples) if cfg.eval.ce_backend == "rules" or any(
        s.labels is not None for s in samples) else label_with(cfg.eval.ce_backend, [s.report for s in samples],
                                                               cfg.eval.chexbert_mode)
    hyp_labels = label_with(cfg.eval.ce_backend, hyps, cfg.eval.chexbert_mode)
    scores.update(findings_scores(hyps, ref_labels, cfg.eval.ce_backend, cfg.eval.chexbert_mode, hyp_labels))
    labeler = hyp_labels if cfg.eval.ce_backend == "rules" else label_with("rules", hyps)
    gold, gold_labels = gold_eval(samples, hyps, ref_labels, labeler, cfg.eval.gold_reader)
    scores.update(gold)
    scores.update(clinical_scores(cfg, hyps, [s.report for s in samples]))
    scores["well_formatted"] = well_formatted_fraction(outputs)  # MRG-R1's layout; 0 for a plain model
    # The decoding the reports were made with: reports refuse to compare arms tested with different ones.
    scores = {"split": split, "stage": spec.get("stage"), "n": len(samples), **scores,
              "decoding": {"greedy": True, **greedy_settings(cfg.generation)}}
    if label:
        scores["label"] = label
    if callable(run):  # opened only now (`regbench eval --out`): a failure before leaves the folder as it was
        run = run()
    if run is not None:
        run.log_eval(scores)
        rows = prediction_rows(samples, hyps, instructions, hyp_labels, ref_labels, nlg_each, gold_labels)
        if cfg.prompt.output_format != "plain":  # the whole output beside the report part it was scored on
            for row, text in zip(rows, outputs, strict=True):
                row["output"] = text
        atomic_write_text(run.path / f"predictions_{label or spec.get('stage')}_{split}.jsonl",
                          "".join(dumps(r) + "\n" for r in rows))
    return scores
