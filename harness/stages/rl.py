"""Stage 3, RL (REVA-PO Sec. 3.3): the GRPO engine with the configured regularizer, reference strategy and
reward, starting from a stage-2 checkpoint (or stage 1, or the base model, for Table 3's rows). The trainable
set is that of stage 2 (merger + LoRA); LoRA is added if the starting point has none.
"""

from __future__ import annotations

from pathlib import Path

from harness.config import RunConfig
from harness.decoding import generate_reports
from harness.evaluation import nlg_scores
from harness.grpo.trainer import GRPOTrainer, PromptSet
from harness.models.checkpoint import save_stage_model
from harness.models.trainable import add_lora, count_parameters, set_trainable
from harness.stages.classifier import instructions_for
from harness.stages.common import load_images, load_splits, seed_everything, start_run
from harness.stages.loading import load_for_stage
from harness.stages.sft import lora_settings


def prompt_set(cfg: RunConfig, samples, spec: dict) -> PromptSet:
    return PromptSet([s.id for s in samples], load_images(samples, cfg.model.image_size),
                     instructions_for(cfg, samples, spec), [s.report for s in samples])


def make_validator(cfg: RunConfig, val: PromptSet, processor):
    rl, g = cfg.rl, cfg.generation

    def validate(model) -> dict:
        hyps = generate_reports(model, processor, val.images, val.instructions, max_new_tokens=rl.max_new_tokens,
                                min_new_tokens=0, repetition_penalty=g.repetition_penalty,
                                batch_size=g.batch_size, progress=False)
        scores = nlg_scores(dict(zip(val.ids, val.references, strict=True)),
                            dict(zip(val.ids, hyps, strict=True)), metrics=["BLEU", "METEOR", "ROUGE_L"])
        if rl.val_rg_metric == "entity_f1":
            from rewards.registry import compute_reward

            scores["rg"] = float(compute_reward("entity_f1", hyps, val.references).mean())
        elif rl.val_rg_metric == "radgraph":
            from rewards.registry import compute_reward

            scores["rg"] = float(compute_reward("radgraph_f1", hyps, val.references).mean())
        return scores

    return validate


def run_rl(cfg: RunConfig, progress: bool = True) -> Path:
    seed_everything(cfg.seed)
    run = start_run(cfg, "rl")
    if run.complete:
        return run.path / "model"
    model, processor, base_path = load_for_stage(cfg, progress)
    from harness.models.checkpoint import read_spec

    spec = read_spec(cfg.init_from) if cfg.init_from else {}
    model = add_lora(model, **(spec.get("lora") or lora_settings(cfg)))
    set_trainable(model, "rl")
    n_train, n_all = count_parameters(model)
    splits = load_splits(cfg, progress)
    train = prompt_set(cfg, splits["train"], spec)
    val_samples = splits["val"][: cfg.rl.val_max_samples] if cfg.rl.val_max_samples else splits["val"]
    val = prompt_set(cfg, val_samples, spec)
    trainer = GRPOTrainer(model, processor, cfg.rl, cfg.train, run, train, val, seed=cfg.seed,
                          validate=make_validator(cfg, val, processor), progress=progress)
    metrics = trainer.train()
    extra = {k: spec[k] for k in ("classifier_dir", "instruction", "disease_template") if k in spec}
    out = save_stage_model(model, run.path / "model", base_path, "rl", lora=spec.get("lora") or lora_settings(cfg),
                           extra=extra)
    run.write_metrics({**metrics, "trainable_params": n_train, "total_params": n_all,
                       "regularizer": cfg.rl.regularizer, "reference": cfg.rl.reference, "reward": cfg.rl.reward})
    return out
