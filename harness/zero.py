"""DeepSpeed ZeRO-1/2 through accelerate's DeepSpeedPlugin: the pieces that keep policy snapshots exact.

DeepSpeed is an optional extra (`pip install -e .[deepspeed]`); nothing imports it unless asked, and the tests that
need it skip with `unavailable()`'s reason. Configs: experiments/deepspeed/*.json (zero1 / zero2: the trainable
parameters in fp32, as this project holds them; zero1_fp16: the paper's ZeRO-1 with DeepSpeed's own fp16 and
dynamic loss scale).

Why this module: a ZeRO-1/2 optimizer keeps its own fp32 copy of each process's partition of the trainable
parameters (`single_partition_of_fp32_groups`), steps that copy and writes it back into the model. A snapshot
restored into the model's parameters alone (VAPR's reset to the best policy) is therefore undone by the next
step. `master_sync(optimizer)` is the SnapshotStore / reset_optimizer_state hook that copies the live weights into
that fp32 copy (DeepSpeed's `refresh_fp32_params`), and `reset_zero_optimizer_state` forgets the Adam moments, which
ZeRO keys by the flat fp32 partitions rather than by the model's parameters.

Under DeepSpeed's fp16 (zero1_fp16.json) the model's trainable weights are fp16 and the fp32 copy has more bits
than a snapshot of them: a restore then sets the master to the fp16 value (exact with respect to the snapshot, not
to the master of the moment it was taken).

Not wired into the stages yet: the warm-up / SFT / RL loops run DDP (harness/engine.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def unavailable() -> str | None:
    """Why DeepSpeed cannot be used here (None when it can)."""
    try:
        import deepspeed  # noqa: F401
    except ImportError as e:
        return f"deepspeed is not installed (optional extra: pip install -e .[deepspeed]): {e}"
    return None


def deepspeed_plugin(config: str | Path | dict):
    """accelerate's DeepSpeedPlugin for a config file (experiments/deepspeed/*.json) or dict.

    accelerate turns DeepSpeed on only when ACCELERATE_USE_DEEPSPEED is set (as `accelerate launch
    --use_deepspeed` does), and never with `Accelerator(cpu=True)`; on a CPU-only machine set DS_ACCELERATOR=cpu
    (DeepSpeed's CPU accelerator, gloo) and leave `cpu` False."""
    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    if isinstance(config, str | Path) and not Path(config).is_file():
        raise FileNotFoundError(f"DeepSpeed config {config}: no such file (see experiments/deepspeed/)")
    from accelerate.utils import DeepSpeedPlugin

    os.environ.setdefault("ACCELERATE_USE_DEEPSPEED", "true")
    return DeepSpeedPlugin(hf_ds_config=str(config) if isinstance(config, Path) else config)


def zero_optimizer(optimizer):
    """The DeepSpeedZeroOptimizer behind what accelerate's `prepare` returned (its wrapper, the engine, or it)."""
    for candidate in (optimizer, getattr(optimizer, "optimizer", None)):
        if candidate is not None and hasattr(candidate, "single_partition_of_fp32_groups"):
            return candidate
    raise TypeError(f"{type(optimizer).__name__} is not a DeepSpeed ZeRO-1/2 optimizer (no fp32 partitions); "
                    f"ZeRO-3 and plain optimizers need no master sync")


def master_sync(optimizer) -> Callable[[], None]:
    """The `master_sync` hook of SnapshotStore / reset_optimizer_state: live weights -> ZeRO's fp32 partitions."""
    zero = zero_optimizer(optimizer)
    return zero.refresh_fp32_params


def reset_zero_optimizer_state(optimizer) -> int:
    """Forget the Adam moments of every fp32 partition (a VAPR reset is a fresh start) and re-sync the fp32
    partitions to the live weights. Returns how many partition tensors lost their state."""
    zero = zero_optimizer(optimizer)
    inner = zero.optimizer  # the torch optimizer over the flat fp32 partitions
    dropped = 0
    for group in inner.param_groups:
        for p in group["params"]:
            if p in inner.state:
                del inner.state[p]
                dropped += 1
    zero.refresh_fp32_params()
    return dropped
