"""sequence_logits (harness/sampling/lean_forward.py) gives the logits of the plain model call bit for bit, and its
gradients bit for bit without image deduplication, to float rounding with it (the default on the CPU)."""

from __future__ import annotations

import pytest
import torch

from harness.models.precision import autocast_for
from harness.models.tiny import build_tiny_model
from harness.models.trainable import add_lora, set_trainable, unwrap
from harness.prompting.batching import encode_repeated
from harness.sampling.hf_api import model_kwargs_for_positions
from harness.sampling.lean_forward import sequence_logits

INSTRUCTIONS = ["describe", "write the findings section please", "x"]


def _setup(tokenizer, processor, images, attn, dtype):
    model = build_tiny_model(tokenizer, seed=0, text_hidden=32, text_layers=2, vision_hidden=16, vision_depth=1,
                             image_size=56)
    model.set_attn_implementation(attn)
    model = add_lora(model.to(dtype), r=4, alpha=8, dropout=0.0)
    set_trainable(model, "rl")
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    model.eval()
    batch = encode_repeated(processor, [[im] for im in images[:3]], INSTRUCTIONS, 3)
    # prompt + a "response" of random tokens with right padding in some rows (as rollouts after their end)
    resp = torch.randint(10, len(tokenizer) - 20, (batch["input_ids"].shape[0], 6), generator=gen)
    resp_mask = torch.ones_like(resp)
    resp_mask[::4, 3:] = 0
    ids = torch.cat([batch["input_ids"], resp], dim=1)
    mask = torch.cat([batch["attention_mask"], resp_mask], dim=1)
    return model, ids, mask, batch["pixel_values"], batch["image_grid_thw"]


def _plain(model, ids, mask, pv, grid):
    # transformers 5.x computes M-RoPE positions only from the token types its processor returns
    return model(input_ids=ids, attention_mask=mask, pixel_values=pv, image_grid_thw=grid, logits_to_keep=7,
                 use_cache=False, **model_kwargs_for_positions(unwrap(model), ids)).logits


@pytest.mark.parametrize("attn,dtype", [("eager", torch.float32), ("sdpa", torch.float32), ("sdpa", torch.bfloat16)])
def test_logits_and_gradients_equal_the_model_call(tiny_tokenizer, tiny_processor, xray_images, attn, dtype):
    model, ids, mask, pv, grid = _setup(tiny_tokenizer, tiny_processor, xray_images, attn, dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = {}
    lean = lambda *a: sequence_logits(*a, logits_to_keep=7, dedupe_images=False)  # noqa: E731
    for name, fn in (("plain", _plain), ("lean", lean)):
        model.zero_grad(set_to_none=True)
        with autocast_for(model):
            logits = fn(model, ids, mask, pv, grid)
        (logits.float().square().mean() + logits.float()[:, -1, :5].sum()).backward()
        grads[name] = (logits.detach(), [p.grad.clone() for p in params])
    assert torch.equal(grads["lean"][0], grads["plain"][0])
    assert all(torch.equal(a, b) for a, b in zip(grads["lean"][1], grads["plain"][1], strict=True))
    assert any(float(g.abs().sum()) > 0 for g in grads["plain"][1])


def test_passes_without_grad_encode_each_image_once(tiny_tokenizer, tiny_processor, xray_images):
    model, ids, mask, pv, grid = _setup(tiny_tokenizer, tiny_processor, xray_images, "eager", torch.float32)
    patches = []
    hook = unwrap(model).model.visual.register_forward_hook(lambda m, a, o: patches.append(a[0].shape[0]))
    with torch.no_grad(), autocast_for(model):
        want = _plain(model, ids, mask, pv, grid)
        got = sequence_logits(model, ids, mask, pv, grid, logits_to_keep=7)
    hook.remove()
    assert patches == [pv.shape[0], pv.shape[0] // 3]
    assert torch.equal(got, want)


@pytest.mark.parametrize("attn,dtype", [("eager", torch.float32), ("sdpa", torch.float32), ("sdpa", torch.bfloat16)])
def test_the_training_pass_encodes_each_image_once_with_the_same_logits_and_gradients_to_rounding(
        tiny_tokenizer, tiny_processor, xray_images, attn, dtype):
    """issue 27: a pass with grad on the CPU encodes each distinct image once (a rollout repeats each prompt G = 3
    times here); its logits are the plain call's bit for bit, its gradients the same to float rounding (the vision
    tower's are summed over the G copies before its backward instead of after)."""
    model, ids, mask, pv, grid = _setup(tiny_tokenizer, tiny_processor, xray_images, attn, dtype)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    patches = []
    hook = unwrap(model).model.visual.register_forward_hook(lambda m, a, o: patches.append(a[0].shape[0]))
    grads = {}
    for name, fn in (("plain", _plain), ("lean", lambda *a: sequence_logits(*a, logits_to_keep=7))):
        model.zero_grad(set_to_none=True)
        with autocast_for(model):
            logits = fn(model, ids, mask, pv, grid)
        (logits.float().square().mean() + logits.float()[:, -1, :5].sum()).backward()
        grads[name] = (logits.detach(), [p.grad.clone() for _, p in params])
    hook.remove()
    assert patches == [pv.shape[0], pv.shape[0] // 3]
    assert torch.equal(grads["lean"][0], grads["plain"][0])
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2}[dtype]
    vision = 0
    for (name, _), a, b in zip(params, grads["lean"][1], grads["plain"][1], strict=True):
        torch.testing.assert_close(a.float(), b.float(), rtol=tol, atol=tol * float(b.float().abs().max() + 1e-12))
        vision += "visual" in name and float(b.float().abs().sum()) > 0
    assert vision > 0  # the vision tower's gradients are compared, not only the LM's
    # In train mode (rl.policy_dropout) every copy keeps its own encoding: dropout masks differ per copy.
    model.train()
    patches.clear()
    hook = unwrap(model).model.visual.register_forward_hook(lambda m, a, o: patches.append(a[0].shape[0]))
    with autocast_for(model):
        sequence_logits(model, ids, mask, pv, grid, logits_to_keep=7)
    hook.remove()
    assert patches == [pv.shape[0]]
