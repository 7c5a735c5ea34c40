"""Stage 3, RL (REVA-PO Sec. 3.3): the GRPO engine with the configured regularizer, reference strategy and
reward, starting from a stage-2 checkpoint (or stage 1, or the base model, for Table 3's rows). The trainable
set is that of stage 2 (merger + LoRA); LoRA is added if the starting point has none.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.config import GenerationConfig, RunConfig, to_dict
from harness.data.phantom.gold_reader import disagreement, gold_scores, read_reports
from harness.data.pixel_cache import stage_pixel_folder
from harness.grpo.reward import RunReward
from harness.grpo.start_validation import shared_start_validation
from harness.grpo.trainer import GRPOTrainer
from harness.grpo.val_drift import kl_summary, kl_to_snapshot
from harness.grpo.validation import COMPLETION_IMAGES, COMPLETIONS, ValidationCallback, ValidationEvent
from harness.models.checkpoint import model_settings, read_spec, save_stage_model
from harness.models.trainable import add_lora, count_parameters, lora_settings, set_trainable
from harness.parallel.distributed import Dist
from harness.policy.snapshots import SnapshotStore
from harness.prompting.output_format import report_part, well_formatted_fraction
from harness.prompting.samples import PromptSet
from harness.sampling.decoding import generate_reports, greedy_settings
from harness.scoring.evaluation import findings_scores, label_with, nlg_scores
from harness.stages.common import preemptible
from harness.stages.loading import begin_stage
from harness.stages.prompts import prompt_set
from rewards.spec import compute_reward


@dataclass(frozen=True)
class ValidationFields:
    """What the validation reads of a run's config, unpacked once by the stage (`validation_fields`): the
    generation section (greedy decoding), rl.reward (`proxy_reward`), rl.val_rg_metric (the `rg` of Eq. 10), the
    log-prob temperature of the KL to the start policy, prompt.output_format and eval.gold_reader."""

    generation: GenerationConfig
    reward: object
    rg_metric: str = "none"
    temperature: float = 1.0
    output_format: str = "plain"
    gold_reader: str = "v1"


def validation_fields(cfg: RunConfig) -> ValidationFields:
    rl = cfg.rl
    return ValidationFields(cfg.generation, rl.reward, rl.val_rg_metric,
                            rl.logprob_temperature if rl.logprob_temperature is not None else rl.temperature,
                            cfg.prompt.output_format, cfg.eval.gold_reader)


def make_validator(fields: ValidationFields, val: PromptSet, processor, dist: Dist | None = None,
                   stored_labels: np.ndarray | None = None, start: SnapshotStore | None = None,
                   gold_present: np.ndarray | None = None):
    """validate(model) -> scores of greedy reports on `val`, decoded exactly as the test split is (the generation
    config). Data-parallel: each process decodes its share, rank 0 scores the whole set and every process gets
    the same scores (so "best" and VAPR decide the same way everywhere). `stored_labels` / `gold_present` / `start`: see
    score_validation and harness/grpo/val_drift.py (KL to `start`'s snapshot "start" on the greedy reports)."""
    dist = dist or Dist()
    mine = list(range(len(val)))[dist.rank::dist.world]
    generation = fields.generation
    reward = RunReward(fields.reward, fields.output_format)  # resolved once per run

    def validate(model) -> dict:
        images, instructions = [val.images[i] for i in mine], [val.instructions[i] for i in mine]
        local = generate_reports(model, processor, images, instructions, **greedy_settings(generation),
                                 progress=False)
        kl = None
        if start is not None:
            kl = kl_to_snapshot(model, processor, start, "start", images, instructions, local,
                                temperature=fields.temperature, batch_size=generation.batch_size)
        hyps: list[str] = [""] * len(val)
        kls = []
        for part in dist.gather_objects((list(zip(mine, local, strict=True)), kl)):
            for i, text in part[0]:
                hyps[i] = text
            kls += [part[1]] if part[1] is not None else []
        if not dist.main:
            return dist.broadcast_object(None)
        return dist.broadcast_object({**score_validation(fields, val, hyps, stored_labels, gold_present, reward),
                                      **kl_summary(kls)})

    return validate


def with_completion_images(validate: Callable, val: PromptSet) -> Callable:
    """`validate` whose completions table also carries each of the first rows' input image, for the trackers
    (attached after the scores, so the shared start validation stays plain JSON and is not sent to other ranks)."""

    def validate_with_images(model) -> dict:
        scores = validate(model)
        if scores and scores.get(COMPLETIONS):
            scores = {**scores, COMPLETIONS: [
                [*row, val.images[i][0] if i < COMPLETION_IMAGES and val.images[i] else None]
                for i, row in enumerate(scores[COMPLETIONS])]}
        return scores

    return validate_with_images


def score_validation(fields: ValidationFields, val: PromptSet, hyps: list[str], stored_labels: np.ndarray | None = None,
                     gold_present: np.ndarray | None = None, reward: RunReward | None = None) -> dict:
    """BLEU / METEOR / ROUGE-L of the validation reports, and the RadGraph term `rg` of Eq. 10 if configured.

    `rg` averages over the pairs whose hypothesis and reference are both non-empty, as the official code's
    s_val does (radgraph's F1RadGraph would count an empty pair as 0 in its mean); `rg_pairs` says how many.
    With `prompt.output_format=think_report` every score reads the reports' <report> part
    (harness/prompting/output_format.py: report_part), and `proxy_reward` gets what the RL reward gets (reward_inputs).
    Also (logged only, never a reward nor part of s_val): `well_formatted`, the share of outputs with MRG-R1's
    <think>/<report> layout (every arm; 0 for a plain one); `proxy_reward`, the mean rl.reward of the validation
    reports against their references (what RL optimises); with `gold_present` ([N, 14] image truth, the phantom
    set's: what was drawn) the gold metric, the phantom's gold reader (harness/data/phantom/gold_reader.py, which
    no reward sees): `gold_f1` (micro-F1) and `gold_exact` (share of reports whose 14 presence flags all match),
    and `labeler_gold_disagree` (share of reports where the rule labeler's positives differ from the reader's);
    with `stored_labels` ([N, 14] stored labels of the references) the rule labeler's agreement with them:
    `labeler_f1`, `labeler_exact` (what `gold_f1` / `gold_exact` were before issue 24). `completions`
    (harness/grpo/validation.py COMPLETIONS): each prompt's id, instruction, report, reward and reference report, for
    the trackers' table (with_completion_images adds the input image). `reward`: rl.reward resolved
    (make_validator resolves it once per run; None: resolved here)."""

    raw = hyps
    hyps = [report_part(h, fields.output_format) for h in raw]  # the <report> part (think_report)
    scores = nlg_scores(dict(zip(val.ids, val.references, strict=True)), dict(zip(val.ids, hyps, strict=True)),
                        metrics=["BLEU", "METEOR", "ROUGE_L"])
    rewards = (reward or RunReward(fields.reward, fields.output_format))(raw, val.references)
    scores["proxy_reward"] = float(np.mean(rewards))
    scores["well_formatted"] = well_formatted_fraction(raw)
    labeler = label_with("rules", hyps) if stored_labels is not None or gold_present is not None else None
    if stored_labels is not None:
        agreement = findings_scores(hyps, stored_labels, backend="rules", hyp_labels=labeler)
        scores.update(labeler_f1=agreement["ce_micro_f1"], labeler_exact=agreement["findings_exact"])
    if gold_present is not None:

        read = read_reports(hyps, fields.gold_reader)
        gold = gold_scores(read, gold_present)
        scores.update(gold_f1=gold["gold_f1"], gold_exact=gold["gold_exact"])
        scores["labeler_gold_disagree"] = disagreement(labeler, read)["labeler_gold_disagree"]
    backend = {"entity_f1": "entity_f1", "radgraph": "radgraph_f1"}.get(fields.rg_metric)
    if backend:
        pairs = [(h, r) for h, r in zip(hyps, val.references, strict=True) if h.strip() and r.strip()]
        scores["rg_pairs"] = len(pairs)
        scores["rg"] = float(compute_reward(backend, *map(list, zip(*pairs, strict=True))).mean()) if pairs else 0.0
    scores[COMPLETIONS] = [[i, ins, h, float(r), ref] for i, ins, h, r, ref in
                           zip(val.ids, val.instructions, hyps, rewards, val.references, strict=True)]
    return scores


def progress_line(trainer: GRPOTrainer, name: str):
    """A validation callback printing `[rl NAME] step s/S reward r kl k gold g val v ETA t` (last step's sampling
    reward and KL to the reference, the validation's gold F1 and score; ETA from this process's pace)."""
    t0, step0 = time.time(), None

    def hook(event: ValidationEvent) -> None:
        nonlocal step0
        step, score = event.step, event.score
        step0 = step if step0 is None else step0
        last = (trainer.run.steps() or [{}])[-1] if step else {}
        val = (trainer.run.evals() or [{}])[-1]
        rate = (time.time() - t0) / (step - step0) if step > step0 else None
        eta = f"{rate * (trainer.total_steps - step) / 60:.1f} min" if rate else "?"
        fmt = lambda v: "n/a" if v is None else f"{v:.4f}"  # noqa: E731
        print(f"[rl {name}] step {step}/{trainer.total_steps} reward {fmt(last.get('reward_mean'))} "
              f"kl {fmt(last.get('kl_mean'))} gold_f1 {fmt(val.get('gold_f1'))} kl_sft {fmt(val.get('kl_start_seq'))} "
              f"val {score:.4f} ETA {eta}", flush=True)

    return hook


def ground_truth_labels(samples) -> np.ndarray | None:
    """[N, 14] ground-truth findings when every sample carries them (the phantom set), else None: labels of the
    reference reports would be a second proxy, not gold."""
    if not samples or any(s.labels is None for s in samples):
        return None
    return np.stack([np.asarray(s.labels, dtype=np.float64) for s in samples])


def image_truth(samples) -> np.ndarray | None:
    """[N, 14] what the phantom drew (1 = present) when every sample carries it, else None (no gold reader)."""
    if not samples or any(getattr(s, "present", None) is None for s in samples):
        return None
    return np.stack([np.asarray(s.present, dtype=np.float64) for s in samples])


@preemptible
def run_rl(cfg: RunConfig, progress: bool = True, on_validation: Sequence[ValidationCallback] = ()) -> Path:
    """Stage 3 in this process, or data-parallel under torchrun / accelerate launch (harness/parallel/distributed.py).
    `on_validation`: the trainer's validation callbacks (a search's pruning); one may raise RunPruned."""
    start = begin_stage(cfg, "rl", progress)  # data-parallel under torchrun / accelerate launch
    if start.complete:
        return start.run.path / "model"
    dist, run, progress, splits = start.dist, start.run, start.progress, start.splits
    model, processor, base_path = start.model, start.processor, start.base_path

    spec = read_spec(cfg.init_from) if cfg.init_from else {}
    # An SFT adapter brings its own layout (LoRA, token rows); from a model without one, the config's.
    lora = spec.get("lora") or lora_settings(cfg.model, processor.tokenizer)
    model = add_lora(model, **lora)
    set_trainable(model, "rl")
    n_train, n_all = count_parameters(model)
    pixels = stage_pixel_folder(run.path)  # every epoch and validation reads the images again: decoded once
    train = prompt_set(cfg.prompt, cfg.model, splits["train"], spec, cache_dir=pixels.name)
    val_samples = splits["val"][: cfg.rl.val_max_samples] if cfg.rl.val_max_samples else splits["val"]
    val = prompt_set(cfg.prompt, cfg.model, val_samples, spec, cache_dir=pixels.name)
    # The policy RL starts from (also on resume: the model is rebuilt from init_from), for the validation KL.
    start_policy = SnapshotStore(model, device=next(model.parameters()).device)
    start_policy.capture("start")
    validate = make_validator(validation_fields(cfg), val, processor, dist, ground_truth_labels(val_samples),
                              start_policy, image_truth(val_samples))
    # The start policy's validation is the same for every run from this model: computed once, shared.
    validate = shared_start_validation(validate, to_dict(cfg), start_policy, dist)
    validate = with_completion_images(validate, val)  # after the shared file: images are not JSON
    if cfg.generation.backend == "vllm":  # every rank at once, before training (harness/sampling/vllm_rollout.py)
        # lazy: vllm is optional (pip install 'regbench[vllm]')
        from harness.sampling.vllm_rollout import start_engine

        start_engine(model, processor, cfg.generation,
                     [(train.images, train.instructions, cfg.rl.max_new_tokens),
                      (val.images, val.instructions, cfg.generation.max_new_tokens)],
                     seed=cfg.seed, rank=dist.rank, model_path=str(base_path))
    trainer = GRPOTrainer(model, processor, cfg.rl, cfg.train, run, train, val, seed=cfg.seed,
                          validate=validate, progress=progress,
                          dist=dist, on_validation=on_validation, generation=cfg.generation,
                          output_format=cfg.prompt.output_format)
    if dist.main and not progress:  # no bar (a study's worker): one line per validation instead
        trainer.on_validation += (progress_line(trainer, run.path.name),)
    metrics = trainer.train()
    pixels.cleanup()
    out = run.path / "model"
    if dist.main:
        extra = {k: spec[k] for k in ("classifier_dir", "instruction", "disease_template", "disease_list_format",
                                      "disease_separator", "output_format") if k in spec}
        save_stage_model(model, out, base_path, "rl", lora=lora, extra=extra,
                         settings=model_settings(cfg.model))
        run.write_metrics({**metrics, "trainable_params": n_train, "total_params": n_all, "processes": dist.world,
                           "regularizer": cfg.rl.regularizer, "reference": cfg.rl.reference,
                           "reward": cfg.rl.reward})
        run.close()  # the trackers (train.report_to): a W&B run ends with its stage
    dist.barrier()
    return out
