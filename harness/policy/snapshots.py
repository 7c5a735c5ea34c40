"""Policies as snapshots of the trainable parameters (docs/DESIGN.md, "The central idea").

Every policy the RL algorithm talks about -- current, old, reference, best -- is the same frozen base model
with a different value of its trainable parameters (the merger, LoRA adapters, or everything). A
:class:`SnapshotStore` keeps named copies of those parameters only, swaps one in for a forward pass,
averages into one (EMA) and copies one over another (reset). No second copy of the base model is ever made.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

__all__ = ["SnapshotStore", "reset_optimizer_state"]


class SnapshotStore:
    """Named snapshots of ``model``'s trainable parameters (``requires_grad=True`` at construction), by name.

    ``device``: where snapshots live ("cpu" saves accelerator memory; the accelerator makes swaps faster).
    ``dtype``: snapshot dtype (None: each parameter's own); e.g. fp32 keeps a slow EMA of bf16 weights from
    rounding its updates away. Swapping an fp32 snapshot into bf16 weights then rounds, as any cast does.
    ``master_sync``: called after every write into the live parameters (``restore``). With an fp32 master copy
    of the weights (DeepSpeed ZeRO with fp16/bf16, apex AMP O2) the optimizer steps the master and copies it
    back into the model, silently undoing a restore; the hook must copy the live weights into the master
    (e.g. for DeepSpeed ZeRO-1/2, write them into the fp32 partitions of ``engine.optimizer``).
    """

    def __init__(
        self,
        model: nn.Module,
        device: str | torch.device = "cpu",
        *,
        dtype: torch.dtype | None = None,
        master_sync: Callable[[], None] | None = None,
    ) -> None:
        # named_parameters() de-duplicates tied weights, so each tensor is stored once.
        self._params: dict[str, nn.Parameter] = {
            name: p for name, p in model.named_parameters() if p.requires_grad
        }
        if not self._params:
            raise ValueError("model has no trainable parameters (requires_grad=True) to snapshot")
        self.device = torch.device(device)
        self.dtype = dtype
        self.master_sync = master_sync
        self._snapshots: dict[str, dict[str, torch.Tensor]] = {}
        # Bumped by every write into a snapshot, so that what was computed from one (the vision features of
        # harness/sampling/feature_memo.py) knows when it is stale.
        self._versions: dict[str, int] = {}

    # -- introspection -------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Names of the snapshots held, in creation order."""
        return list(self._snapshots)

    def __contains__(self, name: object) -> bool:
        return name in self._snapshots

    def version(self, name: str) -> int:
        """How many times snapshot ``name`` has been written (created, captured, copied into, averaged into,
        loaded); equal versions mean equal values."""
        self._get(name)
        return self._versions[name]

    def _written(self, name: str) -> None:
        self._versions[name] = self._versions.get(name, 0) + 1

    def param_names(self) -> list[str]:
        return list(self._params)

    def parameters(self) -> list[nn.Parameter]:
        """The live trainable parameters this store tracks (e.g. for :func:`reset_optimizer_state`)."""
        return list(self._params.values())

    def num_bytes(self) -> int:
        """Memory held by all snapshots."""
        return sum(t.numel() * t.element_size() for snap in self._snapshots.values() for t in snap.values())

    def _get(self, name: str) -> dict[str, torch.Tensor]:
        if name not in self._snapshots:
            raise KeyError(f"no snapshot named {name!r}; have {self.names()}")
        return self._snapshots[name]

    def _empty_like(self, p: torch.Tensor) -> torch.Tensor:
        return torch.empty(p.shape, dtype=self.dtype or p.dtype, device=self.device)

    # -- operations ------------------------------------------------------------------------------------------
    @torch.no_grad()
    def capture(self, name: str) -> None:
        """Snapshot ``name`` <- live parameters (buffers are reused when the snapshot exists)."""
        snap = self._snapshots.get(name)
        if snap is None:
            snap = {pname: self._empty_like(p) for pname, p in self._params.items()}
            self._snapshots[name] = snap
        for pname, p in self._params.items():
            snap[pname].copy_(p.detach())
        self._written(name)

    @torch.no_grad()
    def restore(self, name: str) -> None:
        """Live parameters <- snapshot ``name``, in place (the same Parameter objects the optimizer holds)."""
        snap = self._get(name)
        for pname, p in self._params.items():
            p.copy_(snap[pname])
        if self.master_sync is not None:
            self.master_sync()

    @contextlib.contextmanager
    def use(self, name: str) -> Iterator[None]:
        """Swap snapshot ``name`` into the model for the body (e.g. a reference forward pass), then put the
        live values back bit for bit, also when the body raises. Nests."""
        snap = self._get(name)
        with torch.no_grad():
            # Stash in the parameters' own dtype so that putting them back is exact.
            stash = {pname: p.detach().to(self.device, copy=True) for pname, p in self._params.items()}
            for pname, p in self._params.items():
                p.copy_(snap[pname])
        try:
            yield
        finally:
            with torch.no_grad():
                for pname, p in self._params.items():
                    p.copy_(stash[pname])

    @torch.no_grad()
    def ema_(self, target: str, rate: float, source: str | None = None) -> None:
        """``target <- (1 - rate) * target + rate * source`` (source None: the live parameters).

        Written as a weighted sum rather than a lerp so that rate 0 leaves the target bit-identical and rate 1
        copies the source bit-identically.
        """
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"EMA rate must be in [0, 1], got {rate}")
        dst = self._get(target)
        src = self._params if source is None else self._get(source)
        for pname, t in dst.items():
            s = src[pname].detach().to(device=t.device, dtype=t.dtype)
            t.mul_(1.0 - rate).add_(s, alpha=rate)
        self._written(target)

    @torch.no_grad()
    def copy(self, src: str, dst: str) -> None:
        """Snapshot ``dst`` <- snapshot ``src`` (``dst`` is created if missing)."""
        s = self._get(src)
        if dst not in self._snapshots:
            self._snapshots[dst] = {pname: torch.empty_like(t) for pname, t in s.items()}
        for pname, t in self._snapshots[dst].items():
            t.copy_(s[pname])
        self._written(dst)

    def drop(self, name: str) -> None:
        """Forget snapshot ``name`` (frees its memory)."""
        self._get(name)
        del self._snapshots[name]
        self._written(name)

    @torch.no_grad()
    def equal_to_live(self, name: str) -> bool:
        """True when snapshot ``name`` equals the live parameters exactly (cast to the snapshot dtype)."""
        snap = self._get(name)
        return all(
            torch.equal(snap[pname], p.detach().to(device=snap[pname].device, dtype=snap[pname].dtype))
            for pname, p in self._params.items()
        )

    # -- checkpointing ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """All snapshots (CPU tensors), for a checkpoint."""
        return {
            "snapshots": {
                name: {pname: t.detach().cpu().clone() for pname, t in snap.items()}
                for name, snap in self._snapshots.items()
            }
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace all snapshots by those of ``state``; parameter names and shapes must match the model's."""
        expected = set(self._params)
        loaded: dict[str, dict[str, torch.Tensor]] = {}
        for name, snap in state["snapshots"].items():
            got = set(snap)
            if got != expected:
                raise ValueError(
                    f"snapshot {name!r} does not match the trainable parameters: missing "
                    f"{sorted(expected - got)[:5]}, unexpected {sorted(got - expected)[:5]}"
                )
            loaded[name] = {}
            for pname, p in self._params.items():
                t = snap[pname]
                if t.shape != p.shape:
                    raise ValueError(
                        f"snapshot {name!r}: {pname} has shape {tuple(t.shape)}, model {tuple(p.shape)}"
                    )
                buf = self._empty_like(p)
                buf.copy_(t)
                loaded[name][pname] = buf
        self._snapshots = loaded
        for name in loaded:
            self._written(name)


def reset_optimizer_state(
    optimizer: torch.optim.Optimizer,
    params: Iterable[torch.Tensor] | None = None,
    *,
    master_sync: Callable[[], None] | None = None,
) -> int:
    """Forget the optimizer's per-parameter state (AdamW: ``exp_avg``, ``exp_avg_sq``, ``step``) for
    ``params`` (None: all of the optimizer's parameters), so that the next step is a fresh Adam step from
    the current weights. Returns the number of parameters whose state was dropped.

    Without this, a policy reset (VAPR) is pushed back toward where the old moments point. With an fp32 master
    copy of the weights (DeepSpeed, apex AMP O2) the master must also be re-synced to the live weights, or the
    next step copies the old weights back: pass ``master_sync`` (called after the reset). The learning-rate
    scheduler is deliberately left alone.

    An optimizer whose state is not keyed by the model's parameters (DeepSpeed ZeRO: flat fp32 partitions) is
    passed as an object with ``reset_state(params)`` (harness/parallel/zero.py, ZeroReset), which does the reset itself.
    """
    if callable(getattr(optimizer, "reset_state", None)):
        dropped = optimizer.reset_state(params)
        if master_sync is not None:
            master_sync()
        return dropped
    targets = {id(p) for p in params} if params is not None else None
    dropped = 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            if targets is not None and id(p) not in targets:
                continue
            if p in optimizer.state:
                del optimizer.state[p]
                dropped += 1
    if master_sync is not None:
        master_sync()
    return dropped
