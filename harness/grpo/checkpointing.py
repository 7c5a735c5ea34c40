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

from harness.runs.checkpoint_io import begin, commit, resume_folder, staging_dir, write_state
from harness.runs.records import RunDir
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
    if trainer.dist.main:
        begin(path.parent)
    trainer.dist.barrier()
    optimizer = trainer.updater.optimizer_state(trainer.optimizer, staging_dir(path.parent))
    trainer.dist.barrier()  # every ZeRO partition is written before rank 0 seals the generation
    if trainer.dist.main:
        _write(trainer, path, optimizer)
    trainer.dist.barrier()


def resume_from(trainer) -> Path | None:
    """The checkpoint generation (folder) to resume from: the newest verified one, or None."""
    path = checkpoint_path(trainer.run)
    return resume_folder(path.parent, path.name, log=print if trainer.dist.main else None)


def _write(trainer, path: Path, optimizer: dict | None) -> None:
    store = trainer.store
    state = {"step": trainer.step, "live": {n: p.detach().cpu() for n, p in
                                            zip(store.param_names(), store.parameters(), strict=True)},
             "store": store.state_dict(), "optimizer": optimizer,
             "scheduler": trainer.scheduler.state_dict(), "regularizer": trainer.regularizer.state_dict(),
             "reference": trainer.reference.state_dict(), "best": trainer.best.state_dict(),
             "nonfinite": dict(trainer.nonfinite), "engine": trainer.updater.state_dict()}
    write_state(state, staging_dir(path.parent) / path.name)
    trainer.run.sync_logs()  # the lines this checkpoint covers are on disk before it is
    commit(path.parent, trainer.step)


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
