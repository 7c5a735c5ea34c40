"""harness/models/init_order.py: the tiny model's initial weights are transformers 4.57.6's under any version."""

from __future__ import annotations

import hashlib

import pytest
import torch

from harness.models.init_order import _key, canonical_order
from harness.models.tiny import build_tiny_model

SMALL = dict(text_hidden=32, text_layers=1, vision_hidden=16, vision_depth=1, image_size=56)


def _hash(model) -> str:
    sd = model.state_dict()
    h = hashlib.sha256()
    for k in sorted(sd):
        h.update(k.encode())
        h.update(sd[k].float().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


# Computed with transformers 4.57.6 from the plain `torch.manual_seed(0); Qwen2_5_VLForConditionalGeneration(cfg)`
# (the construction before this module existed), and the generator's next torch.rand(1) after it.
@pytest.mark.parametrize("sizes,want,after", [({}, "7c06d808d6e1b2e9", 0.5870321393013),
                                              (SMALL, "3bc8eb357fe6f530", 0.2929772138595581)])
def test_initial_weights_are_pinned(tiny_tokenizer, sizes, want, after):
    model = build_tiny_model(tiny_tokenizer, seed=0, **sizes)
    assert _hash(model) == want
    assert torch.rand(1).item() == after


def test_the_order_moves_vision_refills_after_the_text_ones():
    """5.x's order (vision built and re-filled, then text built and re-filled, then the lm_head) -> 4.57's."""
    t = {n: torch.empty(2) for n in ("vis", "txt", "head")}
    names = {_key(t["vis"]): "visual.w", _key(t["txt"]): "language_model.w"}
    log = [dict(tensor=t[n]) for n in ("vis", "vis", "txt", "txt", "head", "head")]
    assert canonical_order(log, names) == [0, 2, 3, 1, 4, 5]
    assert canonical_order([log[i] for i in (0, 2, 3, 1, 4, 5)], names) == [0, 1, 2, 3, 4, 5]
