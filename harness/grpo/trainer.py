"""The GRPO / REVA-PO loop (Algorithm 1). It only orchestrates: the math is in harness.grpo.core and
regularizers/, the policies are snapshots in harness.policy.snapshots.

Per optimizer step:
  1. take B prompts; sample G candidates each from the OLD policy (swapped in);
  2. score them with the reward; A = group-normalised rewards (Eq. 2);
  3. log-probs of the candidates under the CURRENT policy (with grad), under OLD and, if the regularizer needs
     it, REFERENCE (+ its entropy for RER), the last two without grad through the same logits path; a frozen
     policy whose parameters equal the current ones (old right after a sync, ref right after a reset) takes the
     current pass's values detached instead of a second forward pass;
  4. beta[B, G] from the regularizer; loss from policy_loss (Eq. 3-6); one AdamW step on the current policy.
     With rl.micro_batch_size, rollouts, frozen passes and the backward run over micro-batches of responses;
     the aggregation's normalisers are those of the whole step (core.aggregation_weights), so the gradient is
     the one-batch gradient (StepLoss, harness/grpo/step_loss.py). The update itself (micro-batch backwards,
     the all-reduce under a launch, fp16 loss scaling, clipping, the optimizer or DeepSpeed step) is one call of
     the updater (harness/parallel/updater.py, `Updater.update`). A step whose rewards, logits, loss or gradient are not
     finite is skipped (no optimizer step), logged and counted (harness/grpo/nonfinite.py);
     rl.max_nonfinite_steps in a row stop the run with a checkpoint (harness/grpo/checkpointing.py);
  5. regularizer.after_step (adaptive controller), reference.after_step (EMA), old <- current every N steps
     (counted per epoch and re-synced at each epoch start, or over the whole run: rl.old_sync).
After every epoch (and every K steps if asked) the current policy decodes the validation prompts greedily,
exactly as the test does (the generation config); the score s_val (Eq. 10) updates the best-validation
snapshot (harness/grpo/selection.py), then the reference strategy may reset to it (VAPR). At the end the
policy chosen by rl.select (best_val or final), the same rule for every arm, is left in the model
(harness/grpo/final_policy.py). The log rows are assembled in harness/grpo/step_log.py. A stop signal
(harness/runs/preemption.py) ends the loop between two steps with a checkpoint and `Preempted`.
How the passes compute (rl.lora_pass, rl.prompt_pass, generation.backend, the feature memo, the current pass's
mode) is chosen once at construction (harness/grpo/passes.py); the step reads the algorithm only. rl.reward is
resolved once per run (harness/grpo/reward.py).

Dropout: the rollouts and the old, reference and validation passes run in eval mode (dropout off: the same
weights give the same numbers). The current policy's pass with grad runs in eval mode too by default, so the ratio
is exactly 1 when current = old; with rl.policy_dropout (the official code, the paper presets) it runs in train
mode, LoRA dropout active, and then no frozen pass borrows the current pass's values (`_frozen_passes`). With
gradient checkpointing (model.gradient_checkpointing) the eval-mode pass runs in train mode with its dropout
modules off, as transformers recomputes activations only in train mode (harness/models/pass_mode.py).
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from harness.config import GenerationConfig, RLConfig, TrainConfig
from harness.grpo import checkpointing, final_policy
from harness.grpo.core import group_advantages, token_entropy, token_logprobs, zero_std_groups
from harness.grpo.nonfinite import count_skipped, count_taken, frozen_problem, new_counts, reward_problem, stop_error
from harness.grpo.passes import passes_for
from harness.grpo.reward import RunReward
from harness.grpo.rollout import Rollout, concat_rollouts
from harness.grpo.selection import BestTracker
from harness.grpo.step_log import loss_stats, run_summary, samples_record, step_row
from harness.grpo.step_loss import StepLoss, kl_in_reward
from harness.grpo.validation import (
    COMPLETION_COLUMNS,
    COMPLETIONS,
    ValidationCallback,
    ValidationEvent,
    validation_score,
)
from harness.models.precision import base_dtype
from harness.parallel.distributed import Dist, shard
from harness.parallel.updater import UpdateOutcome, Updater, needs_scaler
from harness.policy.snapshots import SnapshotStore
from harness.prompting.samples import PromptSet  # noqa: F401 - the trainer's input type, importable from here too
from harness.runs import preemption
from harness.runs.records import RunDir
from harness.token_weighting.registry import build_token_weighting
from harness.training.schedule import epoch_order, make_scheduler
from regularizers.registry import reference_from_config, regularizer_from_config
from rewards.report_part import format_ok


class GRPOTrainer:
    def __init__(self, model, processor, rl: RLConfig, train_cfg: TrainConfig, run: RunDir, train: PromptSet,
                 val: PromptSet | None, *, seed: int, validate: Callable[[object], dict] | None = None,
                 progress: bool = True, dist: Dist | None = None, on_validation: Sequence[ValidationCallback] = (),
                 generation: GenerationConfig | None = None, output_format: str = "plain"):
        # generation: the config whose `backend` samples the rollouts (lean by default, as GenerationConfig's
        # default; the RL stage passes the run's generation section).
        # on_validation: called with a ValidationEvent after every validation (on every process), e.g. by a
        # search that reports intermediate values; one may end the run by raising harness.errors.RunPruned.
        self.on_validation = tuple(on_validation)
        self.model, self.processor, self.rl, self.tcfg, self.run = model, processor, rl, train_cfg, run
        self.train_set, self.val_set, self.seed, self.progress = train, val, seed, progress
        self.dist = dist or Dist()
        # output_format: prompt.output_format of the model being trained (harness/prompting/output_format.py): which
        # part of a sampled text the rewards score ("plain": all of it; "think_report": the <report> part).
        self.output_format = output_format
        self.reward = RunReward(rl.reward, output_format)  # rl.reward resolved once per run
        if rl.prompts_per_step % self.dist.world:
            raise ValueError(f"rl.prompts_per_step = {rl.prompts_per_step} must be a multiple of the number of "
                             f"processes ({self.dist.world}): each process takes an equal share of the prompts")
        self.validate_fn = validate
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("no trainable parameters: call set_trainable(model, 'rl') first")
        # The speed options and the pass mode, chosen once; forbidden combinations are refused here (passes.py).
        self.passes = passes_for(rl, generation, base_dtype(model))
        self.frozen_features = self.passes.features  # the frozen passes' vision features (feature_memo.py)
        # DDP under a launch (every process starts from rank 0's values); fp16 bases get a loss scale.
        self.updater = Updater(model, self.params, self.dist, fp16_scaler=needs_scaler(base_dtype(model)))
        # Snapshots live beside the model (GPU memory holds them easily; swaps then never cross PCIe).
        self.store = SnapshotStore(model, device=self.params[0].device)
        self.regularizer = regularizer_from_config(rl)
        self.reference = reference_from_config(rl)
        if rl.regularizer == "none" and rl.reference != "static":
            print(f"[rl] note: regularizer 'none' with reference '{rl.reference}': the reference is unused")
        self.steps_per_epoch = math.ceil(len(train) / rl.prompts_per_step)
        total = math.ceil(train_cfg.epochs * self.steps_per_epoch)
        self.total_steps = min(total, train_cfg.max_steps) if train_cfg.max_steps else total
        self.optimizer = torch.optim.AdamW(self.params, lr=train_cfg.lr, weight_decay=train_cfg.weight_decay)
        self.updater.attach(self.optimizer)  # DeepSpeed ZeRO: its engine over the model and the optimizer
        self.store.master_sync = self.updater.master_sync()  # a restore must also reach ZeRO's fp32 master
        self.scheduler = make_scheduler(self.optimizer, train_cfg, self.total_steps)
        # DiTPO's token weights (rl.token_weighting; harness/token_weighting/): None for 'none'.
        self.weighter = build_token_weighting(rl, processor.tokenizer, train.references)
        self.best = BestTracker(include_start=rl.best_includes_start)
        # Steps of the epoch schedule; train.max_steps may cut it short. VAPR's "no reset after the last
        # validation" refers to the schedule, so a cut run resumed with a larger max_steps equals an uncut one.
        self.schedule_steps = total
        self.step = 0
        self.nonfinite = new_counts()  # skipped (non-finite) steps (harness/grpo/nonfinite.py)
        self.lp_temp = rl.logprob_temperature if rl.logprob_temperature is not None else rl.temperature

    # -- checkpoints (harness/grpo/checkpointing.py) ---------------------------------------------------------
    @property
    def ckpt_path(self) -> Path:
        return checkpointing.checkpoint_path(self.run)

    def save_checkpoint(self) -> None:
        checkpointing.save_checkpoint(self)

    def try_resume(self) -> bool:
        found = checkpointing.resume_from(self)  # the newest verified generation (a torn one is skipped)
        if found is None:
            return False
        folder, state = found  # read with the safe loader (weights only)
        checkpointing.restore_checkpoint(self, state, folder)
        self.run.truncate_logs_after(self.step)
        return True

    # -- pieces of one step -----------------------------------------------------------------------------
    def _batch_indices(self, step: int) -> list[int]:
        epoch, pos = divmod(step, self.steps_per_epoch)
        order = epoch_order(len(self.train_set), self.seed, epoch)
        B = self.rl.prompts_per_step
        return order[pos * B:(pos + 1) * B]

    def _rollout(self, idx: list[int]) -> Rollout:
        rl = self.rl
        # One seed per step (and process): a resumed run samples exactly what an uninterrupted one would.
        torch.manual_seed(self.seed * 1_000_003 + self.step + 7_919 * self.dist.rank)
        per = max(1, (rl.micro_batch_size or len(idx) * rl.group_size) // rl.group_size)  # prompts per pass
        parts = []
        # The rollout encodes its images under "old": the old pass of this step reads them back from the memo.
        memo = self.frozen_features.memo("old", self.store.version("old"))
        with self.store.use("old"):
            for s in range(0, len(idx), per):
                sub = idx[s:s + per]
                # (prompt index, view) per image, rows group-major: what the frozen passes' memos key on.
                keys = [(i, v) for i in sub for _ in range(rl.group_size) for v in range(len(self.train_set.images[i]))]
                parts.append(self.passes.sample(
                    self.model, self.processor, [self.train_set.images[i] for i in sub],
                    [self.train_set.instructions[i] for i in sub], group_size=rl.group_size,
                    temperature=rl.temperature, top_p=rl.top_p, top_k=rl.top_k, max_new_tokens=rl.max_new_tokens,
                    min_new_tokens=rl.min_new_tokens, repetition_penalty=rl.repetition_penalty,
                    image_keys=keys, memo=memo))
        self.passes.after_rollouts()  # a vLLM engine's memory back to the update (generation.vllm_sleep_level)
        return concat_rollouts(parts, self.processor.tokenizer.pad_token_id)

    def _chunks(self, n: int) -> list[tuple[int, int]]:
        """Row ranges of the micro-batches of an n-response step."""
        size = self.rl.micro_batch_size or max(n, 1)
        return [(a, min(a + size, n)) for a in range(0, n, size)] or [(0, 0)]

    @torch.no_grad()
    def _frozen_pass(self, name: str | None, ro: Rollout, chunks, want_entropy: bool):
        """[N, L] log-probs (and entropies) of the responses under snapshot `name` (None: the live parameters,
        no swap), micro-batch by micro-batch. Called before the policy's own forward: swapping a snapshot in
        writes the live parameters, which no live graph may have saved."""
        logps, ents, chunk = [], [], self.rl.logprob_chunk_positions
        # A snapshot's vision features stay valid until it is written (a static reference: the whole run).
        memo = self.frozen_features.memo(name, self.store.version(name)) if name else None
        with self.store.use(name) if name else contextlib.nullcontext():
            for a, b in chunks:
                sub = ro.rows(a, b)
                logits = self.passes.logits(self.model, sub, memo)
                logps.append(token_logprobs(logits, sub.responses, self.lp_temp, chunk))
                ents.append(token_entropy(logits, self.lp_temp, chunk) if want_entropy else None)
        return torch.cat(logps), (torch.cat(ents) if want_entropy else None)

    def _frozen_passes(self, ro: Rollout, chunks) -> dict:
        """{"old": (log-probs, None), "ref": (log-probs, entropies or None)} of the frozen policies that need a pass.
        A snapshot equal to the live parameters (old right after a sync, ref right after a reset) needs none:
        the current pass's logits are the same numbers. Except for the reference entropies over several
        micro-batches: the betas need them for the whole step before the first backward, so they come from a
        no-grad pass of the live parameters."""
        frozen = {}
        for name in ["old"] + (["ref"] if self.regularizer.needs_reference else []):
            ent_here = name == "ref" and self.regularizer.needs_reference_entropy
            if not self.store.equal_to_live(name):
                frozen[name] = self._frozen_pass(name, ro, chunks, ent_here)
            elif not self.passes.borrows_current or (ent_here and len(chunks) > 1) or self._kl_in_reward:
                # rl.policy_dropout: the current pass runs with dropout, so its values are not this policy's
                # (eval-mode) values; the live parameters are this snapshot's, so no swap is needed. KL in the
                # reward: the advantages need old and reference log-probs before the policy's own pass.
                frozen[name] = self._frozen_pass(None, ro, chunks, ent_here)
        return frozen

    @property
    def _kl_in_reward(self) -> bool:
        return self.rl.kl_placement == "reward" and self.regularizer.needs_reference

    def _token_advantages(self, adv: torch.Tensor, ro: Rollout, chunks) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[N] advantages; with token weighting (DiTPO) [N, T]: A[i, t] = w[i, t] * A[i], and the weights w (the
        gradient weighter looks through the old policy, row by row)."""
        if self.weighter is None:
            return adv.reshape(-1), None
        with self.store.use("old"):
            token_w = torch.cat([self.weighter.weights(self.model, ro.rows(a, b)) for a, b in chunks])
        return adv.reshape(-1).unsqueeze(1) * token_w.to(adv.device), token_w

    def train_step(self) -> dict:
        rl, G = self.rl, self.rl.group_size
        t0 = time.time()
        idx = shard(self._batch_indices(self.step), self.dist)  # this process's prompts
        B = len(idx)
        self.model.eval()  # dropout off in the rollouts and frozen passes (see module docstring)
        ro = self._rollout(idx)
        refs = [self.train_set.references[i] for i in idx for _ in range(G)]
        raw = np.asarray(self.reward(ro.texts, refs), dtype=np.float64)
        # Rewards (and so advantages and betas) on the model's device, beside the log-probs they weigh.
        rewards = torch.tensor(raw, dtype=torch.float32, device=ro.response_mask.device).view(B, G)
        adv = group_advantages(rewards, scale=rl.advantage_scale, std=rl.advantage_std)
        zero_std = zero_std_groups(rewards)
        chunks = self._chunks(B * G)
        frozen = self._frozen_passes(ro, chunks)  # before the policy's own forward (see _frozen_pass)
        kl_shaping = None
        if self._kl_in_reward:  # the advantages of the KL-shaped rewards (rl.kl_placement reward)
            shaped, kl_shaping = kl_in_reward(rl, self.regularizer, rewards, adv, ro, frozen)
            adv = group_advantages(shaped, scale=rl.advantage_scale, std=rl.advantage_std)
            zero_std = zero_std_groups(shaped)
        mask = ro.response_mask.float()
        if rl.zero_std_groups == "drop":
            mask = mask * (~zero_std).repeat_interleave(G).float().unsqueeze(1)
        advantages, token_w = self._token_advantages(adv, ro, chunks)
        loss = StepLoss(rl, self.regularizer, self.lp_temp, ro, chunks, frozen, adv, advantages, mask, kl_shaping,
                        logits_fn=self.passes.logits)
        lr = self.optimizer.param_groups[0]["lr"]
        with self.passes.with_grad(self.model):  # the current policy's pass in its mode, then eval mode again
            outcome = self.updater.update(loss, chunks, self.optimizer, grad_clip=self.tcfg.grad_clip,
                                          normalizer=loss.normalizer,
                                          rejected=reward_problem(rl.reward, raw, adv) or frozen_problem(frozen))
        stats = self._step_stats(outcome, loss, mask)
        with warnings.catch_warnings():
            # A skipped step still advances the schedule (the lr is a function of the step number); torch warns
            # when that happens before any optimizer step.
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
            self.scheduler.step()
        self.step += 1
        if outcome.stepped:  # once per optimizer step taken (not after a skipped one, nor one the scaler skipped)
            self.regularizer.after_step(stats.get("kl_mean"), B * G * self.dist.world)
        events = dict(self.reference.after_step(self.store, self.step) or {})
        if self._old_sync_due():
            self.store.capture("old")
            events["old_synced"] = True
        row = step_row(self.dist, step=self.step, epoch=self.step / self.steps_per_epoch, rewards=rewards,
                       zero_std=zero_std, lengths=ro.lengths, response_mask=ro.response_mask,
                       ref_entropy_tok=loss.h_ref, token_weights=token_w, skipped=outcome.skipped, lr=lr,
                       grad_norm=outcome.grad_norm, t0=t0, fields={**stats, **self.regularizer.log_stats(),
                                                                    **self.reference.log_stats(), **events,
                                                                    **self._format_stats(ro.texts)})
        self.run.log_step(row)
        if rl.samples_every and self.step % rl.samples_every == 0:
            self.run.log_samples(samples_record(self.step, [self.train_set.ids[i] for i in idx], ro.texts, rewards,
                                                adv, loss.beta))
        return row

    def _format_stats(self, texts: list[str]) -> dict:
        """think_report arms (MRG-R1): `well_formatted`, the share of the step's sampled outputs (all processes)
        with the <think>/<report> layout."""
        if self.output_format == "plain":
            return {}
        ok = torch.tensor([float(format_ok(t)) for t in texts])
        return {"well_formatted": float(self.dist.gather(ok).mean())}

    def _step_stats(self, outcome: UpdateOutcome, loss: StepLoss, mask: torch.Tensor) -> dict:
        """The step's loss statistics over all processes (step_log.loss_stats), or a skipped step's count;
        the fp16 scaler's fields when it saw the step."""
        if outcome.skipped:  # no optimizer step (on any process)
            stats = count_skipped(self.nonfinite, self.step + 1, outcome.cause, self.dist.main)
        else:
            stats = loss_stats(self.dist, loss.stats(), float(mask.sum()), float(loss.normalizer))
            if not outcome.overflow:  # a step the fp16 scaler skipped is not counted either way
                count_taken(self.nonfinite)
        if outcome.loss_scale is not None:
            stats = {**stats, "scaler_skipped": not outcome.stepped, "loss_scale": outcome.loss_scale}
        return stats

    def _old_sync_due(self) -> bool:
        """After optimizer step self.step: is it the N-th step (of the epoch, or of the run)?"""
        n = self.rl.old_sync_every
        if self.rl.old_sync == "global":
            return self.step % n == 0
        step_in_epoch = (self.step - 1) % self.steps_per_epoch + 1
        return step_in_epoch % n == 0

    # -- validation -------------------------------------------------------------------------------------
    def validate(self, epoch: float, end_of_epoch: bool, candidate: bool = True) -> dict:
        """Score the live policy on the validation set; update "best" (a `candidate` validation only), then let
        the reference strategy react (VAPR resets after epochs M, 2M, ... unless no training step follows)."""
        if self.validate_fn is None:
            return {}
        scores = dict(self.validate_fn(self.model))
        completions = scores.pop(COMPLETIONS, None)  # a table for the trackers, not numbers of evals.jsonl
        score = validation_score(scores, self.rl.val_score, self.rl.val_lambda, scores.get("rg"))
        improved = self.best.observe(self.store, score, self.step, epoch, candidate=candidate)
        final = self.step >= self.schedule_steps
        event = self.reference.after_validation(self.store, self.updater.reset_view(self.optimizer), epoch, self.step,
                                                end_of_epoch=end_of_epoch, final=final)
        row = {"step": self.step, "epoch": epoch, "split": "val", "val_score": score, "end_of_epoch": end_of_epoch,
               "candidate": candidate and (self.step > 0 or self.best.include_start), "improved": improved,
               **self.best.log_stats(), **scores, **(event or {})}
        self.run.log_eval(row)
        if completions:
            self.run.log_table("val/completions", COMPLETION_COLUMNS, completions, self.step)
        for callback in self.on_validation:
            callback(ValidationEvent(self.step, score, row))
        return row

    # -- the loop ---------------------------------------------------------------------------------------
    def train(self) -> dict:
        resumed = self.try_resume()
        if not resumed:
            self.reference.on_start(self.store)
            if "old" not in self.store:
                self.store.capture("old")
            # Logged for the curves; a "best" candidate only with rl.best_includes_start.
            self.validate(epoch=0, end_of_epoch=True)
        val_every = self.rl.val_every_steps
        bar = tqdm(total=self.total_steps, initial=self.step, desc="stage 3 RL", disable=not self.progress,
                   leave=False)
        t_start = time.time()
        saved_at = self.step if resumed else None  # the step of the checkpoint on disk
        while self.step < self.total_steps:
            if preemption.stop_agreed(self.dist):  # a stop signal: the last step (and its validation) is done
                if saved_at != self.step:
                    self.save_checkpoint()
                raise preemption.stop(self.run.path, "rl", self.step, self.ckpt_path, main=self.dist.main)
            if self.rl.old_sync == "per_epoch" and self.step % self.steps_per_epoch == 0:
                self.store.capture("old")  # Algorithm 1: each epoch samples from the policy it starts with
            last = self.train_step()
            bar.update(1)
            kl = last.get("kl_mean")
            reward = last["reward_mean"]
            bar.set_postfix(reward="n/a" if reward is None else f"{reward:.3f}",
                            kl="n/a" if kl is None else f"{kl:.4f}")
            end_of_epoch = self.step % self.steps_per_epoch == 0
            validated = True
            if end_of_epoch:
                self.validate(self.step // self.steps_per_epoch, True)
            elif val_every and self.step % val_every == 0:
                self.validate(self.step / self.steps_per_epoch, False)
            elif self.step == self.total_steps:
                # A run cut by train.max_steps mid-epoch still ends with a validation line (the final policy's
                # score), but it is not a "best" candidate: an uncut run would not have validated here.
                self.validate(self.step / self.steps_per_epoch, False, candidate=False)
            else:
                validated = False
            too_many = self.nonfinite["in_a_row"] >= self.rl.max_nonfinite_steps
            if validated or (self.tcfg.checkpoint_every and self.step % self.tcfg.checkpoint_every == 0) \
                    or self.step == self.total_steps or too_many:
                self.save_checkpoint()
                saved_at = self.step
            if too_many:
                raise stop_error(self.nonfinite, self.rl.max_nonfinite_steps, self.step, self.ckpt_path.parent)
        bar.close()
        selected = self.select_policy()
        return {**run_summary(self.step, time.time() - t_start, self.run.steps()), **selected}

    def select_policy(self) -> dict:
        """Leave the policy that rl.select names in the model; where it came from (harness/grpo/final_policy.py)."""
        return final_policy.select_policy(self.rl.select, self.store, self.best, self.run.evals(), self.step,
                                          self.steps_per_epoch)
