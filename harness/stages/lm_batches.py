"""The batches of the supervised loop (warm-up, SFT, stage 0) through a torch DataLoader (issue 14).

Decoding the images of a step (harness/data/streaming.py decodes on access) and running the processor are
CPU work that `train.num_workers` worker processes can do ahead of the model. One item is one optimizer
step: this process's share of the step's samples (harness.training.schedule.epoch_order, so the order stays a pure
function of (seed, epoch) and a resumed run sees the same batches), encoded as its micro-batches. Items are
indexed by step, so workers cannot reorder them: any number of workers yields what 0 does. With `lengths`
(train.group_by_length) each epoch's order is harness.training.schedule.length_grouped_order instead: batches of samples
of similar length, still a pure function of (seed, epoch).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from harness.parallel.distributed import Dist, shard
from harness.prompting.batching import encode_sft
from harness.training.schedule import epoch_order, length_grouped_order


class StepBatches(Dataset):
    """Item k: the encoded micro-batches (a list of encode_sft dicts; empty where this process has no sample
    in the step) of optimizer step `first_step + k`, for steps first_step .. total_steps - 1."""

    def __init__(self, data, processor, *, batch_size: int, micro_batch_size: int | None, seed: int,
                 first_step: int, total_steps: int, steps_per_epoch: int, max_report_tokens: int | None,
                 dist: Dist | None = None, lengths: Sequence[int] | None = None):
        if lengths is not None and len(lengths) != len(data):
            raise ValueError(f"lengths: {len(lengths)} values for {len(data)} samples")
        self.data, self.processor, self.dist, self.lengths = data, processor, dist or Dist(), lengths
        self.batch_size, self.micro, self.seed = batch_size, micro_batch_size, seed
        self.first, self.total, self.per_epoch = first_step, total_steps, steps_per_epoch
        self.max_report_tokens = max_report_tokens

    def __len__(self) -> int:
        return max(0, self.total - self.first)

    def indices(self, step: int) -> list[int]:
        """This process's sample indices of optimizer step `step`."""
        epoch, pos = divmod(step, self.per_epoch)
        if self.lengths is None:
            order = epoch_order(len(self.data), self.seed, epoch)
        else:
            order = length_grouped_order(self.lengths, self.batch_size, self.seed, epoch)
        return shard(order[pos * self.batch_size:(pos + 1) * self.batch_size], self.dist)

    def __getitem__(self, k: int) -> list[dict]:
        if not 0 <= k < len(self):
            raise IndexError(f"step item {k} outside 0..{len(self) - 1}")
        idx = self.indices(self.first + k)
        micro = self.micro or max(len(idx), 1)
        parts = [self.data.take(idx[s:s + micro]) for s in range(0, len(idx), micro)]
        return [encode_sft(self.processor, p.images, p.instructions, p.reports, self.max_report_tokens)
                for p in parts]


def sample_lengths(processor, data, max_report_tokens: int | None) -> list[int]:
    """Each sample's encoded length up to a constant that all share (the chat template): its instruction's and
    (truncated) report's tokens plus its views' image tokens. The order of train.group_by_length sorts by it."""
    tok = processor.tokenizer
    instructions = tok(list(data.instructions), add_special_tokens=False)["input_ids"]
    reports = tok(list(data.reports), add_special_tokens=False)["input_ids"]
    per_view = 0
    if len(data):
        views = data.images[0]
        if views:  # every view is resized to one square size, so one view tells the count
            grid = processor.image_processor(images=[views[0]], return_tensors="pt")["image_grid_thw"]
            per_view = int(grid.prod()) // processor.image_processor.merge_size ** 2
    return [len(i) + len(r[:max_report_tokens]) + per_view * view_count(data.images, k)
            for k, (i, r) in enumerate(zip(instructions, reports, strict=True))]


def view_count(images, k: int) -> int:
    """How many views sample k has, without decoding them where the images are decoded lazily."""
    count = getattr(images, "view_count", None)
    return count(k) if count is not None else len(images[k])


def step_loader(batches: StepBatches, num_workers: int, device: torch.device, seed: int) -> DataLoader:
    """Items in step order; pinned memory when the model is on a GPU (faster, asynchronous copies)."""
    if num_workers < 0:
        raise ValueError(f"train.num_workers = {num_workers}: must be >= 0")
    # A private generator: a DataLoader draws its workers' base seed from it, and from the global RNG without
    # one, which would shift the global stream (LoRA dropout in SFT) against a run without a loader.
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(batches, batch_size=None, shuffle=False, num_workers=num_workers,
                      pin_memory=device.type == "cuda", generator=generator)
