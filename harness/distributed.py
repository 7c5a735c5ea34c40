"""Data parallelism for the RL stage (one process per GPU), on torch.distributed.

Launch any stage command with torchrun or accelerate, which set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT:

    torchrun --nproc_per_node 8 -m harness.cli train rl CONFIG init_from=.../model
    accelerate launch --num_processes 8 -m harness.cli train rl CONFIG init_from=.../model

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
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class Dist:
    rank: int = 0
    world: int = 1

    @property
    def active(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.active:
            dist.barrier()

    @contextlib.contextmanager
    def main_first(self):
        """Rank 0 runs the block first (e.g. builds a cache or a data set), then the others (which read it)."""
        if not self.main:
            self.barrier()
        yield
        if self.main:
            self.barrier()

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

    @torch.no_grad()
    def broadcast_parameters(self, params: list[torch.Tensor]) -> None:
        """Copy rank 0's values into `params` on every process (identical starting points)."""
        if self.active:
            for p in params:
                dist.broadcast(p.data, src=0)

    @torch.no_grad()
    def average_gradients(self, params: list[torch.Tensor]) -> None:
        """p.grad <- mean over processes (a parameter without a gradient contributes zeros)."""
        if not self.active:
            return
        handles = []
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            handles.append(dist.all_reduce(p.grad, async_op=True))
        for h in handles:
            h.wait()
        for p in params:
            p.grad.div_(self.world)

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


def init_distributed() -> Dist:
    """The process group of a torchrun / accelerate launch (NCCL on GPUs, gloo on CPUs), or one process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group(backend="nccl")
        else:
            dist.init_process_group(backend="gloo")
    return Dist(rank=dist.get_rank(), world=dist.get_world_size())


def finalize() -> None:
    """Leave the process group (at the end of a launched command)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def shard(items: list, d: Dist) -> list:
    """This process's share of `items` (every world-th one, starting at its rank)."""
    return items[d.rank::d.world]
