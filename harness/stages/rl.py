"""Stage 3, RL (REVA-PO Sec. 3.3): the GRPO engine with the configured regularizer, reference strategy and
reward, starting from a stage-2 checkpoint (or stage 1, or the base model, for Table 3's rows). The trainable
set is that of stage 2 (merger + LoRA); LoRA is added if the starting point has none.
"""

from __future__ import annotations

from pathlib import Path

from harness.config import RunConfig
from harness.decoding import generate_reports, greedy_settings
from harness.distributed import Dist
from harness.evaluation import nlg_scores
from harness.grpo.trainer import GRPOTrainer
from harness.models.checkpoint import model_settings, save_stage_model
from harness.models.trainable import add_lora, count_parameters, lora_settings, set_trainable
from harness.prompts import PromptSet, prompt_set
from harness.stages.loading import begin_stage


def make_validator(cfg: RunConfig, val: PromptSet, processor, dist: Dist | None = None):
    """validate(model) -> scores of greedy reports on `val`, decoded exactly as the test split is (the generation
    config). Data-parallel: each process decodes its share, rank 0 scores the whole set and every process gets
    the same scores (so "best" and VAPR decide the same way everywhere)."""
    dist = dist or Dist()
    mine = list(range(len(val)))[dist.rank::dist.world]

    def validate(model) -> dict:
        local = generate_reports(model, processor, [val.images[i] for i in mine],
                                 [val.instructions[i] for i in mine], **greedy_settings(cfg.generation),
                                 progress=False)
        hyps: list[str] = [""] * len(val)
        for part in dist.gather_objects(list(zip(mine, local, strict=True))):
            for i, text in part:
                hyps[i] = text
        return dist.broadcast_object(score_validation(cfg, val, hyps) if dist.main else None)

    return validate


def score_validation(cfg: RunConfig, val: PromptSet, hyps: list[str]) -> dict:
    """BLEU / METEOR / ROUGE-L of the validation reports, and the RadGraph term `rg` of Eq. 10 if configured.

    `rg` averages over the pairs whose hypothesis and reference are both non-empty, as the official code's
    s_val does (radgraph's F1RadGraph would count an empty pair as 0 in its mean); `rg_pairs` says how many."""
    from rewards.registry import compute_reward

    scores = nlg_scores(dict(zip(val.ids, val.references, strict=True)), dict(zip(val.ids, hyps, strict=True)),
                        metrics=["BLEU", "METEOR", "ROUGE_L"])
    backend = {"entity_f1": "entity_f1", "radgraph": "radgraph_f1"}.get(cfg.rl.val_rg_metric)
    if backend:
        pairs = [(h, r) for h, r in zip(hyps, val.references, strict=True) if h.strip() and r.strip()]
        scores["rg_pairs"] = len(pairs)
        scores["rg"] = float(compute_reward(backend, *map(list, zip(*pairs, strict=True))).mean()) if pairs else 0.0
    return scores


def run_rl(cfg: RunConfig, progress: bool = True) -> Path:
    """Stage 3 in this process, or data-parallel under torchrun / accelerate launch (harness/distributed.py)."""
    start = begin_stage(cfg, "rl", progress)  # data-parallel under torchrun / accelerate launch
    if start.complete:
        return start.run.path / "model"
    dist, run, progress, splits = start.dist, start.run, start.progress, start.splits
    model, processor, base_path = start.model, start.processor, start.base_path
    from harness.models.checkpoint import read_spec

    spec = read_spec(cfg.init_from) if cfg.init_from else {}
    model = add_lora(model, **(spec.get("lora") or lora_settings(cfg)))
    set_trainable(model, "rl")
    n_train, n_all = count_parameters(model)
    train = prompt_set(cfg, splits["train"], spec)
    val_samples = splits["val"][: cfg.rl.val_max_samples] if cfg.rl.val_max_samples else splits["val"]
    val = prompt_set(cfg, val_samples, spec)
    trainer = GRPOTrainer(model, processor, cfg.rl, cfg.train, run, train, val, seed=cfg.seed,
                          validate=make_validator(cfg, val, processor, dist), progress=progress, dist=dist)
    trainer.generation_backend = cfg.generation.backend  # read by GRPOTrainer._rollout
    metrics = trainer.train()
    out = run.path / "model"
    if dist.main:
        extra = {k: spec[k] for k in ("classifier_dir", "instruction", "disease_template") if k in spec}
        save_stage_model(model, out, base_path, "rl", lora=spec.get("lora") or lora_settings(cfg), extra=extra,
                         settings=model_settings(cfg))
        run.write_metrics({**metrics, "trainable_params": n_train, "total_params": n_all, "processes": dist.world,
                           "regularizer": cfg.rl.regularizer, "reference": cfg.rl.reference,
                           "reward": cfg.rl.reward})
    dist.barrier()
    return out
