"""The supervised loop's DataLoader (harness/stages/lm_batches.py): workers change where batches are decoded,
never which batches come or in what order; the loader leaves the global RNG alone (LoRA dropout)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from harness.config import TrainConfig
from harness.data.datasets import Sample
from harness.data.streaming import LazyViews
from harness.models.tiny import build_tiny_model
from harness.models.trainable import set_trainable
from harness.parallel.distributed import Dist
from harness.prompting.batching import encode_sft
from harness.runs.records import RunDir
from harness.stages.lm_batches import StepBatches, step_loader
from harness.stages.lm_train import LMData, train_lm
from harness.training.schedule import epoch_order

REPORTS = ["the heart size is normal .", "mild cardiomegaly . small left pleural effusion .",
           "the lungs are clear .", "no acute osseous abnormality . no focal consolidation .",
           "small left pleural effusion .", "right lower lobe opacity may represent pneumonia .",
           "endotracheal tube in place ."]


@pytest.fixture
def streamed(tmp_path):
    """Seven studies on disk, decoded on access (as the stages load them), with reports of unequal length."""
    rng = np.random.default_rng(3)
    samples = []
    for i, report in enumerate(REPORTS):
        path = tmp_path / f"img{i}.png"
        Image.fromarray(rng.integers(0, 255, (50 + 3 * i, 61), dtype=np.uint8)).save(path)
        samples.append(Sample(f"s{i}", report, [path]))
    return LMData(LazyViews(samples, 56), [f"write {i}" for i in range(len(REPORTS))], REPORTS)


def _items(data, processor, workers, *, first=0, total=6, micro=2, dist=None):
    batches = StepBatches(data, processor, batch_size=3, micro_batch_size=micro, seed=5, first_step=first,
                          total_steps=total, steps_per_epoch=3, max_report_tokens=20, dist=dist)
    return list(step_loader(batches, workers, torch.device("cpu"), seed=5))


def _assert_same(a, b):
    assert len(a) == len(b)
    for step_a, step_b in zip(a, b, strict=True):
        assert len(step_a) == len(step_b)
        for x, y in zip(step_a, step_b, strict=True):
            assert x.keys() == y.keys()
            for k in x:
                assert torch.equal(x[k], y[k]), k


@pytest.mark.parametrize("micro", [None, 2])
def test_two_workers_yield_the_batches_of_none_in_the_same_order(streamed, tiny_processor, micro):
    """7 samples, batch 3: each epoch has steps of 3, 3 and 1 samples, cut into micro-batches of 2 (or not)."""
    plain = _items(streamed, tiny_processor, 0, micro=micro)
    _assert_same(_items(streamed, tiny_processor, 2, micro=micro), plain)
    assert len(plain) == 6
    sizes = [[len(b["input_ids"]) for b in step] for step in plain]
    assert sizes == ([[2, 1], [2, 1], [1]] * 2 if micro else [[3], [3], [1]] * 2)
    if micro is None:  # each step is the epoch_order slice the loop encoded before the loader existed
        for step, items in enumerate(plain):
            epoch, pos = divmod(step, 3)
            part = streamed.take(epoch_order(7, 5, epoch)[pos * 3:(pos + 1) * 3])
            one = encode_sft(tiny_processor, part.images, part.instructions, part.reports, 20)
            _assert_same([items], [[one]])


def test_a_resumed_loader_starts_at_its_step(streamed, tiny_processor):
    whole = _items(streamed, tiny_processor, 0)
    _assert_same(_items(streamed, tiny_processor, 2, first=4), whole[4:])


def test_each_process_gets_its_share(streamed, tiny_processor):
    """Two data-parallel processes: rank r takes every second sample of each step; the last step of an epoch
    (1 sample) leaves rank 1 with none (an empty item, which the loop handles)."""
    shares = {r: _items(streamed, tiny_processor, 2, micro=None, dist=Dist(rank=r, world=2)) for r in (0, 1)}
    assert [[len(b["input_ids"]) for b in s] for s in shares[0]] == [[2], [2], [1]] * 2
    assert [[len(b["input_ids"]) for b in s] for s in shares[1]] == [[1], [1], []] * 2


def test_the_loader_leaves_the_global_rng_alone(streamed, tiny_processor):
    torch.manual_seed(11)
    before = torch.get_rng_state()
    _items(streamed, tiny_processor, 0, total=2)
    assert torch.equal(torch.get_rng_state(), before)


def test_pinned_memory_only_for_a_gpu(streamed, tiny_processor):
    batches = StepBatches(streamed, tiny_processor, batch_size=3, micro_batch_size=None, seed=0, first_step=0,
                          total_steps=1, steps_per_epoch=3, max_report_tokens=20)
    assert step_loader(batches, 0, torch.device("cuda", 0), 0).pin_memory
    assert not step_loader(batches, 0, torch.device("cpu"), 0).pin_memory
    with pytest.raises(ValueError, match="train.num_workers = -1"):
        step_loader(batches, -1, torch.device("cpu"), 0)


def test_train_lm_with_workers_takes_the_same_steps(tiny_tokenizer, tiny_processor, streamed, tmp_path):
    """Stage 2's setting: LoRA with dropout draws from the global RNG during training, so any draw the loader
    made would change the losses; two workers and none give the same logged steps and parameters."""
    from harness.models.trainable import add_lora

    runs = {}
    for workers in (0, 2):
        model = build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=1, vision_hidden=16,
                                 image_size=56)
        model = add_lora(model, r=4, alpha=8, dropout=0.3)
        set_trainable(model, "sft")
        torch.manual_seed(0)
        cfg = TrainConfig(epochs=1, batch_size=3, micro_batch_size=2, lr=1e-2, scheduler="constant",
                          num_workers=workers, checkpoint_every=0)
        train_lm(model, tiny_processor, streamed, None, cfg, RunDir(tmp_path / str(workers)), seed=1,
                 max_report_tokens=20, progress=False)
        runs[workers] = (dict(model.named_parameters()), RunDir(tmp_path / str(workers)).steps())
    (a, steps_a), (b, steps_b) = runs[0], runs[2]
    keys = ("step", "loss", "grad_norm", "tokens")
    assert [[s[k] for k in keys] for s in steps_b] == [[s[k] for k in keys] for s in steps_a]
    assert len(steps_a) == 3
    for n in a:
        assert torch.equal(a[n], b[n]), n


def test_train_num_workers_is_validated(tmp_path):
    from harness.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="train.num_workers"):
        load_config(None, ["train.num_workers=-2"])


def test_sample_lengths_are_the_encoded_lengths_up_to_one_constant(streamed, tiny_processor):
    """train.group_by_length sorts by sample_lengths: each sample encoded alone (no padding) is that many tokens
    plus the chat template's, the same for all; a report longer than max_report_tokens counts as truncated."""
    from harness.stages.lm_batches import sample_lengths

    for max_tokens in (20, 4):
        lengths = sample_lengths(tiny_processor, streamed, max_tokens)
        encoded = [encode_sft(tiny_processor, [streamed.images[i]], [streamed.instructions[i]],
                              [streamed.reports[i]], max_tokens)["input_ids"].shape[1] for i in range(len(REPORTS))]
        offsets = {e - n for e, n in zip(encoded, lengths, strict=True)}
        assert len(offsets) == 1, (encoded, lengths)
        # unequal reports; cut to 4 tokens, every one is as long as the others
        assert (len(set(lengths)) > 1) == (max_tokens == 20)
    two_views = LMData([[Image.new("RGB", (56, 56))] * 2, [Image.new("RGB", (56, 56))]], ["a", "a"], ["b", "b"])
    one, two = sample_lengths(tiny_processor, two_views, 20)[::-1]
    grid = tiny_processor.image_processor(images=[two_views.images[1][0]], return_tensors="pt")["image_grid_thw"]
    assert two - one == int(grid.prod()) // tiny_processor.image_processor.merge_size ** 2


def test_length_grouped_batches_follow_the_grouped_order_and_resume(streamed, tiny_processor):
    """With lengths, step k's samples are the slice of length_grouped_order for its epoch (not epoch_order's);
    workers and a resumed loader give the same items, as without."""
    from harness.stages.lm_batches import sample_lengths
    from harness.training.schedule import length_grouped_order

    lengths = sample_lengths(tiny_processor, streamed, 20)

    def items(workers, first=0):
        batches = StepBatches(streamed, tiny_processor, batch_size=3, micro_batch_size=None, seed=5,
                              first_step=first, total_steps=6, steps_per_epoch=3, max_report_tokens=20,
                              lengths=lengths)
        return list(step_loader(batches, workers, torch.device("cpu"), seed=5))

    plain = items(0)
    grouped = [length_grouped_order(lengths, 3, 5, epoch) for epoch in (0, 1)]
    assert grouped != [epoch_order(7, 5, epoch) for epoch in (0, 1)]
    for step, got in enumerate(plain):
        epoch, pos = divmod(step, 3)
        part = streamed.take(grouped[epoch][pos * 3:(pos + 1) * 3])
        _assert_same([got], [[encode_sft(tiny_processor, part.images, part.instructions, part.reports, 20)]])
    _assert_same(items(2), plain)
    _assert_same(items(0, first=4), plain[4:])
    with pytest.raises(ValueError, match="lengths: 2 values for 7 samples"):
        StepBatches(streamed, tiny_processor, batch_size=3, micro_batch_size=None, seed=5, first_step=0,
                    total_steps=6, steps_per_epoch=3, max_report_tokens=20, lengths=[1, 2])
