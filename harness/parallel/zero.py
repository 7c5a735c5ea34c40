"""DeepSpeed ZeRO-1/2 through accelerate's DeepSpeedPlugin: the pieces that keep policy snapshots exact.

DeepSpeed is a dependency (built without compiled ops, DS_BUILD_OPS=0: Makefile); nothing imports it unless asked,
and the tests that need it skip with `unavailable()`'s reason only where an install lacks it. Configs:
experiments/deepspeed/*.json (zero1 / zero2: the trainable parameters in fp32, as this project holds them, for
`train.deepspeed`; zero1_fp16: DeepSpeed's own fp16 and dynamic loss scale, which train.deepspeed refuses -- it
would cast the fp32 trainable parameters to fp16).

Why this module: a ZeRO-1/2 optimizer keeps its own fp32 copy of each process's partition of the trainable
parameters (`single_partition_of_fp32_groups`), steps that copy and writes it back into the model. A snapshot
restored into the model's parameters alone (VAPR's reset to the best policy) is therefore undone by the next
step. `master_sync(optimizer)` is the SnapshotStore / reset_optimizer_state hook that copies the live weights into
that fp32 copy (DeepSpeed's `refresh_fp32_params`), and `reset_zero_optimizer_state` forgets the Adam moments, which
ZeRO keys by the flat fp32 partitions rather than by the model's parameters.

Under DeepSpeed's fp16 (zero1_fp16.json) the model's trainable weights are fp16 and the fp32 copy has more bits
than a snapshot of them: a restore then sets the master to the fp16 value (exact with respect to the snapshot, not
to the master of the moment it was taken).

The stages run under it when `train.deepspeed` names a config and the launch has several processes
(harness/parallel/updater.py: backward / step through the DeepSpeed engine; checkpoints keep each process's partition).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import torch

from harness.parallel.ds_config_path import deepspeed_config_path
from harness.runs.checkpoint_io import load_state


def unavailable() -> str | None:
    """Why DeepSpeed cannot be used here (None when it can)."""
    try:
        # lazy: start-up cost (deepspeed)
        import deepspeed  # noqa: F401
    except ImportError as e:
        return (f"deepspeed is not installed (a dependency of regbench: `make install`, or DS_BUILD_OPS=0 pip install "
                f"deepspeed==0.19.8): {e}")
    return None


def deepspeed_plugin(config: str | Path | dict):
    """accelerate's DeepSpeedPlugin for a config file (experiments/deepspeed/*.json) or dict.

    accelerate turns DeepSpeed on only when ACCELERATE_USE_DEEPSPEED is set (as `accelerate launch
    --use_deepspeed` does), and never with `Accelerator(cpu=True)`; on a CPU-only machine set DS_ACCELERATOR=cpu
    (DeepSpeed's CPU accelerator, gloo) and leave `cpu` False."""
    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")  # read when deepspeed is first imported
    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    if isinstance(config, str | Path) and not Path(config).is_file():
        raise FileNotFoundError(f"DeepSpeed config {config}: no such file (see experiments/deepspeed/)")
    # lazy: start-up cost (accelerate)
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


def stage_config(path: str | Path, grad_clip: float) -> dict:
    """The DeepSpeed config of a stage: the JSON at `path` with `gradient_clipping` = train.grad_clip (DeepSpeed
    clips over all partitions, as torch.nn.utils.clip_grad_norm_ does over all gradients). ZeRO-1/2 only: ZeRO-3
    partitions the weights themselves, which the snapshots (copies of whole parameters) do not handle."""
    path = deepspeed_config_path(path)
    if not path.is_file():
        raise FileNotFoundError(f"train.deepspeed = {str(path)!r}: no such file (see experiments/deepspeed/)")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"train.deepspeed = {str(path)!r}: not valid JSON: {e}") from e
    stage = (config.get("zero_optimization") or {}).get("stage", 0) if isinstance(config, dict) else None
    if stage not in (1, 2):
        raise ValueError(f"train.deepspeed = {str(path)!r}: zero_optimization.stage is {stage!r}; the stages run "
                         f"under ZeRO-1 or ZeRO-2 only")
    if (config.get("fp16") or {}).get("enabled") or (config.get("bf16") or {}).get("enabled"):
        raise ValueError(f"train.deepspeed = {str(path)!r}: fp16 / bf16 enabled; the stages hold the trainable "
                         f"parameters in fp32 and autocast themselves (model.dtype): use zero1.json / zero2.json")
    return {**config, "gradient_clipping": float(grad_clip)}


class ZeroReset:
    """What a reference strategy's reset (snapshots.reset_optimizer_state) is handed under ZeRO: the Adam state
    lives in flat fp32 partitions, not under the model's parameters, so the reset drops all of it."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def reset_state(self, params) -> int:
        return reset_zero_optimizer_state(self.optimizer)


def partition_path(folder: Path, rank: int) -> Path:
    return Path(folder) / f"zero_partition_rank{rank}.pt"


def save_partition(optimizer, folder: Path, rank: int) -> None:
    """This process's ZeRO optimizer partition (fp32 master + Adam moments), one file per process."""
    path = partition_path(folder, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(zero_optimizer(optimizer).state_dict(), tmp)
    tmp.replace(path)


def load_partition(optimizer, folder: Path, world: int) -> None:
    """Every process's partition file back into ZeRO (fp32 masters from the files; each process takes its own)."""
    paths = [partition_path(folder, r) for r in range(world)]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"ZeRO checkpoint incomplete (saved with another number of processes?): missing "
                                f"{missing}")
    # weights_only=True, with the few DeepSpeed classes a ZeRO-1/2 state dict holds allowed by name (the loss
    # scaler, the stage enum, the parameter slice addresses): any other object in the file is refused.
    with torch.serialization.safe_globals(zero_state_classes()):
        states = [load_state(p) for p in paths]
    zero_optimizer(optimizer).load_state_dict(states, load_optimizer_states=True, load_from_fp32_weights=True)


def zero_state_classes() -> list[type]:
    """The non-tensor classes in DeepSpeed's ZeRO-1/2 optimizer state dict (stage_1_and_2.state_dict)."""
    # lazy: start-up cost (deepspeed)
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [DynamicLossScaler, LossScaler, ZeroStageEnum, fragment_address]


def discard_gradients(optimizer) -> None:
    """Forget the step's reduced gradients without stepping (a step the RL loop skips), as ZeRO itself does on
    an overflow: otherwise they would be added to the next step's."""
    zero = zero_optimizer(optimizer)
    zero.zero_grad(set_to_none=True)
    for k in list(getattr(zero, "averaged_gradients", {}).keys()):
        zero.averaged_gradients[k] = None
    if hasattr(zero, "_release_preflattened_grad_buffers"):
        zero._release_preflattened_grad_buffers()
    for k in list(getattr(zero, "all_grad_tensors", {}).keys()):
        zero.all_grad_tensors[k] = None
    if hasattr(zero, "micro_step_id"):
        # lazy: start-up cost (deepspeed)
        from deepspeed.runtime.zero.stage_1_and_2 import INITIAL_MICRO_STEP_ID

        zero.micro_step_id = INITIAL_MICRO_STEP_ID


def plugin_for(path: str, grad_clip: float, world: int):
    """The DeepSpeedPlugin of a stage with `train.deepspeed = path` in a launch of `world` processes; None when
    the path is empty or there is one process (nothing to partition: plain torch, the config still checked)."""
    if not path:
        return None
    config = stage_config(path, grad_clip)
    if world <= 1:
        print(f"[deepspeed] one process: train.deepspeed = {path} is not used (ZeRO partitions over processes)")
        return None
    return deepspeed_plugin(config)
