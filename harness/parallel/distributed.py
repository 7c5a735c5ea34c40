"""Data parallelism of the model stages (one process per GPU): the process group, sharding and statistics.

Launch any stage command with torchrun or accelerate, which set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT (experiments/accelerate/README.md):

    torchrun --nproc_per_node 8 -m harness.cli train rl CONFIG init_from=.../model
    accelerate launch --config_file experiments/accelerate/ddp_gpus.yaml -m harness.cli train rl CONFIG ...

The process group is accelerate's (`Accelerator`, NCCL on GPUs, gloo on CPUs) with `train.dist_timeout_s`; the
gradients are averaged by accelerate's DDP (harness/parallel/updater.py). What stays here are the collectives of the
statistics (sums, gathers, broadcasts of validation scores), which are not gradients.

Every process holds the whole model (the base is frozen and only merger + LoRA train, so a 7B model in bf16
fits one GPU) and its own SnapshotStore. Per optimizer step the global batch of `rl.prompts_per_step` prompts
is split across processes; each samples, scores and takes group advantages for its own prompts (a group never
spans processes), computes its loss scaled so that the average over processes equals the loss of the whole
batch in one process, and the gradients are averaged before the (identical) optimizer step. The trainable
parameters therefore stay equal on every process, and so do the snapshots, the regularizer's state (its
inputs are reduced over processes) and the reference strategy's decisions (validation scores are computed once
and broadcast). Rank 0 alone writes the run directory and checkpoints.

Without WORLD_SIZE > 1 everything here is a no-op and the code runs as one process.
"""

from __future__ import annotations

import contextlib
import gc
import os
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

# Timeouts (this project). Collectives of training: torch's NCCL default is 10 minutes, too short for a
# validation pass of a 7B model on rank 0's share; 30 minutes. Rank-0-first loading (rank 0 builds stage 0,
# the data set checks and loads the model while the others wait): a day, on a group of its own, so that a slow
# load can never time the others out; a rank that dies ends the launch anyway (torchrun / accelerate stop all).
DEFAULT_TIMEOUT_S = 1800.0
LOAD_TIMEOUT_S = 86400.0
_ACCELERATOR = None  # the process's accelerate.Accelerator under a launch (init_distributed)


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    load_timeout_s: float = LOAD_TIMEOUT_S
    _wait_group: object = field(default=None, repr=False)

    @property
    def active(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    def accelerator(self):
        """The launch's `accelerate.Accelerator` (created once per process by init_distributed)."""
        if _ACCELERATOR is None:
            raise RuntimeError("no accelerate.Accelerator in this process: call init_distributed first")
        return _ACCELERATOR

    def _long_wait(self) -> None:
        """A barrier with `load_timeout_s` (gloo: it waits on the CPU, also under NCCL)."""
        if self._wait_group is None:
            self._wait_group = dist.new_group(backend="gloo", timeout=timedelta(seconds=self.load_timeout_s))
        dist.barrier(group=self._wait_group)

    @contextlib.contextmanager
    def main_first(self):
        """Rank 0 runs the block first (e.g. builds a cache or a data set), then the others (which read it).
        The others wait with the long load timeout, not the training one."""
        if not self.active:
            yield
            return
        self._long_wait()  # creates the group on every rank (new_group is collective)
        if not self.main:
            self._long_wait()
        yield
        if self.main:
            self._long_wait()

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Element-wise sum over processes (a new tensor; float64 on the CPU so that counts stay exact)."""
        out = values.detach().to(dtype=torch.float64, device=self._device()).clone()
        if self.active:
            dist.all_reduce(out)
        return out.cpu()

    def loss_scale(self, local_normalizer: torch.Tensor) -> float:
        """The factor for this process's loss: its share of the global normaliser times the world size.

        A loss aggregated as S_r / n_r (token_mean: n_r = response tokens; see grpo.core.aggregation_normalizer)
        scaled by n_r * W / sum_r n_r, then averaged over the W processes, is sum_r S_r / sum_r n_r: the loss of
        the whole batch in one process; so are the averaged gradients.
        """
        if not self.active:
            return 1.0
        total = float(self.sum(local_normalizer.reshape(1))[0])
        return float(local_normalizer) * self.world / max(total, 1.0)

    def gather(self, values: torch.Tensor) -> torch.Tensor:
        """Concatenate equally shaped tensors from all processes along dim 0, in rank order."""
        if not self.active:
            return values.detach().cpu()
        local = values.detach().to(self._device()).contiguous()
        parts = [torch.empty_like(local) for _ in range(self.world)]
        dist.all_gather(parts, local)
        return torch.cat([p.cpu() for p in parts])

    def gather_objects(self, obj) -> list:
        if not self.active:
            return [obj]
        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj):
        """Rank 0's `obj` on every process."""
        if not self.active:
            return obj
        box = [obj if self.main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def reduce_stats(self, stats: dict[str, float], weight: float) -> dict[str, float]:
        """Per-process statistics -> one value each: `*_min` / `*_max` by min / max, the rest as means
        weighted by `weight` (e.g. the process's response-token count, which makes token means exact)."""
        if not self.active:
            return dict(stats)
        rows = self.gather_objects((weight, stats))
        total = sum(w for w, _ in rows) or 1.0
        out = {}
        for key, value in stats.items():
            values = [s.get(key) for _, s in rows]
            if any(v is None for v in values):
                out[key] = value
            elif key.endswith("_min"):
                out[key] = min(values)
            elif key.endswith("_max"):
                out[key] = max(values)
            else:
                out[key] = sum(w * s[key] for w, s in rows) / total
        return out

    def _device(self) -> torch.device:
        # NCCL moves only CUDA tensors; gloo only CPU ones.
        if self.active and dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")


def init_distributed(timeout_s: float = DEFAULT_TIMEOUT_S, load_timeout_s: float = LOAD_TIMEOUT_S,
                     deepspeed_plugin=None) -> Dist:
    """The process group of a torchrun / accelerate launch, joined through accelerate (NCCL on GPUs, gloo on
    CPUs) with `timeout_s` for every collective; or one process (no accelerate state at all)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    if timeout_s <= 0 or load_timeout_s <= 0:
        raise ValueError(f"train.dist_timeout_s = {timeout_s} and train.dist_load_timeout_s = {load_timeout_s} "
                         f"must be positive (seconds)")
    # lazy: start-up cost (accelerate)
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, InitProcessGroupKwargs

    # broadcast_buffers off: the buffers (rotary tables) are equal on every process and never change.
    handlers = [InitProcessGroupKwargs(timeout=timedelta(seconds=timeout_s)),
                DistributedDataParallelKwargs(broadcast_buffers=False)]
    global _ACCELERATOR
    # mixed_precision "no": the stages autocast to the base's dtype themselves (harness/models/precision.py)
    # and scale fp16 losses in harness/parallel/updater.py; an `accelerate launch --mixed_precision` is overridden.
    # cpu=True would turn DeepSpeed off: on a CPU machine DeepSpeed runs on its CPU accelerator
    # (harness/parallel/zero.py).
    cpu = not torch.cuda.is_available() and deepspeed_plugin is None
    _ACCELERATOR = Accelerator(kwargs_handlers=handlers, cpu=cpu, mixed_precision="no",
                               deepspeed_plugin=deepspeed_plugin, device_placement=False)
    if deepspeed_plugin is None and _ACCELERATOR.distributed_type.value == "DEEPSPEED":
        raise RuntimeError("this launch asks for DeepSpeed (accelerate launch --use_deepspeed / "
                           "ACCELERATE_USE_DEEPSPEED) but train.deepspeed is empty: set train.deepspeed to a "
                           "config (experiments/deepspeed/zero1.json) or launch with DDP "
                           "(experiments/accelerate/README.md)")
    return Dist(rank=dist.get_rank(), world=dist.get_world_size(), load_timeout_s=load_timeout_s)


def finalize() -> None:
    """Leave the process group (at the end of a launched command). All ranks meet first: rank 0 hosts the rendezvous
    store, and a rank still tearing down its gloo threads after rank 0 exited can abort ("terminate called without
    an active exception", seen in 2-process CPU tests).

    Objects that hold the group (a DDP reducer and its pending work) are collected first and again after: one left
    in a reference cycle keeps the gloo group alive past `destroy_process_group`, and its worker threads then release
    tensors during interpreter shutdown, which aborts the process (the same message)."""
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        try:
            dist.barrier()
        except RuntimeError:  # a group a timed-out collective already broke: nothing left to wait for
            pass
        dist.destroy_process_group()
        gc.collect()


def shard(items: list, d: Dist) -> list:
    """This process's share of `items` (every world-th one, starting at its rank)."""
    return items[d.rank::d.world]
