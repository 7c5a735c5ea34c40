"""`logits_to_keep` as an index tensor: the same logits as the int, and no per-row copy of the lm_head weight."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from harness.models.logit_positions import last_hidden, last_positions


def _largest_allocation_mb(fn) -> float:
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return max(e.cpu_memory_usage for e in prof.key_averages()) / 2**20


def test_last_positions_are_the_tail():
    assert last_positions(3, 7).tolist() == [4, 5, 6]
    assert last_positions(7, 7).tolist() == list(range(7))
    for k in (0, 8):
        with pytest.raises(ValueError, match="last"):
            last_positions(k, 7)


def test_a_sliced_3d_input_copies_the_weight_per_row_and_the_gathered_one_does_not():
    """The mechanism the module exists for: a bf16 product with a non-contiguous [B, k, H] view on the CPU."""
    weight = torch.randn(40_000, 256, dtype=torch.bfloat16)  # 19.5 MB
    hidden = torch.randn(6, 30, 256, dtype=torch.bfloat16)
    sliced = _largest_allocation_mb(lambda: F.linear(hidden[:, -4:, :], weight))
    gathered = _largest_allocation_mb(lambda: F.linear(hidden[:, last_positions(4, 30), :], weight))
    last = _largest_allocation_mb(lambda: F.linear(last_hidden(hidden), weight))
    assert sliced > 5 * 19.5  # six copies of the weight
    assert gathered < 5 and last < 5  # only the [6, 4, 20000] / [6, 20000] logits
    torch.testing.assert_close(F.linear(hidden[:, -4:, :], weight),
                               F.linear(hidden[:, last_positions(4, 30), :], weight), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_model_gives_the_same_logits_for_the_index_tensor(tiny_model, tiny_processor, xray_images, dtype):
    from harness.batching import encode_sft, model_inputs

    model = tiny_model.to(dtype).eval()
    batch = encode_sft(tiny_processor, [[xray_images[0]], [xray_images[1]]], ["a", "b"],
                       ["mild cardiomegaly .", "the heart size is normal ."], 50)
    L = batch["input_ids"].shape[1]
    with torch.no_grad():
        as_int = model(**model_inputs(batch), use_cache=False, logits_to_keep=9).logits
        as_index = model(**model_inputs(batch), use_cache=False, logits_to_keep=last_positions(9, L)).logits
        full = model(**model_inputs(batch), use_cache=False).logits
    assert as_index.shape == as_int.shape == (2, 9, full.shape[-1])
    torch.testing.assert_close(as_index, full[:, -9:], rtol=0, atol=0)
    torch.testing.assert_close(as_index, as_int, rtol=0, atol=0)


def test_every_logit_pass_feeds_the_lm_head_a_contiguous_input(tiny_model, tiny_processor, xray_images):
    """The RL log-prob passes, the rollout's prefill and the SFT loss (failed before issue 14's fix: each gave
    the lm_head a [:, -k:] view)."""
    from harness.batching import encode_repeated, encode_sft
    from harness.models.trainable import unwrap
    from harness.sampling.lean_decode import SlotCache
    from harness.sampling.lean_forward import sequence_logits
    from harness.sampling.lean_prefill import prefill
    from harness.stages.lm_loss import lm_loss

    hf = unwrap(tiny_model)
    seen = []
    hook = hf.lm_head.register_forward_pre_hook(lambda m, args: seen.append(args[0].is_contiguous()))
    prompts = encode_repeated(tiny_processor, [[im] for im in xray_images[:2]], ["a", "b"], 2)
    ids, mask = prompts["input_ids"], prompts["attention_mask"]
    with torch.no_grad():
        sequence_logits(tiny_model, ids, mask, prompts["pixel_values"], prompts["image_grid_thw"], logits_to_keep=3)
        slots = SlotCache(len(hf.model.language_model.layers), ids.shape[1] + 2)
        prefill(hf, prompts, slots, dedupe_images=True)
    sft = encode_sft(tiny_processor, [[xray_images[0]], [xray_images[1]]], ["a", "b"], ["normal .", "mild edema ."], 20)
    lm_loss(tiny_model, sft)
    hook.remove()
    assert seen == [True, True, True]
