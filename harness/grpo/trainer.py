"""The GRPO / REVA-PO loop (Algorithm 1). It only orchestrates: the math is in harness.grpo.core and
regularizers/, the policies are snapshots in harness.snapshots.

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
     the one-batch gradient. A step whose rewards, logits, loss or gradient are not finite is skipped (no
     optimizer step), logged and counted; rl.max_nonfinite_steps in a row stop the run with a checkpoint;
  5. regularizer.after_step (adaptive controller), reference.after_step (EMA), old <- current every N steps
     (counted per epoch and re-synced at each epoch start, or over the whole run: rl.old_sync).
After every epoch (and every K steps if asked) the current policy decodes the validation prompts greedily,
exactly as the test does (the generation config); the score s_val (Eq. 10) updates the best-validation
snapshot (harness/grpo/selection.py), then the reference strategy may reset to it (VAPR). At the end the
policy chosen by rl.select (best_val or final), the same rule for every arm, is left in the model. Dropout is
off in every forward pass of the loop, so the ratio is exactly 1 when current = old.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from harness.config import RLConfig, TrainConfig
from harness.grpo.core import (
    aggregation_normalizer,
    aggregation_weights,
    group_advantages,
    policy_loss,
    response_mean,
    token_entropy,
    token_logprobs,
    zero_std_groups,
)
from harness.grpo.rollout import Rollout, concat_rollouts, response_logits, sample_rollout
from harness.grpo.selection import BestTracker
from harness.grpo.validation import ValidationCallback, ValidationEvent, validation_score
from harness.models.precision import base_dtype
from harness.parallel.distributed import Dist, shard
from harness.parallel.updater import Updater, needs_scaler
from harness.prompts import PromptSet  # noqa: F401 - the trainer's input type, importable from here too
from harness.runs.checkpoint_io import load_state
from harness.runs.records import RunDir
from harness.schedule import epoch_order, make_scheduler
from harness.snapshots import SnapshotStore
from regularizers.registry import reference_from_config, regularizer_from_config
from rewards.registry import compute_reward


class GRPOTrainer:
    def __init__(self, model, processor, rl: RLConfig, train_cfg: TrainConfig, run: RunDir, train: PromptSet,
                 val: PromptSet | None, *, seed: int, validate: Callable[[object], dict] | None = None,
                 progress: bool = True, dist: Dist | None = None, on_validation: Sequence[ValidationCallback] = ()):
        # on_validation: called with a ValidationEvent after every validation (on every process), e.g. by a
        # search that reports intermediate values; one may end the run by raising harness.errors.RunPruned.
        self.on_validation = tuple(on_validation)
        self.model, self.processor, self.rl, self.tcfg, self.run = model, processor, rl, train_cfg, run
        self.train_set, self.val_set, self.seed, self.progress = train, val, seed, progress
        self.dist = dist or Dist()
        if rl.prompts_per_step % self.dist.world:
            raise ValueError(f"rl.prompts_per_step = {rl.prompts_per_step} must be a multiple of the number of "
                             f"processes ({self.dist.world}): each process takes an equal share of the prompts")
        self.validate_fn = validate
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("no trainable parameters: call set_trainable(model, 'rl') first")
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
        self.weighter = None
        if rl.token_weighting != "none":
            from harness.grpo.token_weighter import TokenWeighter

            self.weighter = TokenWeighter(rl.token_weighting, processor.tokenizer, train.references,
                                          rl.token_weight_boost, rl.token_weight_max, rl.logprob_chunk_positions)
        self.best = BestTracker(include_start=rl.best_includes_start)
        # Steps of the epoch schedule; train.max_steps may cut it short. VAPR's "no reset after the last
        # validation" refers to the schedule, so a cut run resumed with a larger max_steps equals an uncut one.
        self.schedule_steps = total
        self.step = 0
        # Skipped (non-finite) steps: in a row, in total, and the message of the first of the current row.
        self.nonfinite = {"in_a_row": 0, "total": 0, "first": None}
        self.lp_temp = rl.logprob_temperature if rl.logprob_temperature is not None else rl.temperature

    # -- checkpoints ------------------------------------------------------------------------------------
    @property
    def ckpt_path(self) -> Path:
        return self.run.path / "checkpoint" / "rl_state.pt"

    def save_checkpoint(self) -> None:
        # The state is identical on every process and rank 0 writes it; but for ZeRO's optimizer partitions,
        # which every process writes beside it.
        optimizer = self.updater.optimizer_state(self.optimizer, self.ckpt_path.parent)
        if self.dist.main:
            self._write_checkpoint(optimizer)
        self.dist.barrier()

    def _write_checkpoint(self, optimizer: dict | None) -> None:
        path = self.ckpt_path
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {"step": self.step, "live": {n: p.detach().cpu() for n, p in
                                             zip(self.store.param_names(), self.store.parameters(), strict=True)},
                 "store": self.store.state_dict(), "optimizer": optimizer,
                 "scheduler": self.scheduler.state_dict(), "regularizer": self.regularizer.state_dict(),
                 "reference": self.reference.state_dict(), "best": self.best.state_dict(),
                 "nonfinite": dict(self.nonfinite), "engine": self.updater.state_dict()}
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        tmp.replace(path)

    def try_resume(self) -> bool:
        if not self.ckpt_path.is_file():
            return False
        state = load_state(self.ckpt_path)
        with torch.no_grad():
            for n, p in zip(self.store.param_names(), self.store.parameters(), strict=True):
                p.copy_(state["live"][n])
        self.store.load_state_dict(state["store"])
        self.updater.load_optimizer_state(self.optimizer, state["optimizer"], self.ckpt_path.parent)
        self.scheduler.load_state_dict(state["scheduler"])
        self.regularizer.load_state_dict(state["regularizer"])
        self.reference.load_state_dict(state["reference"])
        self.best.load_state_dict(state.get("best") or {})
        self.nonfinite = {**self.nonfinite, **(state.get("nonfinite") or {})}
        self.updater.load_state_dict(state.get("engine") or {})  # the fp16 loss scale
        self.step = int(state["step"])
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
        with self.store.use("old"):
            for s in range(0, len(idx), per):
                sub = idx[s:s + per]
                parts.append(sample_rollout(
                    self.model, self.processor, [self.train_set.images[i] for i in sub],
                    [self.train_set.instructions[i] for i in sub], group_size=rl.group_size,
                    temperature=rl.temperature, top_p=rl.top_p, top_k=rl.top_k, max_new_tokens=rl.max_new_tokens,
                    min_new_tokens=rl.min_new_tokens, repetition_penalty=rl.repetition_penalty,
                    backend=getattr(self, "generation_backend", "hf")))
        return concat_rollouts(parts, self.processor.tokenizer.pad_token_id)

    def _chunks(self, n: int) -> list[tuple[int, int]]:
        """Row ranges of the micro-batches of an n-response step."""
        size = self.rl.micro_batch_size or max(n, 1)
        return [(a, min(a + size, n)) for a in range(0, n, size)] or [(0, 0)]

    @torch.no_grad()
    def _frozen_logprobs(self, logits: torch.Tensor, ro: Rollout, want_entropy: bool):
        """Log-probs (and entropies) of the responses from a frozen policy's logits, without grad."""
        chunk = self.rl.logprob_chunk_positions
        logp = token_logprobs(logits, ro.responses, self.lp_temp, chunk)
        ent = token_entropy(logits, self.lp_temp, chunk) if want_entropy else None
        return logp, ent

    @torch.no_grad()
    def _frozen_pass(self, name: str | None, ro: Rollout, chunks, want_entropy: bool):
        """[N, L] log-probs (and entropies) of the responses under snapshot `name` (None: the live parameters,
        no swap), micro-batch by micro-batch. Called before the policy's own forward: swapping a snapshot in
        writes the live parameters, which no live graph may have saved."""
        logps, ents = [], []
        with self.store.use(name) if name else contextlib.nullcontext():
            for a, b in chunks:
                sub = ro.rows(a, b)
                lp, ent = self._frozen_logprobs(response_logits(self.model, sub), sub, want_entropy)
                logps.append(lp)
                ents.append(ent)
        return torch.cat(logps), (torch.cat(ents) if want_entropy else None)

    def _reward_problem(self, raw: np.ndarray, adv: torch.Tensor) -> str | None:
        """Why the rewards cannot train (None when they can): the message names the reward."""
        name = self.rl.reward
        bad = ~np.isfinite(raw) | (np.abs(raw) > np.finfo(np.float32).max)
        if bad.any():
            return (f"reward {name!r} returned {int(bad.sum())} value(s) that are not finite in float32 (e.g. "
                    f"{float(raw[bad][0])!r}); rewards must be finite numbers of moderate size")
        if not bool(torch.isfinite(adv).all()):
            return (f"reward {name!r} gave non-finite advantages (Eq. 2; rewards from {raw.min():.3g} to "
                    f"{raw.max():.3g}): rewards too large for the group mean and std in float32")
        return None

    def train_step(self) -> dict:
        rl, G = self.rl, self.rl.group_size
        t0 = time.time()
        idx = shard(self._batch_indices(self.step), self.dist)  # this process's prompts
        B = len(idx)
        self.model.eval()  # dropout off everywhere in the loop (see module docstring)
        ro = self._rollout(idx)
        refs = [self.train_set.references[i] for i in idx for _ in range(G)]
        raw = np.asarray(compute_reward(rl.reward, ro.texts, refs), dtype=np.float64)
        # Rewards (and so advantages and betas) on the model's device, beside the log-probs they weigh.
        rewards = torch.tensor(raw, dtype=torch.float32, device=ro.response_mask.device).view(B, G)
        adv = group_advantages(rewards, scale=rl.advantage_scale)
        zero_std = zero_std_groups(rewards)
        mask = ro.response_mask.float()
        if rl.zero_std_groups == "drop":
            mask = mask * (~zero_std).repeat_interleave(G).float().unsqueeze(1)
        want_ent = rl.entropy_coef != 0
        needs_ref = self.regularizer.needs_reference
        needs_h = needs_ref and self.regularizer.needs_reference_entropy
        chunks = self._chunks(B * G)
        whole = len(chunks) == 1
        # Frozen passes first (see _frozen_pass). A snapshot equal to the live parameters (old right after a
        # sync, ref right after a reset) needs no pass of its own: the current pass's logits are the same
        # numbers. Except for the reference entropies over several micro-batches: the betas need them for the
        # whole step before the first backward, so they come from a no-grad pass of the live parameters.
        frozen = {}
        for name in ["old"] + (["ref"] if needs_ref else []):
            ent_here = name == "ref" and needs_h
            if not self.store.equal_to_live(name):
                frozen[name] = self._frozen_pass(name, ro, chunks, ent_here)
            elif ent_here and not whole:
                frozen[name] = self._frozen_pass(None, ro, chunks, True)
        token_w = None
        if self.weighter is not None:
            # DiTPO: A[i, t] = w[i, t] * A[i]; the gradient weighter looks through the old policy (row by row).
            with self.store.use("old"):
                token_w = torch.cat([self.weighter.weights(self.model, ro.rows(a, b)) for a, b in chunks])
        advantages = adv.reshape(-1)
        if token_w is not None:
            advantages = advantages.unsqueeze(1) * token_w.to(advantages.device)
        agg = {"group_size": G, "max_len": rl.max_new_tokens}
        loss_kw = dict(eps_low=rl.eps_low, eps_high=rl.eps_high, dual_clip=rl.dual_clip,
                       kl_estimator=rl.kl_estimator, aggregation=rl.aggregation, entropy_coef=rl.entropy_coef, **agg)
        weights = None if whole else aggregation_weights(mask, rl.aggregation, **agg)
        # Data parallel: scale to this process's share of the global normaliser; the mean of the scaled losses
        # (and of their gradients, averaged below) is then the loss of the whole batch in one process.
        scale = self.dist.loss_scale(aggregation_normalizer(mask, rl.aggregation, **agg)) if self.dist.active else 1.0
        h_ref_tok = frozen["ref"][1] if "ref" in frozen else None
        beta = None

        def betas(h_tok):
            h = response_mean(h_tok, ro.response_mask.float()).view(B, G) if h_tok is not None else None
            return self.regularizer.betas(adv, h).reshape(-1)

        if not needs_h or h_ref_tok is not None:
            beta = betas(h_ref_tok)
        cause = self._reward_problem(raw, adv)
        for name, (lp, ent_f) in frozen.items():
            if cause is None and not (torch.isfinite(lp).all() and (ent_f is None or torch.isfinite(ent_f).all())):
                cause = f"logits of the {name} policy are not finite"
        self.optimizer.zero_grad(set_to_none=True)
        kept, stats = [], {}
        for a, b in chunks if cause is None else []:
            sub = ro.rows(a, b)
            with self.updater.no_sync():  # gradients averaged once per step (updater.sync, below)
                logits = self.updater.forward(response_logits, sub)
            logp = token_logprobs(logits, sub.responses, self.lp_temp, rl.logprob_chunk_positions)
            ent = token_entropy(logits, self.lp_temp, rl.logprob_chunk_positions, requires_grad=want_ent)
            del logits
            if not (torch.isfinite(logp).all() and torch.isfinite(ent).all()):
                cause = "logits of the current policy are not finite"
                break
            lp_old = frozen["old"][0][a:b] if "old" in frozen else logp.detach()
            lp_ref = None
            if needs_ref:
                lp_ref = frozen["ref"][0][a:b] if "ref" in frozen else logp.detach()
                if beta is None:  # one micro-batch, ref == current: its entropies are this pass's (detached)
                    h_ref_tok = ent.detach()
                    beta = betas(h_ref_tok)
            loss, stats = policy_loss(logp, lp_old, lp_ref, advantages[a:b], beta[a:b], mask[a:b], entropy=ent,
                                      token_weights=None if whole else weights[a:b], **loss_kw)
            if not torch.isfinite(loss):
                cause = f"the loss is {float(loss.detach())} although rewards and logits are finite"
                break
            with self.updater.no_sync():
                self.updater.backward(loss * scale if self.dist.active else loss)
            kept.append((logp.detach(), lp_old, lp_ref, ent.detach()))
        if cause is None and not whole:  # the step's statistics, exactly as one batch would give them
            cat = [torch.cat(parts) if parts[0] is not None else None for parts in zip(*kept, strict=True)]
            with torch.no_grad():
                _, stats = policy_loss(cat[0], cat[1], cat[2], advantages, beta, mask, entropy=cat[3], **loss_kw)
        self.updater.sync()  # every process, also one that stopped early: DDP's all-reduce
        gnorm = None
        scaler_skip = False
        if cause is None and not self.updater.deepspeed:  # DeepSpeed checks and clips in its step (below)
            self.updater.unscale_(self.optimizer)
            grads = [p.grad for p in self.params if p.grad is not None]
            if grads and not bool(torch.stack([torch.isfinite(g).all() for g in grads]).all()):
                if self.updater.scaler is not None:  # fp16 overflow: the scaler skips the step, lowers the scale
                    scaler_skip = True
                else:
                    cause = "the gradient is not finite although the loss is"
            elif self.tcfg.grad_clip > 0:
                gnorm = torch.nn.utils.clip_grad_norm_(self.params, self.tcfg.grad_clip)
                if not torch.isfinite(gnorm):
                    cause = f"the gradient norm is {float(gnorm)}"
        # Every process skips or steps alike: a step is skipped when any process found a problem.
        skip = float(self.dist.sum(torch.tensor([float(cause is not None)]))[0]) > 0
        n_tokens = float(mask.sum())
        lr = self.optimizer.param_groups[0]["lr"]
        stepped = False
        if skip:
            self.optimizer.zero_grad(set_to_none=True)
            self.updater.skip()
            stats = self._count_nonfinite(cause)
        else:
            if self.dist.active:
                stats = self.dist.reduce_stats(stats, n_tokens)
            stepped = self.updater.step(self.optimizer)
            if self.updater.deepspeed:
                gnorm = self.updater.grad_norm()
                if not stepped:  # DeepSpeed found the gradient not finite and did not step
                    skip = True
                    stats = self._count_nonfinite("the gradient is not finite although the loss is")
            elif scaler_skip and self.updater.loss_scale < 1.0:
                # Overflow at a loss scale below 1 is no fp16 range problem (the unscaled gradient is not finite
                # either): counted, so that rl.max_nonfinite_steps stops a run the scaler cannot rescue.
                skip = True
                stats = self._count_nonfinite(f"the gradient is not finite at loss scale {self.updater.loss_scale}")
            if not (scaler_skip or skip):
                self.nonfinite["in_a_row"], self.nonfinite["first"] = 0, None
            if self.updater.scaler is not None:  # an overflow the scaler skips is not counted as non-finite (above)
                stats = {**stats, "scaler_skipped": not stepped, "loss_scale": self.updater.loss_scale}
        with warnings.catch_warnings():
            # A skipped step still advances the schedule (the lr is a function of the step number); torch warns
            # when that happens before any optimizer step.
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
            self.scheduler.step()
        self.step += 1
        if stepped:  # once per optimizer step taken (not after a skipped one, also not one the fp16 scaler skipped)
            self.regularizer.after_step(stats.get("kl_mean"), B * G * self.dist.world)
        events = dict(self.reference.after_step(self.store, self.step) or {})
        if self._old_sync_due():
            self.store.capture("old")
            events["old_synced"] = True
        all_rewards = self.dist.gather(rewards)  # [B * world, G]: the step's whole batch
        all_zero_std = self.dist.gather(zero_std.float())
        all_lengths = self.dist.gather(ro.lengths.float())
        ref_entropy = None
        if h_ref_tok is not None and not skip:
            ref_entropy = float(self.dist.gather(response_mean(h_ref_tok, ro.response_mask.float())).mean())
        row = {
            "step": self.step, "epoch": self.step / self.steps_per_epoch,
            "reward_mean": float(all_rewards.mean()), "reward_std": float(all_rewards.std(unbiased=False)),
            "reward_min": float(all_rewards.min()), "reward_max": float(all_rewards.max()),
            "frac_reward_zero_std": float(all_zero_std.float().mean()),
            "ref_entropy_mean": ref_entropy,
            "response_length": float(all_lengths.mean()), "lr": lr,
            "grad_norm": float(gnorm) if gnorm is not None else None, "step_time": time.time() - t0,
            **stats, **self.regularizer.log_stats(), **self.reference.log_stats(), **events,
        }
        if token_w is not None and not skip:
            sel = token_w[ro.response_mask.bool()]
            row.update(token_weight_max=float(sel.max()), token_weight_std=float(sel.std()))
        if skip:
            row = {k: v if not isinstance(v, float) or math.isfinite(v) else None for k, v in row.items()}
        self.run.log_step(row)
        if rl.samples_every and self.step % rl.samples_every == 0:
            self.run.log_samples({
                "step": self.step, "ids": [self.train_set.ids[i] for i in idx],
                "candidates": ro.texts, "rewards": rewards.tolist(), "advantages": adv.tolist(),
                "betas": beta.view(B, G).tolist() if beta is not None else None,
            })
        return row

    def _count_nonfinite(self, cause: str | None) -> dict:
        """Count a skipped step; its log fields (the cause from the first process that found one)."""
        causes = [c for c in self.dist.gather_objects(cause) if c]
        message = f"step {self.step + 1}: {causes[0]}"
        nf = self.nonfinite
        nf["in_a_row"] += 1
        nf["total"] += 1
        if nf["in_a_row"] == 1:
            nf["first"] = message
        if self.dist.main:
            print(f"[rl] skipped {message} (no optimizer step; {nf['in_a_row']} in a row)", file=sys.stderr)
        return {"skipped": True, "nonfinite_cause": causes[0], "nonfinite_in_a_row": nf["in_a_row"],
                "nonfinite_total": nf["total"]}

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
        scores = self.validate_fn(self.model)
        score = validation_score(scores, self.rl.val_score, self.rl.val_lambda, scores.get("rg"))
        improved = self.best.observe(self.store, score, self.step, epoch, candidate=candidate)
        final = self.step >= self.schedule_steps
        event = self.reference.after_validation(self.store, self.updater.reset_view(self.optimizer), epoch, self.step,
                                                end_of_epoch=end_of_epoch, final=final)
        row = {"step": self.step, "epoch": epoch, "split": "val", "val_score": score, "end_of_epoch": end_of_epoch,
               "candidate": candidate and (self.step > 0 or self.best.include_start), "improved": improved,
               **self.best.log_stats(), **scores, **(event or {})}
        self.run.log_eval(row)
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
        while self.step < self.total_steps:
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
            if too_many:
                raise FloatingPointError(
                    f"{self.nonfinite['in_a_row']} RL steps in a row were not finite and skipped (rl.max_nonfinite_"
                    f"steps = {self.rl.max_nonfinite_steps}); the first: {self.nonfinite['first']}. The run stopped "
                    f"at step {self.step} with a checkpoint in {self.ckpt_path.parent}: rerun to resume")
        bar.close()
        selected = self.select_policy()
        steps = self.run.steps()
        rewards = [s["reward_mean"] for s in steps if s.get("reward_mean") is not None]  # None: skipped step
        return {"steps": self.step, "wall_time_s": time.time() - t_start,
                "reward_first": rewards[0] if rewards else None, "reward_last": rewards[-1] if rewards else None,
                "reward_mean_last_10": float(np.mean(rewards[-10:])) if rewards else None, **selected}

    def select_policy(self) -> dict:
        """Leave the policy that rl.select names in the model and say where it came from. best_val without any
        candidate validation (no validation set, or a run cut before its first epoch end) keeps the final policy
        and says so."""
        evals = [e for e in self.run.evals() if e.get("split") == "val"]
        final_score = evals[-1]["val_score"] if evals and evals[-1].get("step") == self.step else None
        if self.rl.select == "best_val" and "best" in self.store:
            self.store.restore("best")
            return {"select": "best_val", "selected_step": self.best.step, "selected_epoch": self.best.epoch,
                    "selected_score": self.best.score, "final_step": self.step, "final_score": final_score}
        why = "final" if self.rl.select == "final" else "final (no candidate validation for best_val)"
        return {"select": why, "selected_step": self.step, "selected_epoch": self.step / self.steps_per_epoch,
                "selected_score": final_score, "final_step": self.step, "final_score": final_score}
