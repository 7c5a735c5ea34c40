"""harness/sampling/mrope_index.py: the batched M-RoPE positions equal transformers' get_rope_index exactly."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import Qwen2_5_VLConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

from harness.sampling.hf_api import get_rope_index
from harness.sampling.mrope_index import _image_positions, mrope_positions, token_type_rope_index

CFG = Qwen2_5_VLConfig()
IMG, START, END, VIDEO = CFG.image_token_id, CFG.vision_start_token_id, CFG.vision_end_token_id, CFG.video_token_id


class Reference(SimpleNamespace):
    """transformers' own get_rope_index on a config (it reads nothing else of the model; 5.x also its
    get_vision_position_ids)."""

    get_rope_index = Qwen2_5_VLModel.get_rope_index
    get_vision_position_ids = getattr(Qwen2_5_VLModel, "get_vision_position_ids", None)


MODEL = Reference(config=CFG)


def random_batch(rng: torch.Generator, padding: str):
    """Rows of text runs and images (<|vision_start|>, image tokens, <|vision_end|>), padded on one side."""
    rows, grids = [], []
    for _ in range(int(torch.randint(1, 6, (1,), generator=rng))):
        row = []
        for _ in range(int(torch.randint(0, 4, (1,), generator=rng))):
            row += torch.randint(10, 1000, (int(torch.randint(0, 5, (1,), generator=rng)),), generator=rng).tolist()
            t, h, w = (int(torch.randint(1, 3, (1,), generator=rng)), 2 * int(torch.randint(1, 4, (1,), generator=rng)),
                       2 * int(torch.randint(1, 5, (1,), generator=rng)))
            grids.append([t, h, w])
            row += [START] + [IMG] * (t * h * w // 4) + [END]
        row += torch.randint(10, 1000, (int(torch.randint(1, 6, (1,), generator=rng)),), generator=rng).tolist()
        rows.append(row)
    length = max(map(len, rows))
    ids = torch.zeros(len(rows), length, dtype=torch.long)
    mask = torch.zeros(len(rows), length, dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(length - len(row), length) if padding == "left" else slice(0, len(row))
        ids[i, span], mask[i, span] = torch.tensor(row), 1
    grid = torch.tensor(grids, dtype=torch.long).view(-1, 3)
    return ids, grid, (None if padding == "none" and all(len(r) == length for r in rows) else mask)


@pytest.mark.parametrize("padding", ["left", "right", "none"])
def test_equals_get_rope_index_on_random_batches(padding):
    rng = torch.Generator().manual_seed({"left": 1, "right": 2, "none": 3}[padding])
    handled = 0
    for _ in range(60):
        ids, grid, mask = random_batch(rng, padding)
        if grid.numel() == 0:
            continue
        want_pos, want_delta = get_rope_index(MODEL, ids, grid, mask)
        fast = _image_positions(CFG, ids, grid, mask)
        handled += fast is not None
        pos, delta = mrope_positions(MODEL, ids, grid, mask)
        assert pos.dtype == want_pos.dtype and delta.dtype == want_delta.dtype
        assert torch.equal(pos, want_pos) and torch.equal(delta, want_delta)
    assert handled >= 40  # the batched path, not the fallback, is what was compared


def test_a_hand_computed_row():
    """Two text tokens, one 1 x 4 x 6 image (merged 2 x 3), one text token; one left-padding position."""
    ids = torch.tensor([[0, 11, START, *[IMG] * 6, END, 12]])
    mask = torch.tensor([[0] + [1] * 10])
    pos, delta = mrope_positions(MODEL, ids, torch.tensor([[1, 4, 6]]), mask)
    # text 0, 1 (11, START); image base 2: rows 0..1, columns 0..2; then base + max(2, 3) = 5, 6 (END, 12);
    # padding at 1 and the delta against the padded length in 4.57, 0 and the real length in 5.x.
    v5 = token_type_rope_index()
    p = 0 if v5 else 1
    assert pos[:, 0].tolist() == [[p, 0, 1, 2, 2, 2, 2, 2, 2, 5, 6],
                                  [p, 0, 1, 2, 2, 2, 3, 3, 3, 5, 6],
                                  [p, 0, 1, 2, 3, 4, 2, 3, 4, 5, 6]]
    assert delta.tolist() == [[6 + 1 - (10 if v5 else 11)]]


def test_what_it_does_not_handle_goes_to_get_rope_index():
    ids = torch.tensor([[11, START, *[IMG] * 4, END, 12]])
    grid = torch.tensor([[1, 4, 4]])
    assert _image_positions(CFG, ids, grid, None) is not None
    video = ids.clone()
    video[0, 0] = VIDEO
    gappy = torch.tensor([[1, 1, 1, 0, 1, 1, 1, 1]])  # real tokens not one run
    for bad_ids, bad_grid, bad_mask in ((video, grid, None), (ids, grid, gappy), (ids, torch.tensor([[1, 4, 8]]), None),
                                        (ids, None, None)):
        assert _image_positions(CFG, bad_ids, bad_grid, bad_mask) is None
    no_start = ids.clone()
    no_start[0, 1] = 13  # image tokens without <|vision_start|>: get_rope_index counts no image there
    assert _image_positions(CFG, no_start, grid, None) is None
