"""harness/training/schedule.py: the seeded epoch orders (random, and length-grouped for train.group_by_length)."""

from __future__ import annotations

import random

import pytest
import torch
from transformers.trainer_pt_utils import get_length_grouped_indices

from harness.training.schedule import epoch_order, length_grouped_order


def _padded_tokens(order, lengths, batch):
    return sum(max(lengths[i] for i in order[k:k + batch]) * len(order[k:k + batch])
               for k in range(0, len(order), batch))


def test_the_grouped_order_by_hand():
    """16 samples, batches of 2: transformers' rule gives 2 mega-batches x 2 = 4 samples each (16 // (2 * 4)),
    each sorted longest first, and the longest sample of all moved to the very front."""
    lengths = [5, 17, 3, 11, 2, 13, 7, 19, 1, 23, 29, 4, 31, 6, 8, 9]
    order = length_grouped_order(lengths, 2, seed=3, epoch=1)
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(3 * 100_003 + 1)).tolist()
    megas = [sorted(perm[k:k + 4], key=lambda i: lengths[i], reverse=True) for k in range(0, 16, 4)]
    top = max(range(4), key=lambda m: lengths[megas[m][0]])
    megas[0][0], megas[top][0] = megas[top][0], megas[0][0]
    assert order == [i for m in megas for i in m]
    assert order[0] == 12  # the 31-token sample
    assert length_grouped_order([], 2, 0, 0) == []
    with pytest.raises(ValueError, match="batch_size = 0"):
        length_grouped_order(lengths, 0, 0, 0)


@pytest.mark.parametrize("case", range(6))
def test_the_grouped_order_is_a_seeded_permutation_with_less_padding(case):
    rng = random.Random(case)
    batch = rng.choice([2, 4, 16, 32])
    n = rng.randint(8 * batch, 8 * batch + 400)  # >= 2 batches per mega-batch (fewer: no grouping, transformers' rule)
    lengths = [rng.randint(3, 90) for _ in range(n)]
    seed, epoch = rng.randint(0, 10), rng.randint(0, 5)
    order = length_grouped_order(lengths, batch, seed, epoch)
    assert sorted(order) == list(range(n))
    assert order == length_grouped_order(lengths, batch, seed, epoch)
    assert order != length_grouped_order(lengths, batch, seed, epoch + 1)
    # transformers' own function on the generator epoch_order draws from
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    assert order == list(get_length_grouped_indices(lengths, batch, generator=g))
    assert _padded_tokens(order, lengths, batch) < _padded_tokens(epoch_order(n, seed, epoch), lengths, batch)


def test_epoch_order_is_pinned():
    """The random order every run without group_by_length has used (its stage keys assume it)."""
    assert epoch_order(10, 0, 1) == [5, 6, 1, 2, 0, 8, 9, 3, 7, 4]
