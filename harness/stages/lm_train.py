"""The supervised loop shared by stage 0 (pretrain), stage 1 (warm-up) and stage 2 (classifier-guided SFT).

Loss: Eq. 1 (token mean of report NLL). AdamW over the parameters that `set_trainable` left trainable;
learning-rate schedule per config; gradient clipping; one line per optimizer step in steps.jsonl; validation
loss after every epoch in evals.jsonl. A checkpoint (trainable tensors, optimizer, scheduler, step) is written
every `checkpoint_every` steps and at the end; a rerun of the same command resumes from it. Batch order is a
pure function of (seed, epoch), so a resumed run sees exactly the batches an uninterrupted one would. A stop signal
(harness/runs/preemption.py) ends the loop after the current step with a checkpoint and `Preempted`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from tqdm.auto import tqdm

from harness.config import TrainConfig
from harness.models.precision import base_dtype
from harness.models.trainable import unwrap
from harness.parallel.distributed import Dist, shard
from harness.parallel.updater import Updater, needs_scaler
from harness.prompting.batching import IGNORE, encode_sft
from harness.runs import preemption
from harness.runs.records import RunDir
from harness.stages.lm_batches import StepBatches, sample_lengths, step_loader
from harness.stages.lm_loss import lm_loss
from harness.training.checkpoints import load_latest, save_generation
from harness.training.schedule import make_scheduler


@dataclass
class LMData:
    images: list  # per sample: list of PIL views
    instructions: list[str]
    reports: list[str]

    def __len__(self) -> int:
        return len(self.reports)

    def take(self, idx: Sequence[int]) -> LMData:
        return LMData([self.images[i] for i in idx], [self.instructions[i] for i in idx],
                      [self.reports[i] for i in idx])


def param_groups(model, cfg: TrainConfig) -> list[dict]:
    """Trainable parameters, with the vision tower (incl. merger) at `vision_lr_mult` x the base lr."""
    vision, rest = [], []
    for name, p in unwrap(model).named_parameters():
        if p.requires_grad:
            (vision if name.startswith("model.visual.") else rest).append(p)
    groups = [{"params": rest, "lr": cfg.lr}] if rest else []
    if vision:
        groups.append({"params": vision, "lr": cfg.lr * cfg.vision_lr_mult})
    return groups


def _ckpt_path(run: RunDir) -> Path:
    return run.path / "checkpoint" / "state.pt"


class StageState(Protocol):
    """What a stage keeps beside the trainable tensors in each checkpoint (e.g. harness/stages/handoff.py's best
    epoch), so that a resumed run continues with it."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def save_checkpoint(run: RunDir, model, optimizer, scheduler, step: int, dist: Dist | None = None,
                    updater: Updater | None = None, extra: StageState | None = None) -> None:
    """Rank 0 writes (the trainable state is the same on every process); the others wait for it. Under
    DeepSpeed every process also writes its ZeRO optimizer partition beside it (`updater`). A new checkpoint
    generation (harness/training/checkpoints.py): written into checkpoint.new/, sealed, then rotated in."""

    def partition(staging: Path) -> dict | None:
        return updater.optimizer_state(optimizer, staging) if updater else optimizer.state_dict()

    def build(opt_state: dict | None) -> dict:
        return _checkpoint_state(model, opt_state, scheduler, step, updater.state_dict() if updater else {},
                                 extra.state_dict() if extra is not None else None)

    # the lines this checkpoint covers are on disk before it is (before_seal)
    save_generation(_ckpt_path(run), step, build, partition=partition, dist=dist or Dist(), before_seal=run.sync_logs)


def _checkpoint_state(model, opt_state: dict | None, scheduler, step: int, engine_state: dict,
                      extra_state: dict | None = None) -> dict:
    params = {n: p.detach().cpu() for n, p in unwrap(model).named_parameters() if p.requires_grad}
    # The RNG state too, so that dropout (LoRA's, in stage 2) continues as in an uninterrupted run; the updater's
    # state is the fp16 loss scale (GradScaler), so that a resumed fp16 run scales as an uninterrupted one.
    state = {"params": params, "optimizer": opt_state, "scheduler": scheduler.state_dict(),
             "step": step, "torch_rng": torch.get_rng_state(), "engine": engine_state}
    if extra_state is not None:
        state["stage"] = extra_state
    return state


def load_checkpoint(run: RunDir, model, optimizer, scheduler, updater: Updater | None = None,
                    extra: StageState | None = None) -> int:
    """The step of the newest verified checkpoint generation, loaded into the objects (0 when there is none)."""
    main = updater is None or updater.dist.main
    found = load_latest(_ckpt_path(run), log=print if main else None)
    if found is None:
        return 0
    folder, state = found
    path = folder / _ckpt_path(run).name
    params = dict(unwrap(model).named_parameters())
    with torch.no_grad():
        for n, v in state["params"].items():
            if n not in params:
                raise ValueError(f"{path}: parameter '{n}' not in the model; was the config changed?")
            params[n].copy_(v)
    if updater is not None:
        updater.load_optimizer_state(optimizer, state["optimizer"], folder)
        updater.load_state_dict(state.get("engine") or {})
    else:
        optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if "torch_rng" in state:
        torch.set_rng_state(state["torch_rng"])
    if extra is not None:
        extra.load_state_dict(state.get("stage") or {})
    return int(state["step"])


@torch.no_grad()
def eval_loss(model, processor, data: LMData, batch_size: int, max_report_tokens: int | None,
              dist: Dist | None = None) -> float:
    """Token-mean LM loss over `data` (data-parallel: each process takes its share, the sums are combined)."""
    dist = dist or Dist()
    mine = shard(list(range(len(data))), dist)
    device = next(model.parameters()).device
    was = model.training
    model.eval()
    total, count = 0.0, 0
    for s in range(0, len(mine), batch_size):
        part = data.take(mine[s:s + batch_size])
        batch = encode_sft(processor, part.images, part.instructions, part.reports, max_report_tokens)
        loss, n = lm_loss(model, {k: v.to(device) for k, v in batch.items()})
        total += float(loss) * n
        count += n
    model.train(was)
    total, count = dist.sum(torch.tensor([total, float(count)])).tolist()
    return total / max(1.0, count)


def _accumulate(model, processor, part: LMData, micro: int, max_report_tokens: int | None, device, dist: Dist,
                where: str) -> tuple[torch.Tensor, int]:
    """Backward of the token-mean loss of `part` in micro-batches of `micro` samples: each micro-batch's
    token mean is weighted by its share of the report tokens, so the summed gradient is that of one pass.
    `model`: the stage's Updater (or a bare model: one process, plain backward). Returns (the token-mean loss,
    report tokens)."""
    trainable = [p for p in model.parameters() if p.requires_grad] if not isinstance(model, Updater) else []
    updater = model if isinstance(model, Updater) else Updater(model, trainable)
    parts = [part.take(range(s, min(s + micro, len(part)))) for s in range(0, len(part), micro)]
    # Encoded up front (token ids and pixels, small next to activations): the weights need the total count.
    batches = [encode_sft(processor, p.images, p.instructions, p.reports, max_report_tokens) for p in parts]
    return _backward(updater, batches, device, dist, where)


def _backward(updater: Updater, batches: list[dict], device, dist: Dist, where: str) -> tuple[torch.Tensor, int]:
    """_accumulate's backward over micro-batches already encoded (by the step loader, lm_batches.py), through the
    stage's Updater (plain backward in one process, DDP / DeepSpeed under a launch)."""
    total = sum(int((b["labels"][:, 1:] != IGNORE).sum()) for b in batches)
    scale = dist.loss_scale(torch.tensor(float(total)))
    loss_sum = torch.zeros(())
    for batch in batches:
        with updater.no_sync():  # the gradients are averaged once, after the step's last micro-batch (sync)
            loss, n = updater.forward(lm_loss, {k: v.to(device, non_blocking=True) for k, v in batch.items()})
            if not torch.isfinite(loss):
                raise FloatingPointError(f"{where}: loss is {float(loss)}; lower train.lr?")
            updater.backward(loss * (n / max(total, 1)) * scale)
        loss_sum += loss.detach().cpu() * n
    if len(batches) == 1:
        return loss.detach(), total  # as logged before micro-batches existed, to the last bit
    return loss_sum / max(total, 1), total


def train_lm(model, processor, train: LMData, val: LMData | None, cfg: TrainConfig, run: RunDir, *,
             seed: int, max_report_tokens: int | None, desc: str = "train",
             on_epoch_end: Callable[[int, int], dict] | None = None, progress: bool = True,
             dist: Dist | None = None, extra_state: StageState | None = None) -> dict:
    """Train the currently trainable parameters; returns final metrics (losses, steps, wall time).

    Data-parallel under a torchrun / accelerate launch (`dist`, harness/parallel/distributed.py): each process takes
    its share of every batch, its loss is scaled by its share of the batch's report tokens and the gradients
    are averaged, so each step is the step one process would take on the whole batch. `extra_state`: what the
    stage keeps in each checkpoint besides the tensors (StageState)."""
    dist = dist or Dist()
    if len(train) == 0:
        raise ValueError("training set is empty")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("no trainable parameters: call set_trainable first")
    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    total = math.ceil(cfg.epochs * steps_per_epoch)
    if cfg.max_steps is not None:
        total = min(total, cfg.max_steps)
    optimizer = torch.optim.AdamW(param_groups(model, cfg), lr=cfg.lr, weight_decay=cfg.weight_decay)
    scheduler = make_scheduler(optimizer, cfg, total)
    # DDP under a launch (it starts every process from rank 0's values), or DeepSpeed ZeRO (train.deepspeed);
    # fp16 bases get a loss scale.
    updater = Updater(model, params, dist, fp16_scaler=needs_scaler(base_dtype(model)))
    updater.attach(optimizer)
    step = load_checkpoint(run, model, optimizer, scheduler, updater, extra_state)
    run.truncate_logs_after(step)  # step 0 (no checkpoint): no row of an earlier try is kept
    device = next(model.parameters()).device
    # Steps step..total-1, each this process's encoded micro-batches, decoded by train.num_workers workers.
    lengths = sample_lengths(processor, train, max_report_tokens) if cfg.group_by_length else None
    loader = iter(step_loader(StepBatches(train, processor, batch_size=cfg.batch_size,
                                          micro_batch_size=cfg.micro_batch_size, seed=seed, first_step=step,
                                          total_steps=total, steps_per_epoch=steps_per_epoch,
                                          max_report_tokens=max_report_tokens, dist=dist, lengths=lengths),
                              cfg.num_workers, device, seed))
    model.train()
    t_start = time.time()
    last_loss = float("nan")
    bar = tqdm(total=total, initial=step, desc=desc, disable=not progress, leave=False)
    saved_at = step  # the step of the checkpoint on disk (or 0)
    while step < total:
        if preemption.stop_agreed(dist):  # a stop signal: the step before this one is done and logged
            if saved_at != step:
                save_checkpoint(run, model, optimizer, scheduler, step, dist, updater, extra_state)
            raise preemption.stop(run.path, desc, step, _ckpt_path(run), main=dist.main)
        epoch = step // steps_per_epoch
        t0 = time.time()
        batches = next(loader)
        optimizer.zero_grad(set_to_none=True)
        loss, ntok = None, 0
        if batches:  # the last batch of an epoch may leave a process without samples
            loss, ntok = _backward(updater, batches, device, dist, f"{desc}: step {step}")
        elif dist.active:
            dist.loss_scale(torch.tensor(0.0))  # take part in the collective the others are in
        updater.sync()  # DDP's all-reduce of the gradients (no-op in one process)
        if dist.active:
            loss_sum, ntok = dist.sum(torch.tensor([float(loss.detach()) * ntok if loss is not None else 0.0,
                                                    float(ntok)]))
            loss, ntok = float(loss_sum) / max(float(ntok), 1.0), int(ntok)  # the batch's token mean
        updater.unscale_(optimizer)
        gnorm = torch.tensor(0.)
        if cfg.grad_clip > 0 and not updater.deepspeed:  # DeepSpeed clips in its step (config gradient_clipping)
            gnorm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        lr = optimizer.param_groups[0]["lr"]
        stepped = updater.step(optimizer)
        if updater.deepspeed:
            gnorm = torch.as_tensor(updater.grad_norm() or 0.0)
        scheduler.step()
        step += 1
        last_loss = float(loss.detach()) if torch.is_tensor(loss) else float(loss)
        row = {"step": step, "epoch": epoch, "loss": last_loss, "lr": lr, "grad_norm": float(gnorm),
               "tokens": ntok, "step_time": time.time() - t0}
        if updater.scaler is not None:  # fp16: an overflowed step is the scaler's to skip, not an error
            row.update(loss_scale=updater.loss_scale, scaler_skipped=not stepped)
        elif not stepped:  # DeepSpeed skipped a step whose gradient was not finite
            row.update(skipped=True)
        run.log_step(row)
        bar.update(1)
        bar.set_postfix(loss=f"{last_loss:.3f}")
        epoch_done = step % steps_per_epoch == 0 or step == total
        if epoch_done:
            row = {"step": step, "epoch": epoch + 1, "split": "val"}
            if val is not None and len(val):
                row["loss"] = eval_loss(model, processor, val, cfg.batch_size, max_report_tokens, dist)
            if on_epoch_end is not None:
                row.update(on_epoch_end(epoch + 1, step))
            run.log_eval(row)
        # After the epoch's validation row: a resume from this checkpoint keeps that row and never redoes it.
        if cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
            save_checkpoint(run, model, optimizer, scheduler, step, dist, updater, extra_state)
            saved_at = step
    bar.close()
    if saved_at != step:
        save_checkpoint(run, model, optimizer, scheduler, step, dist, updater, extra_state)
    final = {"steps": step, "train_loss": last_loss, "wall_time_s": time.time() - t_start}
    evals = [e for e in run.evals() if "loss" in e]
    if evals:
        final["val_loss"] = evals[-1]["loss"]
    return final
