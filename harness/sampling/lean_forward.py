"""The full-sequence forward of the GRPO log-prob passes (old, reference, current) with the model's arithmetic and
less work: the 4-D mask built directly instead of through transformers' vmap machinery, the M-RoPE positions
batched (harness/sampling/mrope_index.py), and, on the CPU, each
distinct image through the vision encoder once (harness/sampling/lean_prefill.py says why both give the same
numbers). The logits are those of `model(input_ids=..., pixel_values=...)` bit for bit, with grad or without.
In a pass with grad (the training pass) the vision encoder's parameter gradients are then the backward of one
image's features with the G copies' feature gradients summed, instead of G backwards summed: the same gradient
up to float rounding (issue 27; before, that pass encoded every image G times). `dedupe_images=False` gives the
plain call's gradients bit for bit, and so does a model in train mode (rl.policy_dropout: each copy draws its own
dropout mask, which one shared encoding would not). tests/harness/sampling/test_lean_forward.py.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from harness.models.logit_positions import last_positions
from harness.models.trainable import unwrap
from harness.sampling.feature_memo import FeatureMemo
from harness.sampling.hf_api import model_kwargs_for_positions
from harness.sampling.lean_prefill import image_features, prefill_mask
from harness.sampling.mrope_index import mrope_positions


def lean_pass_supported(hf) -> bool:
    """Whether `sequence_logits` runs its own forward for this model (else the model's own call)."""
    text = hf.config.get_text_config()
    return hf.config._attn_implementation in ("eager", "sdpa") and not getattr(text, "use_sliding_window", False)


def dedupe_by_default(hf, device: torch.device) -> bool:
    """Whether a log-prob pass encodes each distinct image once: on the CPU (batch-invariant there, see
    lean_prefill.py), and not in train mode, where dropout (rl.policy_dropout) draws a mask per copy."""
    return device.type == "cpu" and not hf.training


def sequence_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, pixel_values: torch.Tensor,
                    image_grid_thw: torch.Tensor, *, logits_to_keep: int, dedupe_images: bool | None = None,
                    image_keys: Sequence[Hashable] | None = None, memo: FeatureMemo | None = None):
    """`model(input_ids, attention_mask, pixel_values, image_grid_thw, logits_to_keep, use_cache=False).logits`.
    `dedupe_images` None = on the CPU (with grad or without) unless the model is in train mode (dropout).
    `memo` + `image_keys` (a frozen pass, no grad): features of images the memo holds are read from it, where
    images are deduplicated (harness/sampling/feature_memo.py). Runs under the caller's autocast."""
    hf = unwrap(model)
    # An index tensor, not the int: see harness/models/logit_positions.py (one lm_head copy per row otherwise).
    keep = last_positions(logits_to_keep, input_ids.shape[1], input_ids.device)
    if not lean_pass_supported(hf):
        return model(input_ids=input_ids, attention_mask=attention_mask, pixel_values=pixel_values,
                     image_grid_thw=image_grid_thw, logits_to_keep=keep, use_cache=False,
                     **model_kwargs_for_positions(hf, input_ids)).logits
    if dedupe_images is None:
        dedupe_images = dedupe_by_default(hf, input_ids.device)
    inner = hf.model
    embeds = inner.get_input_embeddings()(input_ids)
    feats = image_features(hf, pixel_values, image_grid_thw, dedupe_images, keys=image_keys, memo=memo)
    feats = feats.to(embeds.device, embeds.dtype)
    image_mask, _ = inner.get_placeholder_mask(input_ids, inputs_embeds=embeds, image_features=feats)
    embeds = embeds.masked_scatter(image_mask, feats)
    positions, rope_deltas = mrope_positions(inner, input_ids, image_grid_thw, attention_mask)
    inner.rope_deltas = rope_deltas
    mask = prefill_mask(attention_mask, hf.config._attn_implementation, embeds.dtype)
    return model(input_ids=None, inputs_embeds=embeds, position_ids=positions,
                 attention_mask={"full_attention": mask}, logits_to_keep=keep, use_cache=False).logits
