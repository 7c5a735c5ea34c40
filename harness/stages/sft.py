"""Stage 2, classifier-guided SFT (REVA-PO Sec. 3.2): prompt q = [I, D, V] with D the names the frozen
classifier predicts positive; the merger trains fully, LoRA (r = alpha = 32, dropout 0.1 by default) on every
linear layer of the vision encoder and the LLM; LM loss of Eq. 1.

`prompt.output_format=think_report` (MRG-R1's layout, harness/prompting/output_format.py): the instruction asks for the
layout and the targets are `<think> observations </think> <report> report </report>`; the format is recorded in
the stage model's spec, and the RL and evaluation stages rebuild the prompts from it. With
`model.train_format_tokens` the adapter also trains the rows of the tags' tokens (harness/models/trainable.py).
"""

from __future__ import annotations

from pathlib import Path

from harness.checks.preflight import model_device
from harness.config import RunConfig
from harness.data.pixel_cache import stage_pixel_folder
from harness.models.checkpoint import model_settings, save_stage_model
from harness.models.trainable import add_lora, count_parameters, lora_settings, set_trainable
from harness.prompting.output_format import format_instruction, training_target
from harness.stages.common import preemptible
from harness.stages.handoff import best_epoch_hook, save_handoff
from harness.stages.lm_train import LMData, train_lm
from harness.stages.loading import begin_stage
from harness.stages.prompts import (
    disease_instructions,
    fills_empty,
    load_images,
    predicted_diseases,
    prompt_spec,
    reference_labels,
)


@preemptible
def run_sft(cfg: RunConfig, progress: bool = True) -> Path:
    start = begin_stage(cfg, "sft", progress)  # checks classifier.dir first (preflight); data-parallel under torchrun
    if start.complete:
        return start.run.path / "model"
    dist, run, progress, splits = start.dist, start.run, start.progress, start.splits
    model, processor, base_path = start.model, start.processor, start.base_path
    lora = lora_settings(cfg.model, processor.tokenizer)  # + the tags' token rows with model.train_format_tokens
    model = add_lora(model, **lora)
    set_trainable(model, "sft")
    n_train, n_all = count_parameters(model)
    size = cfg.model.image_size
    pixels = stage_pixel_folder(run.path)  # every epoch reads the images again: decoded once (the same pixels)
    data = {}
    for split in ("train", "val"):
        samples = splits[split]
        names = predicted_diseases(cfg.classifier.dir, samples, model_device(cfg.model),
                                   fill_empty=fills_empty(cfg.prompt.disease_list_format))
        fmt = cfg.prompt.output_format
        labels = reference_labels(samples) if fmt != "plain" else [None] * len(samples)
        data[split] = LMData(load_images(samples, size, cache_dir=pixels.name),
                             [format_instruction(i, fmt) for i in disease_instructions(cfg, names)],
                             [training_target(s.report, row, fmt) for s, row in zip(samples, labels, strict=True)])
    val_instructions = data["val"].instructions  # the best_val handoff validates with the stage's own prompts
    best = best_epoch_hook(cfg, model, processor, splits["val"], val_instructions, data["val"].images, run, dist)
    metrics = train_lm(model, processor, data["train"], data["val"], cfg.train, run, seed=cfg.seed,
                       max_report_tokens=cfg.prompt.max_report_tokens, desc="stage 2 SFT", progress=progress,
                       dist=dist, on_epoch_end=best and best.on_epoch_end, extra_state=best)
    pixels.cleanup()
    extra = {"classifier_dir": str(Path(cfg.classifier.dir).resolve()), **prompt_spec(cfg),
             "output_format": cfg.prompt.output_format}
    out = run.path / "model"
    if dist.main:
        handoff = save_handoff(best, lambda name, more: save_stage_model(
            model, run.path / name, base_path, "sft", lora=lora, extra={**extra, **more},
            settings=model_settings(cfg.model)))
        run.write_metrics({**metrics, "trainable_params": n_train, "total_params": n_all, "processes": dist.world,
                           **handoff})
        run.close()  # the trackers (train.report_to): a W&B run ends with its stage
    dist.barrier()
    return out
