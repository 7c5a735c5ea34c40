"""The RL trainer's checkpoint: everything a resumed run needs to continue exactly where it stopped.

One file, `checkpoint/rl_state.pt` in the run directory: the live trainable tensors, the snapshots (old, ref,
best), the optimizer (under DeepSpeed each process's ZeRO partition beside it), the schedule, the regularizer's
and the reference strategy's states, the best-validation tracker, the non-finite counters and the updater's
state (the fp16 loss scale, under the key "engine": the on-disk name). The state is identical on every process
and rank 0 writes it; it is read back with the safe loader (harness/runs/checkpoint_io.py), by
`GRPOTrainer.try_resume`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from harness.runs.records import RunDir


def checkpoint_path(run: RunDir) -> Path:
    return run.path / "checkpoint" / "rl_state.pt"


def save_checkpoint(trainer) -> None:
    """Write the trainer's state (rank 0; every process writes its ZeRO optimizer partition) and wait for it."""
    path = checkpoint_path(trainer.run)
    optimizer = trainer.updater.optimizer_state(trainer.optimizer, path.parent)
    if trainer.dist.main:
        _write(trainer, path, optimizer)
    trainer.dist.barrier()


def _write(trainer, path: Path, optimizer: dict | None) -> None:
    store = trainer.store
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"step": trainer.step, "live": {n: p.detach().cpu() for n, p in
                                            zip(store.param_names(), store.parameters(), strict=True)},
             "store": store.state_dict(), "optimizer": optimizer,
             "scheduler": trainer.scheduler.state_dict(), "regularizer": trainer.regularizer.state_dict(),
             "reference": trainer.reference.state_dict(), "best": trainer.best.state_dict(),
             "nonfinite": dict(trainer.nonfinite), "engine": trainer.updater.state_dict()}
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def restore_checkpoint(trainer, state: dict) -> None:
    """Put a loaded checkpoint `state` back into the trainer (the live weights before the optimizer state)."""
    store = trainer.store
    with torch.no_grad():
        for n, p in zip(store.param_names(), store.parameters(), strict=True):
            p.copy_(state["live"][n])
    store.load_state_dict(state["store"])
    trainer.updater.load_optimizer_state(trainer.optimizer, state["optimizer"], checkpoint_path(trainer.run).parent)
    trainer.scheduler.load_state_dict(state["scheduler"])
    trainer.regularizer.load_state_dict(state["regularizer"])
    trainer.reference.load_state_dict(state["reference"])
    trainer.best.load_state_dict(state.get("best") or {})
    trainer.nonfinite = {**trainer.nonfinite, **(state.get("nonfinite") or {})}
    trainer.updater.load_state_dict(state.get("engine") or {})  # the fp16 loss scale
    trainer.step = int(state["step"])
