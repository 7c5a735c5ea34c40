"""Stage 3, RL (REVA-PO Sec. 3.3): the GRPO engine with the configured regularizer, reference strategy and
reward, starting from a stage-2 checkpoint (or stage 1, or the base model, for Table 3's rows). The trainable
set is that of stage 2 (merger + LoRA); LoRA is added if the starting point has none.
"""

from __future__ import annotations

from pathlib import Path

from harness.config import RunConfig
from harness.decoding import generate_reports
from harness.distributed import Dist
from harness.evaluation import nlg_scores
from harness.grpo.trainer import GRPOTrainer, PromptSet
from harness.models.checkpoint import save_stage_model
from harness.models.trainable import add_lora, count_parameters, set_trainable
from harness.stages.classifier import instructions_for
from harness.stages.common import load_images
from harness.stages.loading import begin_stage
from harness.stages.sft import lora_settings


def prompt_set(cfg: RunConfig, samples, spec: dict) -> PromptSet:
    return PromptSet([s.id for s in samples], load_images(samples, cfg.model.image_size),
                     instructions_for(cfg, samples, spec), [s.report for s in samples])


def make_validator(cfg: RunConfig, val: PromptSet, processor, dist: Dist | None = None):
    """validate(model) -> scores of greedy reports on `val`. Data-parallel: each process decodes its share,
    rank 0 scores the whole set and every process gets the same scores (so VAPR decides the same way)."""
    rl, g = cfg.rl, cfg.generation
    dist = dist or Dist()
    mine = list(range(len(val)))[dist.rank::dist.world]

    def validate(model) -> dict:
        local = generate_reports(model, processor, [val.images[i] for i in mine],
                                 [val.instructions[i] for i in mine], max_new_tokens=rl.max_new_tokens,
                                 min_new_tokens=0, repetition_penalty=g.repetition_penalty,
                                 batch_size=g.batch_size, progress=False)
        hyps: list[str] = [""] * len(val)
        for part in dist.gather_objects(list(zip(mine, local, strict=True))):
            for i, text in part:
                hyps[i] = text
        return dist.broadcast_object(score_validation(cfg, val, hyps) if dist.main else None)

    return validate


def score_validation(cfg: RunConfig, val: PromptSet, hyps: list[str]) -> dict:
    """BLEU / METEOR / ROUGE-L of the validation reports, and the RadGraph term `rg` of Eq. 10 if configured."""
    from rewards.registry import compute_reward

    scores = nlg_scores(dict(zip(val.ids, val.references, strict=True)), dict(zip(val.ids, hyps, strict=True)),
                        metrics=["BLEU", "METEOR", "ROUGE_L"])
    backend = {"entity_f1": "entity_f1", "radgraph": "radgraph_f1"}.get(cfg.rl.val_rg_metric)
    if backend:
        scores["rg"] = float(compute_reward(backend, hyps, val.references).mean())
    return scores


def final_validation_done(trainer: GRPOTrainer) -> bool:
    """True when the run's checkpoint is at its last step and the validation of that step is already logged:
    the earlier try finished training and died before metrics.json, so resuming must not validate again."""
    from harness.checkpoint_io import checkpoint_step
    from harness.records import read_jsonl

    if checkpoint_step(trainer.ckpt_path) != trainer.total_steps:
        return False
    # read from the file on every process (a follower's run object reads nothing): all ranks decide alike
    vals = [e for e in read_jsonl(Path(trainer.run.path) / "evals.jsonl") if e.get("split") == "val"]
    return bool(vals) and int(vals[-1].get("step", -1)) == trainer.total_steps


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
    if final_validation_done(trainer):
        trainer.validate_fn = None  # died between the final checkpoint and metrics.json: log no second row
    metrics = trainer.train()
    out = run.path / "model"
    if dist.main:
        extra = {k: spec[k] for k in ("classifier_dir", "instruction", "disease_template") if k in spec}
        save_stage_model(model, out, base_path, "rl", lora=spec.get("lora") or lora_settings(cfg), extra=extra)
        run.write_metrics({**metrics, "trainable_params": n_train, "total_params": n_all, "processes": dist.world,
                           "regularizer": cfg.rl.regularizer, "reference": cfg.rl.reference,
                           "reward": cfg.rl.reward})
    dist.barrier()
    return out
