"""The disease classifier (REVA-PO Sec. 3.2, Supp. D.2): a timm ViT trained with multi-label BCE over the 14
observations; per-class thresholds maximising F1 on validation. Frozen afterwards; stage 2 puts its
positive predictions into the prompt.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch

from harness.config import RunConfig
from harness.constants import OBSERVATIONS
from harness.models.classifier import (
    ClassifierConfig,
    build_classifier,
    choose_thresholds,
    classifier_targets,
    predict_labels,
    predict_proba,
    save_classifier,
    train_classifier,
)
from harness.runs import preemption
from harness.runs.schema import METRICS_FILE
from harness.runs.state import restart_requested
from harness.stages.common import load_splits, preemptible, require_train, seed_everything, start_run
from harness.stages.prompts import classifier_inputs, reference_labels


def classifier_config(cfg: RunConfig) -> ClassifierConfig:
    c = cfg.classifier
    return ClassifierConfig(arch=c.arch, img_size=c.img_size, global_pool=c.global_pool, epochs=c.epochs,
                            batch_size=c.batch_size, lr=c.lr,
                            weight_decay=c.weight_decay, adam_beta2=c.adam_beta2, pretrained_path=c.pretrained_path,
                            seed=cfg.seed, normalization=c.normalization,
                            amp_bf16=c.amp_bf16, pretrained_format=c.pretrained_format, drop_path=c.drop_path,
                            layer_decay=c.layer_decay, scheduler=c.scheduler, warmup_steps=c.warmup_steps,
                            schedule_steps=c.schedule_steps, min_lr_ratio=c.min_lr_ratio,
                            max_grad_norm=c.max_grad_norm, select=c.select, micro_batch_size=c.micro_batch_size)


@preemptible
def run_classifier_training(cfg: RunConfig, progress: bool = True) -> Path:
    # lazy: tests replace model_device at its source, read at call time
    from harness.checks.preflight import check_inputs, check_run_folder, model_device

    check_inputs(cfg, "classifier")
    check_run_folder(cfg, "classifier")  # reads only
    seed_everything(cfg.seed)
    if not restart_requested() and (Path(cfg.out_dir) / METRICS_FILE).is_file():
        return start_run(cfg, "classifier").path / "classifier"  # complete: checked, left as it is
    ccfg = classifier_config(cfg)
    # The data and the model before the run folder is opened: a bad input leaves it as it was.
    splits = require_train(load_splits(cfg, progress), cfg, "classifier")
    # model.device, as for the other stages: at the paper's scale (ViT-B/16, MIMIC-CXR) a GPU; here the CPU
    model = build_classifier(ccfg).to(model_device(cfg.model))
    run = start_run(cfg, "classifier")
    out = run.path / "classifier"
    if run.complete:  # pragma: no cover - finished by another process meanwhile
        return out
    # Every epoch reads the train and val images again: decoded once, kept as uint8 pixels on disk for the run
    # (harness/data/pixel_cache.py; the same pixels), removed when it ends.
    with tempfile.TemporaryDirectory(prefix="pixels-", dir=run.path) as pixels:
        return _train(cfg, run, ccfg, model, splits, out, pixels, progress)


def _train(cfg: RunConfig, run, ccfg: ClassifierConfig, model, splits: dict, out: Path, pixels: str,
           progress: bool) -> Path:
    x_tr = classifier_inputs(splits["train"], ccfg.img_size, ccfg.normalization, cache_dir=pixels)
    x_va = classifier_inputs(splits["val"], ccfg.img_size, ccfg.normalization, cache_dir=pixels)
    y_tr = torch.tensor(classifier_targets(reference_labels(splits["train"])), dtype=torch.float32)
    y_va = torch.tensor(classifier_targets(reference_labels(splits["val"])), dtype=torch.float32)

    def on_epoch(epoch: int, train_loss: float, val_loss: float | None) -> None:
        run.log_step({"step": epoch, "epoch": epoch, "loss": train_loss, "val_loss": val_loss})

    try:
        # A checkpoint after every epoch (and on a stop signal mid-epoch); a rerun resumes from it.
        history = train_classifier(model, x_tr, y_tr, x_va, y_va, ccfg, on_epoch=on_epoch, progress=progress,
                                   checkpoint_dir=run.path / "checkpoint", should_stop=preemption.stop_agreed,
                                   on_resume=run.truncate_logs_after)
    except preemption.Preempted as e:
        preemption.record(run.path, "classifier", e.step, run.path / "checkpoint")
        raise
    probs = predict_proba(model, x_va, amp_bf16=ccfg.amp_bf16)
    thresholds = choose_thresholds(probs, y_va.numpy())
    save_classifier(model, ccfg, thresholds, out)
    metrics = {"thresholds": dict(zip(OBSERVATIONS, thresholds.tolist(), strict=True))}
    for split in ("val", "test"):
        x = x_va if split == "val" else classifier_inputs(splits["test"], ccfg.img_size, ccfg.normalization)
        y = y_va.numpy() if split == "val" else classifier_targets(reference_labels(splits["test"]))
        pred = predict_labels(predict_proba(model, x, amp_bf16=ccfg.amp_bf16), thresholds)
        metrics[f"{split}_micro_f1"] = _micro_f1(pred, y)
        run.log_eval({"step": ccfg.epochs, "split": split, "micro_f1": metrics[f"{split}_micro_f1"]})
    metrics["history"] = {k: v for k, v in history.items() if k != "state"} if isinstance(history, dict) else {}
    run.write_metrics(metrics)
    run.close()  # the trackers (train.report_to): a W&B run ends with its stage
    return out


def _micro_f1(pred: np.ndarray, target: np.ndarray) -> float:
    tp = float(((pred == 1) & (target == 1)).sum())
    fp = float(((pred == 1) & (target != 1)).sum())
    fn = float(((pred != 1) & (target == 1)).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0
