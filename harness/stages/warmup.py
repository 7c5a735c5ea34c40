"""Stage 1, warm-up (REVA-PO Sec. 3.1): only the merger trains (model.warmup_trainable: all of it, or its MLP as
the official code), with the LM loss of Eq. 1; train.handoff picks the last or the best-validation epoch.

The image encoder and the LLM stay frozen; the merger maps visual features into the LLM's embedding space
and is adapted to radiographs. Plain prompts (no disease hints).
"""

from __future__ import annotations

from pathlib import Path

from harness.config import RunConfig
from harness.data.pixel_cache import stage_pixel_folder
from harness.models.checkpoint import model_settings, save_stage_model
from harness.models.trainable import count_parameters, set_trainable
from harness.stages.common import preemptible
from harness.stages.handoff import best_epoch_hook, save_handoff
from harness.stages.lm_train import LMData, train_lm
from harness.stages.loading import begin_stage
from harness.stages.prompts import load_images, plain_instructions


@preemptible
def run_warmup(cfg: RunConfig, progress: bool = True) -> Path:
    start = begin_stage(cfg, "warmup", progress)  # data-parallel under torchrun / accelerate launch
    if start.complete:
        return start.run.path / "model"
    dist, run, progress, splits = start.dist, start.run, start.progress, start.splits
    model, processor, base_path = start.model, start.processor, start.base_path
    set_trainable(model, "warmup", cfg.model.warmup_trainable)
    n_train, n_all = count_parameters(model)
    size = cfg.model.image_size
    pixels = stage_pixel_folder(run.path)  # every epoch reads the images again: decoded once (the same pixels)
    train = LMData(load_images(splits["train"], size, cache_dir=pixels.name),
                   plain_instructions(cfg, len(splits["train"])), [s.report for s in splits["train"]])
    val = LMData(load_images(splits["val"], size, cache_dir=pixels.name), plain_instructions(cfg, len(splits["val"])),
                 [s.report for s in splits["val"]])
    best = best_epoch_hook(cfg, model, processor, splits["val"], val.instructions, val.images, run, dist)
    metrics = train_lm(model, processor, train, val, cfg.train, run, seed=cfg.seed,
                       max_report_tokens=cfg.prompt.max_report_tokens, desc="stage 1 warm-up", progress=progress,
                       dist=dist, on_epoch_end=best and best.on_epoch_end, extra_state=best)
    pixels.cleanup()
    out = run.path / "model"
    if dist.main:
        handoff = save_handoff(best, lambda name, extra: save_stage_model(
            model, run.path / name, base_path, "warmup", extra=extra or None, settings=model_settings(cfg.model)))
        run.write_metrics({**metrics, "trainable_params": n_train, "total_params": n_all, "processes": dist.world,
                           **handoff})
        run.close()  # the trackers (train.report_to): a W&B run ends with its stage
    dist.barrier()
    return out
