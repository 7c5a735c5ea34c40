"""The batches of the supervised loop (warm-up, SFT, stage 0) through a torch DataLoader (issue 14).

Decoding the images of a step (harness/data/streaming.py decodes on access) and running the processor are
CPU work that `train.num_workers` worker processes can do ahead of the model. One item is one optimizer
step: this process's share of the step's samples (harness.schedule.epoch_order, so the order stays a pure
function of (seed, epoch) and a resumed run sees the same batches), encoded as its micro-batches. Items are
indexed by step, so workers cannot reorder them: any number of workers yields what 0 does.
"""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset

from harness.batching import encode_sft
from harness.parallel.distributed import Dist, shard
from harness.schedule import epoch_order


class StepBatches(Dataset):
    """Item k: the encoded micro-batches (a list of encode_sft dicts; empty where this process has no sample
    in the step) of optimizer step `first_step + k`, for steps first_step .. total_steps - 1."""

    def __init__(self, data, processor, *, batch_size: int, micro_batch_size: int | None, seed: int,
                 first_step: int, total_steps: int, steps_per_epoch: int, max_report_tokens: int,
                 dist: Dist | None = None):
        self.data, self.processor, self.dist = data, processor, dist or Dist()
        self.batch_size, self.micro, self.seed = batch_size, micro_batch_size, seed
        self.first, self.total, self.per_epoch = first_step, total_steps, steps_per_epoch
        self.max_report_tokens = max_report_tokens

    def __len__(self) -> int:
        return max(0, self.total - self.first)

    def indices(self, step: int) -> list[int]:
        """This process's sample indices of optimizer step `step`."""
        epoch, pos = divmod(step, self.per_epoch)
        order = epoch_order(len(self.data), self.seed, epoch)
        return shard(order[pos * self.batch_size:(pos + 1) * self.batch_size], self.dist)

    def __getitem__(self, k: int) -> list[dict]:
        if not 0 <= k < len(self):
            raise IndexError(f"step item {k} outside 0..{len(self) - 1}")
        idx = self.indices(self.first + k)
        micro = self.micro or max(len(idx), 1)
        parts = [self.data.take(idx[s:s + micro]) for s in range(0, len(idx), micro)]
        return [encode_sft(self.processor, p.images, p.instructions, p.reports, self.max_report_tokens)
                for p in parts]


def step_loader(batches: StepBatches, num_workers: int, device: torch.device, seed: int) -> DataLoader:
    """Items in step order; pinned memory when the model is on a GPU (faster, asynchronous copies)."""
    if num_workers < 0:
        raise ValueError(f"train.num_workers = {num_workers}: must be >= 0")
    # A private generator: a DataLoader draws its workers' base seed from it, and from the global RNG without
    # one, which would shift the global stream (LoRA dropout in SFT) against a run without a loader.
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(batches, batch_size=None, shuffle=False, num_workers=num_workers,
                      pin_memory=device.type == "cuda", generator=generator)
