"""The frozen passes' vision-feature memo (harness/sampling/feature_memo.py): features read from a memo filled by
other batches are the features the pass computes itself, bit for bit, and the memo forgets them when its
snapshot is written."""

from __future__ import annotations

import pytest
import torch

from harness.models.trainable import unwrap
from harness.policy.snapshots import SnapshotStore
from harness.sampling.feature_memo import FeatureMemo, SnapshotFeatures
from harness.sampling.lean_forward import sequence_logits
from harness.sampling.lean_prefill import image_features
from tests.harness.sampling.test_lean_forward import _setup


@pytest.fixture(scope="module")
def setup(tiny_tokenizer, tiny_processor, xray_images):
    model, ids, mask, pv, grid = _setup(tiny_tokenizer, tiny_processor, xray_images, "sdpa", torch.float32)
    return model, ids, mask, pv, grid


def _keys(grid):
    # _setup repeats each of 3 images 3 times, group-major: image i of row r is prompt r // 3
    return [(r // 3, 0) for r in range(grid.shape[0])]


@torch.no_grad()
def test_memo_features_equal_the_computed_ones_across_batches(setup):
    model, ids, mask, pv, grid = setup
    hf = unwrap(model)
    keys = _keys(grid)
    plain = image_features(hf, pv, grid, dedupe=True)
    # Fill the memo from a batch of the last rows only (other images, other batch), then ask for all rows.
    memo = FeatureMemo()
    sizes = grid.prod(-1).tolist()
    tail = sum(sizes[:6])
    image_features(hf, pv[tail:], grid[6:], dedupe=True, keys=keys[6:], memo=memo)
    assert (memo.hits, memo.misses, len(memo.features)) == (0, 1, 1)  # one distinct image among rows 6-8
    got = image_features(hf, pv, grid, dedupe=True, keys=keys, memo=memo)
    assert torch.equal(got, plain)
    assert len(memo.features) == 3 and (memo.hits, memo.misses) == (1, 3)  # looked up once per distinct image
    again = image_features(hf, pv, grid, dedupe=True, keys=keys, memo=memo)
    assert torch.equal(again, plain) and memo.hits == 1 + 3


@torch.no_grad()
def test_sequence_logits_with_a_memo_are_bit_for_bit_those_without(setup):
    model, ids, mask, pv, grid = setup
    memo = FeatureMemo()
    without = sequence_logits(model, ids, mask, pv, grid, logits_to_keep=7)
    for _ in range(2):  # a miss, then a hit for every image
        with_memo = sequence_logits(model, ids, mask, pv, grid, logits_to_keep=7, image_keys=_keys(grid), memo=memo)
        assert torch.equal(with_memo, without)
    assert (memo.hits, memo.misses) == (3, 3)


def test_a_memo_needs_a_pass_without_grad_and_one_key_per_image(setup):
    model, ids, mask, pv, grid = setup
    with pytest.raises(ValueError, match="without grad"):
        sequence_logits(model, ids, mask, pv, grid, logits_to_keep=7, image_keys=_keys(grid), memo=FeatureMemo())
    with torch.no_grad(), pytest.raises(ValueError, match="8 image keys for 9 images"):
        sequence_logits(model, ids, mask, pv, grid, logits_to_keep=7, image_keys=_keys(grid)[:8], memo=FeatureMemo())


def test_a_memo_forgets_when_its_snapshot_is_written(setup):
    model = setup[0]
    store = SnapshotStore(model)
    store.capture("ref")
    memos = SnapshotFeatures()
    memo = memos.memo("ref", store.version("ref"))
    memo.put(("a", 0), torch.ones(2, 3))
    assert memos.memo("ref", store.version("ref")).get(("a", 0)) is not None  # unchanged: kept
    for write in (lambda: store.ema_("ref", 0.5), lambda: store.copy("ref", "ref2"), lambda: store.capture("ref"),
                  lambda: store.load_state_dict(store.state_dict())):
        before = store.version("ref")
        write()
        if store.version("ref") == before:  # copy into another snapshot leaves "ref" as it was
            assert memos.memo("ref", store.version("ref")).get(("a", 0)) is not None
            continue
        assert memos.memo("ref", store.version("ref")).get(("a", 0)) is None
        memos.memo("ref", store.version("ref")).put(("a", 0), torch.ones(2, 3))
    assert store.version("ref2") == 2  # created by the copy, then loaded


def test_a_full_memo_keeps_what_it_has_and_stores_no_more():
    memo = FeatureMemo(max_elements=10)
    memo.put("a", torch.ones(2, 4))
    memo.put("b", torch.ones(2, 4))  # 16 > 10: not kept
    assert set(memo.features) == {"a"} and memo.elements == 8
