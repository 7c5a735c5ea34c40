"""The lean prefill (harness/sampling/lean_prefill.py) equals generate's first step: mask, image features, logits,
K/V."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from transformers import DynamicCache
from transformers.masking_utils import create_causal_mask

from harness.models.precision import autocast_for
from harness.models.tiny import build_tiny_model
from harness.models.trainable import add_lora, set_trainable, unwrap
from harness.prompting.batching import encode_prompts
from harness.sampling.hf_api import first_step_inputs
from harness.sampling.lean_decode import SlotCache
from harness.sampling.lean_prefill import image_features, prefill, prefill_mask, unique_images


def _model(tokenizer, attn="eager", dtype=torch.float32):
    model = build_tiny_model(tokenizer, seed=0, text_hidden=32, text_layers=2, vision_hidden=16, vision_depth=1,
                             image_size=56)
    model.set_attn_implementation(attn)
    model = add_lora(model.to(dtype), r=4, alpha=8, dropout=0.0)
    set_trainable(model, "rl")
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model.eval()


def _grouped_batch(processor, images, group):
    """Group-major rows (each prompt G times in a row, as rollouts) with prompts of different lengths."""
    instr = ["describe", "write the findings section please", "x"]
    return encode_prompts(processor, [[images[i]] for i in range(3) for _ in range(group)],
                          [instr[i] for i in range(3) for _ in range(group)])


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("padded", [True, False])
def test_mask_equals_create_causal_mask(tiny_tokenizer, attn, dtype, padded):
    rng = np.random.default_rng(3)
    rows, P = 5, 11
    mask = torch.ones(rows, P, dtype=torch.long)
    if padded:
        for r in range(rows):
            mask[r, :int(rng.integers(0, 6))] = 0
    model = _model(tiny_tokenizer, attn)
    cfg = unwrap(model).config.get_text_config()
    cfg._attn_implementation = attn
    embeds = torch.zeros(rows, P, 4, dtype=dtype)
    # the arguments' names in transformers 4.57 / 5.20 / later 5.x (`input_embeds` / `inputs_embeds`,
    # `past_key_values` / `cache`, a `cache_position` in 4.57 only)
    names = inspect.signature(create_causal_mask).parameters
    kw = {"inputs_embeds" if "inputs_embeds" in names else "input_embeds": embeds,
          "cache" if "cache" in names else "past_key_values": DynamicCache(config=cfg)}
    if "cache_position" in names:
        kw["cache_position"] = torch.arange(P)
    want = create_causal_mask(config=cfg, attention_mask=mask, position_ids=None, **kw)
    got = prefill_mask(mask, attn, dtype)
    if want is None:
        assert got is None and attn == "sdpa" and not padded
    else:
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


def test_unique_images_finds_repeats_in_any_order():
    """Random sequences of repeated images (different grids too): first occurrences and the inverse map are
    right; an image that matches another at every sampled position but differs elsewhere stays distinct."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        n_distinct = int(rng.integers(1, 6))
        grids = [torch.tensor([1, 2 * int(rng.integers(1, 3)), 4]) for _ in range(n_distinct)]
        blocks = [torch.from_numpy(rng.normal(size=(int(g.prod()), 6)).astype(np.float32)) for g in grids]
        order = rng.integers(0, n_distinct, int(rng.integers(1, 12))).tolist()
        firsts, inverse = unique_images(torch.cat([blocks[i] for i in order]), torch.stack([grids[i] for i in order]))
        assert [order[f] for f in firsts] == list(dict.fromkeys(order))
        assert [order[firsts[u]] for u in inverse] == order
    a = torch.zeros(200, 6)
    b = a.clone()
    b[0, 1] = 1.5  # flat index 1: not on the 64-sample stride (1200 // 64 = 18)
    grid = torch.tensor([[1, 10, 20], [1, 10, 20]])
    assert unique_images(torch.cat([a, b]), grid) == ([0, 1], [0, 1])
    assert unique_images(torch.cat([a, a.clone()]), grid) == ([0], [0, 0])
    assert unique_images(torch.cat([b, a, b]).bfloat16(), torch.cat([grid, grid[:1]])) == ([0, 1], [0, 1, 0])


@pytest.mark.parametrize("attn,dtype", [("eager", torch.float32), ("sdpa", torch.bfloat16)])
def test_features_logits_and_kv_equal_generates_first_step(tiny_tokenizer, tiny_processor, xray_images, attn, dtype):
    """Each distinct image encoded once gives the features of the whole batch bit for bit, and the prefill
    gives generate's first-step logits, K/V and rope_deltas."""
    model = _model(tiny_tokenizer, attn, dtype)
    batch = _grouped_batch(tiny_processor, xray_images, 3)
    hf = unwrap(model)
    calls = []
    hook = hf.model.visual.register_forward_hook(lambda m, a, o: calls.append(a[0].shape[0]))
    P = batch["input_ids"].shape[1]
    with torch.no_grad(), autocast_for(model):
        full = image_features(hf, batch["pixel_values"], batch["image_grid_thw"], dedupe=False)
        once = image_features(hf, batch["pixel_values"], batch["image_grid_thw"], dedupe=True)
        assert calls == [batch["pixel_values"].shape[0], batch["pixel_values"].shape[0] // 3]
        assert torch.equal(full, once)

        cache = DynamicCache(config=hf.config.get_text_config())
        extra = {k: v for k, v in batch.items() if k not in ("input_ids", "attention_mask")}
        inputs = first_step_inputs(hf, batch["input_ids"], batch["attention_mask"], cache, 1, **extra)
        want = hf(**inputs, return_dict=True).logits[:, -1, :].float()
        want_deltas = hf.model.rope_deltas.clone()
        hf.model.rope_deltas = None
        slots = SlotCache(len(hf.model.language_model.layers), P + 4)
        got = prefill(hf, batch, slots, dedupe_images=True)
    hook.remove()
    assert torch.equal(got, want) and torch.equal(hf.model.rope_deltas, want_deltas)
    for i, layer in enumerate(cache.layers):
        assert torch.equal(slots.keys[i][:, :, :P], layer.keys) and torch.equal(slots.values[i][:, :, :P],
                                                                              layer.values)
