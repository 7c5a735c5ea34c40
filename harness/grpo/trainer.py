"""The GRPO / REVA-PO loop (Algorithm 1). It only orchestrates: the math is in harness.grpo.core and
regularizers/, the policies are snapshots in harness.snapshots.

Per optimizer step:
  1. take B prompts; sample G candidates each from the OLD policy (swapped in);
  2. score them with the reward; A = group-normalised rewards (Eq. 2);
  3. log-probs of the candidates under the CURRENT policy (with grad), under OLD and, if the regularizer needs
     it, REFERENCE (+ its entropy for RER), the last two without grad through the same logits path; a frozen
     policy whose parameters equal the current ones (old right after a sync, ref right after a reset) takes the
     current pass's values detached instead of a second forward pass;
  4. beta[B, G] from the regularizer; loss from policy_loss (Eq. 3-6); one AdamW step on the current policy;
  5. regularizer.after_step (adaptive controller), reference.after_step (EMA), old <- current every N steps
     (counted per epoch and re-synced at each epoch start, or over the whole run: rl.old_sync).
After every epoch (and every K steps if asked) the current policy decodes the validation prompts greedily,
exactly as the test does (the generation config); the score s_val (Eq. 10) updates the best-validation
snapshot (harness/grpo/selection.py), then the reference strategy may reset to it (VAPR). At the end the
policy chosen by rl.select (best_val or final), the same rule for every arm, is left in the model. Dropout is
off in every forward pass of the loop, so the ratio is exactly 1 when current = old.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from harness.checkpoint_io import load_state
from harness.config import RLConfig, TrainConfig
from harness.distributed import Dist, shard
from harness.grpo.core import (
    aggregation_normalizer,
    group_advantages,
    policy_loss,
    response_mean,
    token_entropy,
    token_logprobs,
    zero_std_groups,
)
from harness.grpo.rollout import Rollout, response_logits, sample_rollout
from harness.grpo.selection import BestTracker
from harness.grpo.validation import validation_score
from harness.records import RunDir
from harness.schedule import epoch_order, make_scheduler
from harness.snapshots import SnapshotStore
from regularizers.registry import reference_from_config, regularizer_from_config
from rewards.registry import compute_reward

# Called as hook(step, val_score) after every validation (on every process), e.g. by an Optuna search that
# reports intermediate values and may stop the run by raising (optuna.TrialPruned). Add and remove hooks
# around a run; they are process-wide.
VALIDATION_HOOKS: list[Callable[[int, float], None]] = []


@dataclass
class PromptSet:
    ids: list[str]
    images: list  # per sample: list of PIL views
    instructions: list[str]
    references: list[str]

    def __len__(self) -> int:
        return len(self.ids)


class GRPOTrainer:
    def __init__(self, model, processor, rl: RLConfig, train_cfg: TrainConfig, run: RunDir, train: PromptSet,
                 val: PromptSet | None, *, seed: int, validate: Callable[[object], dict] | None = None,
                 progress: bool = True, dist: Dist | None = None):
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
        self.dist.broadcast_parameters(self.params)  # every process starts from rank 0's values
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
        self.scheduler = make_scheduler(self.optimizer, train_cfg, self.total_steps)
        self.weighter = None
        if rl.token_weighting != "none":
            from harness.grpo.token_weighting import TokenWeighter

            self.weighter = TokenWeighter(rl.token_weighting, processor.tokenizer, train.references,
                                          rl.token_weight_boost, rl.token_weight_max, rl.logprob_chunk_positions)
        self.best = BestTracker(include_start=rl.best_includes_start)
        # Steps of the epoch schedule; train.max_steps may cut it short. VAPR's "no reset after the last
        # validation" refers to the schedule, so a cut run resumed with a larger max_steps equals an uncut one.
        self.schedule_steps = total
        self.step = 0
        self.lp_temp = rl.logprob_temperature if rl.logprob_temperature is not None else rl.temperature

    # -- checkpoints ------------------------------------------------------------------------------------
    @property
    def ckpt_path(self) -> Path:
        return self.run.path / "checkpoint" / "rl_state.pt"

    def save_checkpoint(self) -> None:
        if self.dist.main:  # the state is identical on every process; rank 0 writes it
            self._write_checkpoint()
        self.dist.barrier()

    def _write_checkpoint(self) -> None:
        path = self.ckpt_path
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {"step": self.step, "live": {n: p.detach().cpu() for n, p in
                                             zip(self.store.param_names(), self.store.parameters(), strict=True)},
                 "store": self.store.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(), "regularizer": self.regularizer.state_dict(),
                 "reference": self.reference.state_dict(), "best": self.best.state_dict()}
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
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.regularizer.load_state_dict(state["regularizer"])
        self.reference.load_state_dict(state["reference"])
        self.best.load_state_dict(state.get("best") or {})
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
        with self.store.use("old"):
            return sample_rollout(self.model, self.processor, [self.train_set.images[i] for i in idx],
                                  [self.train_set.instructions[i] for i in idx], group_size=rl.group_size,
                                  temperature=rl.temperature, top_p=rl.top_p, top_k=rl.top_k,
                                  max_new_tokens=rl.max_new_tokens, min_new_tokens=rl.min_new_tokens,
                                  repetition_penalty=rl.repetition_penalty,
                                  backend=getattr(self, "generation_backend", "hf"))

    @torch.no_grad()
    def _frozen_logprobs(self, logits: torch.Tensor, ro: Rollout, want_entropy: bool):
        """Log-probs (and entropies) of the responses from a frozen policy's logits, without grad."""
        chunk = self.rl.logprob_chunk_positions
        logp = token_logprobs(logits, ro.responses, self.lp_temp, chunk)
        ent = token_entropy(logits, self.lp_temp, chunk) if want_entropy else None
        return logp, ent

    @torch.no_grad()
    def _snapshot_logits(self, name: str, ro: Rollout) -> torch.Tensor:
        with self.store.use(name):
            return response_logits(self.model, ro)

    def train_step(self) -> dict:
        rl, G = self.rl, self.rl.group_size
        t0 = time.time()
        idx = shard(self._batch_indices(self.step), self.dist)  # this process's prompts
        B = len(idx)
        self.model.eval()  # dropout off everywhere in the loop (see module docstring)
        ro = self._rollout(idx)
        refs = [self.train_set.references[i] for i in idx for _ in range(G)]
        # Rewards (and so advantages and betas) on the model's device, beside the log-probs they weigh.
        rewards = torch.tensor(compute_reward(rl.reward, ro.texts, refs), dtype=torch.float32,
                               device=ro.response_mask.device).view(B, G)
        adv = group_advantages(rewards, scale=rl.advantage_scale)
        zero_std = zero_std_groups(rewards)
        mask = ro.response_mask.float()
        if rl.zero_std_groups == "drop":
            mask = mask * (~zero_std).repeat_interleave(G).float().unsqueeze(1)
        want_ent = rl.entropy_coef != 0
        # Frozen passes first: swapping a snapshot in writes the live parameters, which the current pass's graph
        # must not see change. A snapshot equal to the live parameters (old right after a sync, ref right after
        # a reset) needs no pass of its own: the current pass's logits are the same numbers.
        frozen = ["old"] + (["ref"] if self.regularizer.needs_reference else [])
        own = {name: self._snapshot_logits(name, ro) for name in frozen if not self.store.equal_to_live(name)}
        token_w = None
        if self.weighter is not None:
            # DiTPO: A[i, t] = w[i, t] * A[i]; the gradient weighter looks through the old policy.
            with self.store.use("old"):
                token_w = self.weighter.weights(self.model, ro)
        logits = response_logits(self.model, ro)
        logp = token_logprobs(logits, ro.responses, self.lp_temp, rl.logprob_chunk_positions)
        ent = token_entropy(logits, self.lp_temp, rl.logprob_chunk_positions, requires_grad=want_ent)
        logp_old, _ = self._frozen_logprobs(own.get("old", logits.detach()), ro, False)
        logp_ref, h_ref_tok = None, None
        if self.regularizer.needs_reference:
            logp_ref, h_ref_tok = self._frozen_logprobs(own.get("ref", logits.detach()), ro,
                                                        self.regularizer.needs_reference_entropy)
        del own
        h_ref = response_mean(h_ref_tok, ro.response_mask.float()).view(B, G) if h_ref_tok is not None else None
        beta = self.regularizer.betas(adv, h_ref).reshape(-1)
        advantages = adv.reshape(-1)
        if token_w is not None:
            advantages = advantages.unsqueeze(1) * token_w.to(advantages.device)
        agg = {"group_size": G, "max_len": rl.max_new_tokens}
        loss, stats = policy_loss(logp, logp_old, logp_ref, advantages, beta, mask, eps_low=rl.eps_low,
                                  eps_high=rl.eps_high, dual_clip=rl.dual_clip, kl_estimator=rl.kl_estimator,
                                  aggregation=rl.aggregation, entropy=ent, entropy_coef=rl.entropy_coef, **agg)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"RL loss is {float(loss)} at step {self.step}")
        n_tokens = float(mask.sum())
        if self.dist.active:
            # Scale to this process's share of the global normaliser: the mean of the scaled losses (and of
            # their gradients, averaged below) is then the loss of the whole batch in one process.
            loss = loss * self.dist.loss_scale(aggregation_normalizer(mask, rl.aggregation, **agg))
            stats = self.dist.reduce_stats(stats, n_tokens)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.dist.average_gradients(self.params)
        gnorm = torch.nn.utils.clip_grad_norm_(self.params, self.tcfg.grad_clip) if self.tcfg.grad_clip > 0 else None
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        self.regularizer.after_step(stats.get("kl_mean"), B * G * self.dist.world)
        events = dict(self.reference.after_step(self.store, self.step) or {})
        if self._old_sync_due():
            self.store.capture("old")
            events["old_synced"] = True
        all_rewards = self.dist.gather(rewards)  # [B * world, G]: the step's whole batch
        all_zero_std = self.dist.gather(zero_std.float())
        all_lengths = self.dist.gather(ro.lengths.float())
        ref_entropy = None
        if h_ref_tok is not None:
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
        if token_w is not None:
            sel = token_w[ro.response_mask.bool()]
            row.update(token_weight_max=float(sel.max()), token_weight_std=float(sel.std()))
        self.run.log_step(row)
        if rl.samples_every and self.step % rl.samples_every == 0:
            self.run.log_samples({
                "step": self.step, "ids": [self.train_set.ids[i] for i in idx],
                "candidates": ro.texts, "rewards": rewards.tolist(), "advantages": adv.tolist(),
                "betas": beta.view(B, G).tolist(),
            })
        return row

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
        event = self.reference.after_validation(self.store, self.optimizer, epoch, self.step,
                                                end_of_epoch=end_of_epoch, final=final)
        row = {"step": self.step, "epoch": epoch, "split": "val", "val_score": score, "end_of_epoch": end_of_epoch,
               "candidate": candidate and (self.step > 0 or self.best.include_start), "improved": improved,
               **self.best.log_stats(), **scores, **(event or {})}
        self.run.log_eval(row)
        for hook in list(VALIDATION_HOOKS):
            hook(self.step, score)
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
            bar.set_postfix(reward=f"{last['reward_mean']:.3f}", kl="n/a" if kl is None else f"{kl:.4f}")
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
            if validated or (self.tcfg.checkpoint_every and self.step % self.tcfg.checkpoint_every == 0) \
                    or self.step == self.total_steps:
                self.save_checkpoint()
        bar.close()
        selected = self.select_policy()
        steps = self.run.steps()
        rewards = [s["reward_mean"] for s in steps]
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
