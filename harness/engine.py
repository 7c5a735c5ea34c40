"""The training engine of a model stage: gradient all-reduce by accelerate's DDP, fp16 loss scaling.

One process (the demo, every CPU run): `Engine` is a thin pass-through -- `forward(fn, ...)` is `fn(model, ...)`,
`backward` is `loss.backward()`, `step` is `optimizer.step()` -- so single-process numbers are those of plain
torch, bit for bit.

Several processes (a torchrun / `accelerate launch`; harness/distributed.py joins the process group through
accelerate): the model is wrapped by `Accelerator.prepare_model`, i.e. torch's DistributedDataParallel, whose
reducer averages the gradients of the trainable parameters in buckets. The stages do not call the model's own
`forward` with grad (the RL step runs a lean forward, harness/lean_forward.py), so the DDP module wraps a
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
lowered: that is the scaler working, not an error (`Engine.step` returns False, the RL trainer logs
`scaler_skipped`). bf16 and fp32 need no scaler.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import nn

from harness.distributed import Dist


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


def needs_scaler(dtype: torch.dtype) -> bool:
    """fp16 has 5 exponent bits: small activation gradients underflow without a loss scale (bf16 has fp32's)."""
    return dtype == torch.float16


class Engine:
    """Forward / backward / optimizer step of one stage's trainable `params`, in one process or under DDP."""

    def __init__(self, model: nn.Module, params: list[torch.Tensor], dist: Dist | None = None, *,
                 fp16_scaler: bool = False):
        self.model, self.params, self.dist = model, list(params), dist or Dist()
        self.ddp = None
        if self.dist.active:
            self.ddp = self.dist.accelerator().prepare_model(_Call(model), device_placement=False)
        self.scaler = None
        if fp16_scaler:
            device = self.params[0].device.type
            self.scaler = torch.amp.GradScaler(device)
        self._unscaled = False

    # -- forward / backward ------------------------------------------------------------------------------
    def forward(self, fn: Callable, *args, **kwargs):
        """`fn(model, *args, **kwargs)` for a pass whose graph will be backpropagated."""
        if self.ddp is None:
            return fn(self.model, *args, **kwargs)
        return self.ddp(fn, *args, **kwargs)

    def no_sync(self):
        """Backwards inside accumulate into the local gradients without communication (see `sync`)."""
        return self.ddp.no_sync() if self.ddp is not None else contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def sync(self) -> None:
        """Average the accumulated gradients over the processes (every process must call it once per step)."""
        if self.ddp is not None:
            self.ddp(_zero_loss, self.params).backward()

    # -- the optimizer step ------------------------------------------------------------------------------
    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Gradients back to their true size (before clipping or checking them); once per step."""
        if self.scaler is not None and not self._unscaled:
            self.scaler.unscale_(optimizer)
            self._unscaled = True

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """The optimizer step (through the scaler under fp16); False when the scaler skipped it (overflow)."""
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
        if self.scaler is not None and self._unscaled:
            self.scaler.update()  # lowers the scale if the gradients overflowed
        self._unscaled = False

    @property
    def loss_scale(self) -> float | None:
        return float(self.scaler.get_scale()) if self.scaler is not None else None

    def state_dict(self) -> dict:
        return {"scaler": self.scaler.state_dict()} if self.scaler is not None else {}

    def load_state_dict(self, state: dict) -> None:
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
