"""Qwen2.5-VL's M-RoPE positions of image prompts without a Python loop over rows and images.

transformers' `get_rope_index` walks each row token list in Python and builds its positions from small tensors
(one `arange`, `stack` and `cat` per text run and image): ~10 ms for 32 prompts and ~40 ms for 128 on a CPU
core, paid by every rollout prefill and every GRPO log-prob pass. The rule it implements, for prompts whose
vision inputs are images:

- a text token is one position after the position before it (all three axes equal);
- an image of merged grid t x h x w (h, w = grid / spatial_merge_size) starts at the position a text token
  there would have, `base`, and its tokens get (base, base + row, base + column) on the (time, height, width)
  axes (an image's time index is 0 in every frame; in transformers 5.x the frame number); the token after it gets
  base + max(h, w);
- padding (attention_mask 0) gets 1; `rope_deltas` is the largest position of a row + 1 - the row's length
  (transformers 5.x: padding gets 0 and the deltas count the real tokens, `token_type_rope_index`).

`mrope_positions` computes that with a few batched integer ops (integers: equal, not merely close), and calls
`get_rope_index` itself for anything else (videos, rows whose tokens are not one contiguous run, image tokens
that do not match the grids). tests/harness/sampling/test_mrope_index.py checks equality on random batches.
"""

from __future__ import annotations

import inspect

import torch

from harness.sampling.hf_api import get_rope_index


def mrope_positions(model, input_ids: torch.Tensor, image_grid_thw: torch.Tensor | None,
                    attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """`model.get_rope_index(input_ids, image_grid_thw, None, second_per_grid_ts=None, attention_mask=...)`
    (`model`: a Qwen2_5_VLModel, or anything with its config)."""
    out = _image_positions(model.config, input_ids, image_grid_thw, attention_mask,
                           token_types=token_type_rope_index(type(model).get_rope_index))
    if out is None:
        return get_rope_index(model, input_ids, image_grid_thw, attention_mask)
    return out


def token_type_rope_index(get_rope_index=None) -> bool:
    """Whether `get_rope_index` is transformers 5.x's, which reads the token types (`mm_token_type_ids`) and
    differs from 4.57's in two conventions: an image's temporal frames (grid_t > 1; the image processor gives
    grid_t = 1) are spaced by 1 where 4.57 puts them all at time 0 (huggingface/transformers#45325), and
    `rope_deltas` counts a row's real tokens, not its padded length (5.x then adds it to the count of real tokens
    so far where 4.57 adds it to the cache position: the same decode positions, `decode_positions` below)."""
    if get_rope_index is None:
        # lazy: start-up cost (transformers)
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel

        get_rope_index = Qwen2_5_VLModel.get_rope_index
    return "mm_token_type_ids" in inspect.signature(get_rope_index).parameters


def decode_positions(model, attention_mask: torch.Tensor, capacity: int) -> torch.Tensor:
    """[rows, capacity - P]: the M-RoPE position (all three axes) of decode step s of each row from
    `model.rope_deltas` (set by the prefill), as generate's later steps compute it."""
    rows, P = attention_mask.shape
    steps = torch.arange(P, capacity, device=attention_mask.device)[None, :]
    if token_type_rope_index(type(model).get_rope_index):
        steps = steps - (P - attention_mask.sum(1, keepdim=True))  # real tokens before the step, not its column
    return steps + model.rope_deltas.to(attention_mask.device).view(-1, 1)


def _image_positions(config, input_ids, grid, attention_mask, token_types: bool | None = None):
    """The positions, or None where the batch is not the case handled here. `token_types`: the conventions of
    5.x's get_rope_index (`token_type_rope_index`; None = of the installed transformers)."""
    if token_types is None:
        token_types = token_type_rope_index()
    if grid is None or grid.numel() == 0 or input_ids.dim() != 2:
        return None
    rows, length = input_ids.shape
    device = input_ids.device
    real = (attention_mask == 1) if attention_mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
    n_real = real.sum(1)
    if bool((n_real == 0).any()) or bool((input_ids[real] == config.video_token_id).any()):
        return None
    # Each row's tokens one run (left or right padding): then "the next token" is the next column.
    first = real.long().argmax(1)
    if not bool((real.long().cumsum(1)[torch.arange(rows, device=device), first + n_real - 1] == n_real).all()):
        return None
    merge = config.vision_config.spatial_merge_size
    grid = grid.to(device)
    lh, lw = grid[:, 1] // merge, grid[:, 2] // merge
    sizes = grid[:, 0] * lh * lw
    is_image = (input_ids == config.image_token_id) & real
    if int(is_image.sum()) != int(sizes.sum()):
        return None
    # Image tokens in row-major order belong to the images in order: image number and index within the image.
    rank = is_image.flatten().cumsum(0).view(rows, length) - 1
    ends = sizes.cumsum(0)
    image = torch.searchsorted(ends, rank.clamp(min=0), right=True).clamp(max=len(sizes) - 1)
    within = rank - (ends - sizes)[image]
    # Every image is one run of its size inside one row, opened by <|vision_start|> (as get_rope_index counts them).
    col = torch.arange(length, device=device).expand(rows, -1)
    start_col = torch.full((len(sizes),), -1, dtype=torch.long, device=device)
    start_row = torch.full((len(sizes),), -1, dtype=torch.long, device=device)
    opens = is_image & (within == 0)
    start_col[image[opens]] = col[opens]
    start_row[image[opens]] = torch.arange(rows, device=device).view(-1, 1).expand(-1, length)[opens]
    row_of = torch.arange(rows, device=device).view(-1, 1).expand(-1, length)
    if bool((start_col < 0).any()) or not bool((
            (col - within == start_col[image]) & (row_of == start_row[image]))[is_image].all()):
        return None
    before = torch.cat([input_ids.new_full((rows, 1), -1), input_ids[:, :-1]], dim=1)
    starts_per_row = (opens & (before == config.vision_start_token_id)).sum(1)
    announced = ((input_ids == config.vision_start_token_id) & real
                 & (torch.cat([input_ids[:, 1:], input_ids.new_full((rows, 1), -1)], dim=1) == config.image_token_id))
    if not bool((starts_per_row == opens.sum(1)).all()) or not bool((announced.sum(1) == opens.sum(1)).all()):
        return None
    # A text token advances the position by 1; an image by max(h, w), counted at its last token.
    last = is_image & (within == sizes[image] - 1)
    step = torch.where(is_image, torch.where(last, torch.maximum(lh, lw)[image], 0), 1) * real
    base = step.cumsum(1) - step  # the position before each token's own advance
    frame = within % (lh * lw)[image]
    h_off = torch.where(is_image, frame // lw[image], 0)
    w_off = torch.where(is_image, frame % lw[image], 0)
    t_off = torch.where(is_image, within // (lh * lw)[image], 0) * int(token_types)
    positions = torch.stack([base + t_off, base + h_off, base + w_off])
    pad = torch.full_like(positions, 0 if token_types else 1)  # padding's position: 1 in 4.57, 0 in 5.x
    positions = torch.where(real.expand(3, -1, -1), positions, pad).to(input_ids.dtype)
    top = torch.where(real.expand(3, -1, -1), positions, torch.zeros_like(positions)).amax(dim=(0, 2))
    deltas = (top + 1 - (n_real if token_types else length)).view(rows, 1)
    return positions, deltas
