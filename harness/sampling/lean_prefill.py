"""The prefill of the lean decoding loop: `generate`'s first step with the same arithmetic and less work.

`generate`'s first step (Qwen2_5_VLForConditionalGeneration.prepare_inputs_for_generation + forward) embeds
the prompt, runs the vision encoder on every image of the batch, scatters the image features into the
embeddings, computes M-RoPE positions (`get_rope_index`) and builds the 4-D attention mask through
transformers' vmap machinery (masking_utils.create_causal_mask). Here:

- images that occur more than once in the batch (a rollout repeats each prompt G times) are encoded once and
  their features copied to every occurrence. On the CPU the vision encoder's features of one image do not
  depend on the other images of its batch (its attention is per image; tests check the tokens); on CUDA,
  kernels chosen by batch size may round differently, so there it is off unless asked for;
- the mask is built directly: the same boolean (causal and not padding) that `sdpa_mask` gives, None for
  sdpa without padding (transformers then lets SDPA run with is_causal), and the additive 0 / dtype-min mask
  for eager, in the dtype of the input embeddings;
- the K/V go straight into the caller's cache object, so no copy from a DynamicCache;
- the M-RoPE positions come from harness/sampling/mrope_index.py (the same integers, without get_rope_index's
  Python loop over rows).

Batches with other inputs than input_ids, attention_mask, pixel_values and image_grid_thw (videos, say) are
not handled here: `prefill_supported` says so and the caller runs generate's own step.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from harness.models.logit_positions import last_hidden
from harness.sampling.feature_memo import FeatureMemo
from harness.sampling.hf_api import cache_kwargs, mm_token_type_ids
from harness.sampling.mrope_index import mrope_positions

HANDLED = frozenset({"input_ids", "attention_mask", "pixel_values", "image_grid_thw", "mm_token_type_ids"})


def prefill_supported(hf, batch: dict) -> bool:
    """Whether `prefill` computes this batch: only the handled inputs, and token types (5.x's processor) that are
    those of the token ids (what mrope_index.py reads)."""
    text = hf.config.get_text_config()
    if not set(batch) <= HANDLED or getattr(text, "use_sliding_window", False):
        return False
    types = batch.get("mm_token_type_ids")
    return types is None or torch.equal(types.to(torch.int32), mm_token_type_ids(hf.config, batch["input_ids"]))


def unique_images(pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> tuple[list[int], list[int]]:
    """(indices of the first occurrence of each distinct image, for every image the position of its first
    occurrence in that list). Images are equal when grid and patches are equal; candidates are found by a
    fingerprint (grid and a strided sample of patch values) and confirmed with torch.equal."""
    sizes = grid_thw.prod(-1).tolist()
    blocks = torch.split(pixel_values, sizes)
    grids = grid_thw.tolist()
    firsts: list[int] = []
    inverse: list[int] = []
    seen: dict[tuple, list[int]] = {}
    for i, block in enumerate(blocks):
        flat = block.reshape(-1)
        stride = max(1, flat.numel() // 64)
        key = (tuple(grids[i]), flat[::stride].to(device="cpu", dtype=torch.float64).numpy().tobytes())
        match = next((u for u in seen.get(key, []) if torch.equal(blocks[firsts[u]], block)), None)
        if match is None:
            match = len(firsts)
            firsts.append(i)
            seen.setdefault(key, []).append(match)
        inverse.append(match)
    return firsts, inverse


def _split_features(hf, pixel_values: torch.Tensor, grid_thw: torch.Tensor):
    """`get_image_features` split per image: a tuple of tensors in transformers 4.x, the `pooler_output` of the
    output it returns in 5.x."""
    out = hf.model.get_image_features(pixel_values, grid_thw)
    return out.pooler_output if hasattr(out, "pooler_output") else out


def image_features(hf, pixel_values: torch.Tensor, grid_thw: torch.Tensor, dedupe: bool, *,
                   keys: Sequence[Hashable] | None = None, memo: FeatureMemo | None = None) -> torch.Tensor:
    """Features of every image in order (torch.cat of get_image_features), each distinct image encoded once.
    With `memo` and `keys` (one per image, equal keys = equal images) and `dedupe`: images whose key the memo
    holds are not encoded again (harness/sampling/feature_memo.py)."""
    if memo is not None and torch.is_grad_enabled():
        raise ValueError("a feature memo holds no graph: pass one only to a pass without grad")
    if not dedupe:
        return torch.cat(_split_features(hf, pixel_values, grid_thw), dim=0)
    if memo is not None and keys is not None:
        return _memo_features(hf, pixel_values, grid_thw, keys, memo)
    firsts, inverse = unique_images(pixel_values, grid_thw)
    if len(firsts) == len(inverse):
        return torch.cat(_split_features(hf, pixel_values, grid_thw), dim=0)
    sizes = grid_thw.prod(-1).tolist()
    blocks = torch.split(pixel_values, sizes)
    feats = _split_features(hf, torch.cat([blocks[i] for i in firsts]), grid_thw[firsts])
    return torch.cat([feats[u] for u in inverse], dim=0)


def _memo_features(hf, pixel_values: torch.Tensor, grid_thw: torch.Tensor, keys: Sequence[Hashable],
                   memo: FeatureMemo) -> torch.Tensor:
    if len(keys) != grid_thw.shape[0]:
        raise ValueError(f"{len(keys)} image keys for {grid_thw.shape[0]} images")
    found = {key: memo.get(key) for key in dict.fromkeys(keys)}
    missing = [key for key, feats in found.items() if feats is None]
    if missing:
        first = {key: keys.index(key) for key in missing}
        blocks = torch.split(pixel_values, grid_thw.prod(-1).tolist())
        order = [first[key] for key in missing]
        feats = _split_features(hf, torch.cat([blocks[i] for i in order]), grid_thw[order])
        for key, f in zip(missing, feats, strict=True):
            found[key] = f
            memo.put(key, f)
    return torch.cat([found[key] for key in keys], dim=0)


def prefill_mask(attention_mask: torch.Tensor, attn: str, dtype: torch.dtype) -> torch.Tensor | None:
    """create_causal_mask's result for a prefill of the whole prompt (query = key positions 0..P-1)."""
    rows, P = attention_mask.shape
    pad = attention_mask.to(torch.bool)
    if attn == "sdpa" and bool(pad.all()):
        return None
    pos = torch.arange(P, device=attention_mask.device)
    keep = (pos[None, :] <= pos[:, None])[None, None] & pad[:, None, None, :]  # [rows, 1, P, P]
    return attention_mask_from_keep(keep, attn, dtype)


def attention_mask_from_keep(keep: torch.Tensor, attn: str, dtype: torch.dtype) -> torch.Tensor:
    """A boolean keep-mask [rows, 1, queries, keys] in the form the attention implementation takes: sdpa the
    booleans, eager an additive float mask (0 kept, the dtype's minimum masked)."""
    if attn == "sdpa":
        return keep
    return torch.where(keep, torch.tensor(0.0, device=keep.device, dtype=dtype), torch.finfo(dtype).min)


def prefill(hf, batch: dict, cache, *, dedupe_images: bool, image_keys: Sequence[Hashable] | None = None,
            memo: FeatureMemo | None = None) -> torch.Tensor:
    """Logits [rows, vocab] (float32) of the last prompt position; fills `cache` with the prompt's K/V and sets
    hf.model.rope_deltas, as generate's first step does. `image_keys`, `memo`: as `image_features`."""
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    P = input_ids.shape[1]
    model = hf.model
    embeds = model.get_input_embeddings()(input_ids)
    pixel_values = batch.get("pixel_values")
    grid = batch.get("image_grid_thw")
    if pixel_values is not None:
        feats = image_features(hf, pixel_values, grid, dedupe_images, keys=image_keys, memo=memo)
        feats = feats.to(embeds.device, embeds.dtype)
        image_mask, _ = model.get_placeholder_mask(input_ids, inputs_embeds=embeds, image_features=feats)
        embeds = embeds.masked_scatter(image_mask, feats)
    positions, rope_deltas = mrope_positions(model, input_ids, grid, attention_mask)
    model.rope_deltas = rope_deltas
    attn = hf.config._attn_implementation
    mask = prefill_mask(attention_mask, attn, embeds.dtype)
    lm = model.language_model
    out = lm(input_ids=None, position_ids=positions, attention_mask={"full_attention": mask}, inputs_embeds=embeds,
             use_cache=True, return_dict=True, **cache_kwargs(lm, cache, torch.arange(P, device=input_ids.device)))
    # [B, H], not the [B, 1, H] view: a 3-D non-contiguous input copies the lm_head weight per row
    # (harness/models/logit_positions.py).
    logits = hf.lm_head(last_hidden(out.last_hidden_state))
    return logits.to(copy=True, dtype=torch.float32)
