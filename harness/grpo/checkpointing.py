"""The RL trainer's checkpoint: everything a resumed run needs to continue exactly where it stopped.

One file, `checkpoint/rl_state.pt` in the run directory: the live trainable tensors, the snapshots (old, ref,
best), the optimizer (under DeepSpeed each process's ZeRO partition beside it), the schedule, the regularizer's
and the reference strategy's states, the best-validation tracker, the non-finite counters and the updater's
state (the fp16 loss scale, under the key "engine": the on-disk name). The state is identical on every process
and rank 0 writes it, as a checkpoint generation (written into checkpoint.new/, sealed with its sizes and
checksums, rotated in; the previous one is kept as checkpoint.prev/); it is read back from the newest verified
generation with the safe loader (harness/runs/checkpoint_io.py), by `GRPOTrainer.try_resume`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from harness.runs.records import RunDir
from harness.training.checkpoints import load_latest, save_generation
from regularizers.registry import check_state_contract


def checkpoint_path(run: RunDir) -> Path:
    return run.path / "checkpoint" / "rl_state.pt"


def save_checkpoint(trainer) -> None:
    """Write the trainer's state (rank 0; every process writes its ZeRO optimizer partition) and wait for it."""
    path = checkpoint_path(trainer.run)
    # A plug-in whose state_dict() misses some of its attributes would resume from their initial values: refused
    # before anything is written (regularizers/registry.py, check_state_contract; every process holds the same).
    check_state_contract(trainer.regularizer, "regularizer")
    check_state_contract(trainer.reference, "reference strategy")
    # every process writes its ZeRO partition; rank 0 the state, after the lines it covers are on disk
    save_generation(path, trainer.step, lambda optimizer: _state(trainer, optimizer),
                    partition=lambda staging: trainer.updater.optimizer_state(trainer.optimizer, staging),
                    dist=trainer.dist, before_seal=trainer.run.sync_logs)


def resume_from(trainer) -> tuple[Path, dict] | None:
    """(folder, state) of the checkpoint generation to resume from: the newest verified one, or None."""
    return load_latest(checkpoint_path(trainer.run), log=print if trainer.dist.main else None)


def _state(trainer, optimizer: dict | None) -> dict:
    store = trainer.store
    state = {"step": trainer.step, "live": {n: p.detach().cpu() for n, p in
                                            zip(store.param_names(), store.parameters(), strict=True)},
             "store": store.state_dict(), "optimizer": optimizer,
             "scheduler": trainer.scheduler.state_dict(), "regularizer": trainer.regularizer.state_dict(),
             "reference": trainer.reference.state_dict(), "best": trainer.best.state_dict(),
             "nonfinite": dict(trainer.nonfinite), "engine": trainer.updater.state_dict()}
    return state


def restore_checkpoint(trainer, state: dict, folder: Path | None = None) -> None:
    """Put a loaded checkpoint `state` back into the trainer (the live weights before the optimizer state)."""
    store = trainer.store
    with torch.no_grad():
        for n, p in zip(store.param_names(), store.parameters(), strict=True):
            p.copy_(state["live"][n])
    store.load_state_dict(state["store"])
    trainer.updater.load_optimizer_state(trainer.optimizer, state["optimizer"],
                                         folder or checkpoint_path(trainer.run).parent)
    trainer.scheduler.load_state_dict(state["scheduler"])
    trainer.regularizer.load_state_dict(state["regularizer"])
    trainer.reference.load_state_dict(state["reference"])
    trainer.best.load_state_dict(state.get("best") or {})
    trainer.nonfinite = {**trainer.nonfinite, **(state.get("nonfinite") or {})}
    trainer.updater.load_state_dict(state.get("engine") or {})  # the fp16 loss scale
    trainer.step = int(state["step"])
