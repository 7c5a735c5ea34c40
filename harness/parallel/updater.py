"""The updater of a model stage: gradient all-reduce by accelerate's DDP, fp16 loss scaling, DeepSpeed ZeRO steps.

`Updater.update(loss_fn, micro_batches, optimizer, ...)` is one optimizer step from the stage's losses: the
micro-batch loop (forward and backward under `no_sync`, each loss scaled by the process's share of the step's
normaliser), the gradient all-reduce (`sync`), unscale, the non-finite checks, gradient clipping and the step
(torch's, through the fp16 scaler, or DeepSpeed's), decided alike on every process; it returns an
`UpdateOutcome`. The pieces it is made of (`forward`, `no_sync`, `backward`, `sync`, `unscale_`, `step`, `skip`)
stay public for a stage with other rules (warm-up / SFT: harness/stages/lm_train.py).

One process (the demo, every CPU run): `Updater` is a thin pass-through -- `forward(fn, ...)` is `fn(model, ...)`,
`backward` is `loss.backward()`, `step` is `optimizer.step()` -- so single-process numbers are those of plain
torch, bit for bit.

Several processes (a torchrun / `accelerate launch`; harness/parallel/distributed.py joins the process group through
accelerate): the model is wrapped by `Accelerator.prepare_model`, i.e. torch's DistributedDataParallel, whose
reducer averages the gradients of the trainable parameters in buckets. The stages do not call the model's own
`forward` with grad (the RL step runs a lean forward, harness/sampling/lean_forward.py), so the DDP module wraps a
`_Call` that runs any function of the model: DDP's forward hooks then see every forward that builds a graph.

Gradient accumulation (micro-batches) runs every backward under `no_sync()` and ends with `sync()`: one
backward of a zero loss through DDP, which all-reduces the accumulated gradients. Doing the all-reduce in a
pass of its own (rather than in the last micro-batch's backward) lets a process that has no samples this step,
or that stopped at a non-finite loss, still take part in the collective: no process can wait for another that
will never reduce. The cost is that the last backward does not overlap with communication (only the LoRA /
merger gradients travel: megabytes).

fp16 (`model.dtype = float16`, the paper's V100 setup): a dynamic loss scale (torch.amp.GradScaler, which runs on
CPU and CUDA). The trainable parameters are fp32 masters (harness/models/precision.py), so the scaler's unscale
and step work on fp32 gradients. A step whose scaled gradients overflowed is skipped by the scaler and the scale
lowered: that is the scaler working, not an error (`Updater.step` returns False, the RL trainer logs
`scaler_skipped`). bf16 and fp32 need no scaler.

DeepSpeed ZeRO-1/2 (`train.deepspeed`, a launch whose Accelerator has accelerate's DeepSpeedPlugin): `attach`
hands the model and the optimizer to the DeepSpeed engine, which partitions the optimizer state (and, ZeRO-2, the
gradients) over the processes and keeps an fp32 master partition of its own. Backwards then run through
`DeepSpeedEngine.backward` outside the accumulation boundary; `sync` pads every process to the same number of
backwards (ZeRO-2 reduces in each one, so a process that did fewer would leave the others waiting) and ends with
a boundary backward of a zero loss (ZeRO-1 reduces there); `step` is `DeepSpeedEngine.step`, which clips to
train.grad_clip (its config's gradient_clipping) and skips a step whose gradient is not finite (`step` returns
False). Snapshots and VAPR resets stay exact through `master_sync` / `reset_view` (harness/parallel/zero.py); the
optimizer state is checkpointed per process (`save_partition` / `load_partition`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from harness.parallel.distributed import Dist
from harness.parallel.zero import ZeroReset, discard_gradients, load_partition, master_sync, save_partition


class _Call(nn.Module):
    """`_Call(model)(fn, *args)` = `fn(model, *args)`: lets DDP's forward wrap any function of the model."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, fn: Callable, *args, **kwargs):
        return fn(self.model, *args, **kwargs)


def _zero_loss(_model, params: list[torch.Tensor]) -> torch.Tensor:
    # Reaches every trainable parameter with a zero gradient: DDP reduces what the parameters hold already.
    return sum((p.reshape(-1)[:1] * 0.0).sum() for p in params)


def _plain(value) -> float | None:
    return float(value) if value is not None else None


def needs_scaler(dtype: torch.dtype) -> bool:
    """fp16 has 5 exponent bits: small activation gradients underflow without a loss scale (bf16 has fp32's)."""
    return dtype == torch.float16


@dataclass
class UpdateOutcome:
    """What `Updater.update` did. `stepped` and `cause` are the same on every process."""

    stepped: bool = False  # the optimizer moved the weights
    cause: str | None = None  # why the step was rejected as not finite (the first process's reason): no step
    grad_norm: float | None = None  # before clipping; None: not clipped (grad_clip 0, rejected early) or unknown
    loss_scale: float | None = None  # fp16: the scale after the step; None without a scaler or if rejected before it
    overflow: bool = False  # fp16: the scaled gradient overflowed, the scaler skipped the step (the scaler working)

    @property
    def skipped(self) -> bool:
        """A rejected (non-finite) step, for the caller to count; a step the scaler skipped is not one, unless
        the loss scale is already below 1 (then no fp16 range problem: the true gradient is not finite)."""
        return self.cause is not None


class Updater:
    """Forward / backward / optimizer step of one stage's trainable `params`, in one process or under DDP."""

    def __init__(self, model: nn.Module, params: list[torch.Tensor], dist: Dist | None = None, *,
                 fp16_scaler: bool = False):
        self.model, self.params, self.dist = model, list(params), dist or Dist()
        self.ddp = None
        self.ds = None  # the DeepSpeedEngine, after attach
        self.zero_optimizer = None  # what accelerate's prepare returned for the optimizer under DeepSpeed
        self._backwards = 0  # under DeepSpeed: backwards since the last sync
        self.deepspeed = self.dist.active and self.dist.accelerator().distributed_type.value == "DEEPSPEED"
        if self.deepspeed and fp16_scaler:
            raise ValueError("model.dtype float16 under train.deepspeed is not supported: DeepSpeed's fp16 would "
                             "turn the fp32 trainable parameters into fp16; use bfloat16 or float32, or DDP")
        if self.dist.active and not self.deepspeed:
            self.ddp = self.dist.accelerator().prepare_model(_Call(model), device_placement=False)
        self.scaler = None
        if fp16_scaler:
            device = self.params[0].device.type
            self.scaler = torch.amp.GradScaler(device)
        self._unscaled = False

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        """Under DeepSpeed: build the DeepSpeed engine over the model and `optimizer` (a no-op otherwise). The
        stage keeps using `optimizer` for its schedule and learning rate: ZeRO steps this same torch optimizer,
        over flat fp32 partitions that it puts into the same param_groups."""
        if not self.deepspeed or self.ds is not None:
            return
        self.ds, self.zero_optimizer = self.dist.accelerator().prepare(_Call(self.model), optimizer)

    def _need_ds(self) -> None:
        if self.ds is None:
            raise RuntimeError("under DeepSpeed the Updater needs its optimizer: call updater.attach(optimizer)")

    # -- forward / backward ------------------------------------------------------------------------------
    def forward(self, fn: Callable, *args, **kwargs):
        """`fn(model, *args, **kwargs)` for a pass whose graph will be backpropagated."""
        if self.ddp is None:  # one process, or ZeRO-1/2 (every process holds the whole model; no forward hooks)
            return fn(self.model, *args, **kwargs)
        return self.ddp(fn, *args, **kwargs)

    def no_sync(self):
        """Backwards inside accumulate into the local gradients without communication (see `sync`)."""
        return self.ddp.no_sync() if self.ddp is not None else contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        if self.deepspeed:
            self._ds_backward(loss, boundary=False)
            return
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def _ds_backward(self, loss: torch.Tensor, boundary: bool) -> None:
        self._need_ds()
        self.ds.set_gradient_accumulation_boundary(boundary)
        # The stages weigh their micro-batches themselves: no division by DeepSpeed's accumulation steps.
        self.ds.backward(loss, scale_wrt_gas=False)
        self._backwards += 1

    def sync(self) -> None:
        """Average the accumulated gradients over the processes (every process must call it once per step)."""
        if self.deepspeed:
            most = max(self.dist.gather_objects(self._backwards))
            while self._backwards < most:  # as many (zero) backwards as the busiest process
                self._ds_backward(_zero_loss(self.model, self.params), boundary=False)
            self._ds_backward(_zero_loss(self.model, self.params), boundary=True)
            self._backwards = 0
        elif self.ddp is not None:
            self.ddp(_zero_loss, self.params).backward()

    # -- one optimizer step from the losses ------------------------------------------------------------------
    def update(self, loss_fn: Callable, micro_batches: Iterable, optimizer: torch.optim.Optimizer, *,
               grad_clip: float = 0.0, normalizer: torch.Tensor | None = None,
               rejected: str | None = None) -> UpdateOutcome:
        """One optimizer step: `loss_fn(forward, batch)` for every micro-batch, backward of its loss, then the
        step, on every process alike.

        `loss_fn` runs the pass to backpropagate through `forward(fn, *args)` (= `fn(model, *args)`, through DDP
        when launched) and returns the micro-batch's loss, already weighted so that the losses add up to the step's
        loss; or a str naming why the step cannot train (e.g. non-finite logits or loss): no further micro-batch
        runs and the step is rejected. `normalizer`: this process's share of the step's normaliser (e.g. its
        response-token count); under a launch each loss is scaled by `dist.loss_scale(normalizer)`, so that the
        averaged gradient is the whole batch's (None: the processes weigh equally). `rejected`: a reason found
        before any loss (no forward runs). A process with a reason rejects the step for all: every process then
        skips the optimizer step alike (`UpdateOutcome.cause`, the first process's reason). Otherwise the
        gradients are unscaled (fp16), checked and clipped to `grad_clip` (> 0; DeepSpeed checks and clips in its
        own step) and the optimizer steps."""
        scale = self.dist.loss_scale(normalizer) if self.dist.active and normalizer is not None else 1.0
        optimizer.zero_grad(set_to_none=True)
        cause = rejected
        for batch in micro_batches if cause is None else ():
            with self.no_sync():  # gradients averaged once per step (sync, below)
                loss = loss_fn(self.forward, batch)
                if isinstance(loss, str):
                    cause = loss
                    break
                self.backward(loss * scale if self.dist.active else loss)
        self.sync()  # every process, also one that stopped early: the all-reduce
        gnorm, overflow = None, False
        if cause is None and not self.deepspeed:  # DeepSpeed checks and clips in its step (below)
            self.unscale_(optimizer)
            grads = [p.grad for p in self.params if p.grad is not None]
            if grads and not bool(torch.stack([torch.isfinite(g).all() for g in grads]).all()):
                if self.scaler is not None:  # fp16 overflow: the scaler skips the step, lowers the scale
                    overflow = True
                else:
                    cause = "the gradient is not finite although the loss is"
            elif grad_clip > 0:
                gnorm = torch.nn.utils.clip_grad_norm_(self.params, grad_clip)
                if not torch.isfinite(gnorm):
                    cause = f"the gradient norm is {float(gnorm)}"
        # Every process skips or steps alike: a step is rejected when any process found a problem.
        if float(self.dist.sum(torch.tensor([float(cause is not None)]))[0]) > 0:
            optimizer.zero_grad(set_to_none=True)
            self.skip()
            first = next(c for c in self.dist.gather_objects(cause) if c)
            return UpdateOutcome(cause=first, grad_norm=_plain(gnorm))
        stepped = self.step(optimizer)
        if self.deepspeed:
            gnorm = self.grad_norm()
            if not stepped:  # DeepSpeed found the gradient not finite and did not step
                cause = "the gradient is not finite although the loss is"
        elif overflow and self.loss_scale < 1.0:
            # Overflow at a loss scale below 1 is no fp16 range problem (the unscaled gradient is not finite
            # either): rejected, so that a caller counting rejected steps stops a run the scaler cannot rescue.
            cause = f"the gradient is not finite at loss scale {self.loss_scale}"
        return UpdateOutcome(stepped=stepped, cause=cause, grad_norm=_plain(gnorm), loss_scale=self.loss_scale,
                             overflow=overflow)

    # -- the optimizer step ------------------------------------------------------------------------------
    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Gradients back to their true size (before clipping or checking them); once per step."""
        if self.scaler is not None and not self._unscaled:
            self.scaler.unscale_(optimizer)
            self._unscaled = True

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """The optimizer step (through the scaler under fp16); False when the scaler skipped it (overflow)."""
        if self.deepspeed:
            self._need_ds()
            self.ds.set_gradient_accumulation_boundary(True)
            self.ds.step()
            return self.ds.was_step_applied()
        if self.scaler is None:
            optimizer.step()
            return True
        self.unscale_(optimizer)
        before = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        self._unscaled = False
        # The scale only falls when an inf / nan was found, and then the step was not taken.
        return not self.scaler.get_scale() < before

    def skip(self) -> None:
        """No optimizer step this time (a non-finite step the caller rejects): keep the scaler consistent."""
        if self.deepspeed:
            discard_gradients(self.zero_optimizer)
            return
        if self.scaler is not None and self._unscaled:
            self.scaler.update()  # lowers the scale if the gradients overflowed
        self._unscaled = False

    def grad_norm(self) -> float | None:
        """Under DeepSpeed: the global gradient norm of the last step, before clipping (None otherwise)."""
        return self.ds.get_global_grad_norm() if self.ds is not None else None

    def master_sync(self) -> Callable[[], None] | None:
        """The SnapshotStore hook that keeps a restore from being undone by ZeRO's fp32 master (None: no master)."""
        if self.ds is None:
            return None

        return master_sync(self.zero_optimizer)

    def reset_view(self, optimizer: torch.optim.Optimizer):
        """What a reference strategy's optimizer reset (VAPR) is handed: the optimizer, or ZeRO's reset."""
        if self.ds is None:
            return optimizer

        return ZeroReset(self.zero_optimizer)

    def optimizer_state(self, optimizer: torch.optim.Optimizer, folder: Path) -> dict | None:
        """The optimizer state for a checkpoint in `folder`: the state dict, or under DeepSpeed None (every
        process writes its own partition file into `folder`; call it on every process)."""
        if self.ds is None:
            return optimizer.state_dict()

        save_partition(self.zero_optimizer, folder, self.dist.rank)
        return None

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict | None, folder: Path) -> None:
        """Back from `optimizer_state`, after the live weights were loaded."""
        if self.ds is None:
            if state is None:
                raise ValueError(f"{folder}: the checkpoint has no optimizer state (written under DeepSpeed); "
                                 f"resume it with the same train.deepspeed and number of processes")
            optimizer.load_state_dict(state)
            return

        load_partition(self.zero_optimizer, folder, self.dist.world)

    @property
    def loss_scale(self) -> float | None:
        return float(self.scaler.get_scale()) if self.scaler is not None else None

    def state_dict(self) -> dict:
        return {"scaler": self.scaler.state_dict()} if self.scaler is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
