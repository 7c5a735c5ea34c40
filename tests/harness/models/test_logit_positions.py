"""`logits_to_keep` as an index tensor: the same logits as the int, and a contiguous input for the lm_head (a
non-contiguous [B, k, H] view makes some CPU bf16 kernels copy the weight once per row; whether a given CPU's kernel
does is not asserted here: benchmarks measure it, the tests assert the inputs the module hands the kernel)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness.models.logit_positions import last_hidden, last_positions


def test_last_positions_are_the_tail():
    assert last_positions(3, 7).tolist() == [4, 5, 6]
    assert last_positions(7, 7).tolist() == list(range(7))
    for k in (0, 8):
        with pytest.raises(ValueError, match="last"):
            last_positions(k, 7)


def test_the_gathered_and_last_inputs_are_contiguous_and_give_the_sliced_logits():
    """The mechanism the module exists for: the [:, -k:] slice is a non-contiguous view (the input some CPU bf16
    kernels copy the weight for, once per row); the gathered rows and `last_hidden` are contiguous and give the
    same logits bit for bit. Behaviour only: how a kernel allocates differs between CPUs (issue 46)."""
    weight = torch.randn(4_000, 256, dtype=torch.bfloat16)
    hidden = torch.randn(6, 30, 256, dtype=torch.bfloat16)
    sliced = hidden[:, -4:, :]
    gathered = hidden[:, last_positions(4, 30), :]
    assert not sliced.is_contiguous()
    assert gathered.is_contiguous() and last_hidden(hidden).is_contiguous()
    torch.testing.assert_close(F.linear(sliced, weight), F.linear(gathered, weight), rtol=0, atol=0)
    torch.testing.assert_close(F.linear(hidden[:, -1, :], weight), F.linear(last_hidden(hidden), weight),
                               rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_model_gives_the_same_logits_for_the_index_tensor(tiny_model, tiny_processor, xray_images, dtype):
    from harness.prompting.batching import encode_sft, model_inputs

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
    from harness.models.trainable import unwrap
    from harness.prompting.batching import encode_repeated, encode_sft
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
