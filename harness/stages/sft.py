"""Stage 2, classifier-guided SFT (REVA-PO Sec. 3.2): prompt q = [I, D, V] with D the names the frozen
classifier predicts positive; the merger trains fully, LoRA (r = alpha = 32, dropout 0.1 by default) on every
linear layer of the vision encoder and the LLM; LM loss of Eq. 1.
"""

from __future__ import annotations

from pathlib import Path

from harness.config import ConfigError, RunConfig
from harness.distributed import init_distributed
from harness.models.checkpoint import save_stage_model
from harness.models.trainable import add_lora, count_parameters, set_trainable
from harness.records import FollowerRun
from harness.stages.classifier import predicted_diseases
from harness.stages.common import disease_instructions, load_images, load_splits, seed_everything, start_run
from harness.stages.lm_train import LMData, train_lm
from harness.stages.loading import load_for_stage


def lora_settings(cfg: RunConfig) -> dict:
    return {"r": cfg.model.lora_r, "alpha": cfg.model.lora_alpha, "dropout": cfg.model.lora_dropout}


def run_sft(cfg: RunConfig, progress: bool = True) -> Path:
    if not cfg.classifier.dir:
        raise ConfigError("stage 2 (sft) needs 'classifier.dir': the folder written by `regbench classifier train`")
    dist = init_distributed()  # data-parallel under torchrun / accelerate launch (harness/distributed.py)
    progress = progress and dist.main
    seed_everything(cfg.seed)
    with dist.main_first():  # rank 0 writes the manifest and builds what is cached (stage 0, phantom data)
        run = start_run(cfg, "sft") if dist.main else FollowerRun(cfg.out_dir)
        complete = run.complete
        if not complete:
            model, processor, base_path = load_for_stage(cfg, progress)
            splits = load_splits(cfg, progress)
    if complete:
        return run.path / "model"
    model = add_lora(model, **lora_settings(cfg))
    set_trainable(model, "sft")
    n_train, n_all = count_parameters(model)
    size = cfg.model.image_size
    data = {}
    for split in ("train", "val"):
        samples = splits[split]
        names = predicted_diseases(cfg.classifier.dir, samples)
        data[split] = LMData(load_images(samples, size), disease_instructions(cfg, names),
                             [s.report for s in samples])
    metrics = train_lm(model, processor, data["train"], data["val"], cfg.train, run, seed=cfg.seed,
                       max_report_tokens=cfg.prompt.max_report_tokens, desc="stage 2 SFT", progress=progress,
                       dist=dist)
    extra = {"classifier_dir": str(Path(cfg.classifier.dir).resolve()),
             "disease_template": cfg.prompt.disease_template, "instruction": cfg.prompt.instruction}
    out = run.path / "model"
    if dist.main:
        save_stage_model(model, out, base_path, "sft", lora=lora_settings(cfg), extra=extra)
        run.write_metrics({**metrics, "trainable_params": n_train, "total_params": n_all, "processes": dist.world})
    dist.barrier()
    return out
