"""The GRPO log-prob passes with each group's prompt computed once (rl.prompt_pass = shared; issue 27).

The G responses of a group share their prompt (text and images), and a causal model computes the prompt's
positions from the prompt alone; yet a full-sequence pass computes them G times, and the prompt is most of a
sequence (78 of 126 positions in bench_vs_trl.py's step). Here the language model runs twice: once over one row
per group up to the end of the prompt, keeping its keys and values, then over the responses of all rows, which
attend to their group's prompt keys and values (repeated G times, `repeat_interleave`, so the backward sums the G
rows' gradients into the one prompt computation). The M-RoPE positions and the masks are those of the full pass.

The same function, not the same arithmetic: the prompt's matrix products run over fewer rows and the attention's
products over shorter key ranges, so the logits and gradients equal the full pass's to float rounding (~1e-7 on
the logits of the tiny model), not bit for bit. Opt-in, like rl.lora_pass = merged; `per_row` (the default) keeps
the exact pass. Needs rl.policy_dropout false (one dropout draw per group would be shared by its G rows).
tests/harness/grpo/test_shared_prompt.py.

Rows that share a prompt are found, not assumed: runs of consecutive rows with equal prompt tokens, prompt mask
and images (the trainer's image keys, else the pixels). A micro-batch that cuts a group, or a rollout whose
groups are not consecutive, still gets the full pass's values (each run is computed once). Two cases take the
per-row pass itself, which gives the same values: no run longer than one row, and a model the lean passes do not
run (attention other than eager or sdpa, a sliding window: `lean_pass_supported`).
"""

from __future__ import annotations

import itertools

import torch
from transformers import DynamicCache

from harness.grpo.rollout import Rollout, response_logits
from harness.models.precision import autocast_for
from harness.models.trainable import unwrap
from harness.sampling.feature_memo import FeatureMemo
from harness.sampling.hf_api import cache_kwargs
from harness.sampling.lean_forward import dedupe_by_default, lean_pass_supported
from harness.sampling.lean_prefill import attention_mask_from_keep, image_features, prefill_mask
from harness.sampling.mrope_index import mrope_positions


def prompt_runs(ro: Rollout) -> list[int]:
    """Sizes of the runs of consecutive rows that share their prompt tokens, prompt mask and images."""
    n = len(ro)
    if n == 0:
        return []
    row_images, image_patches = ro.image_starts()

    def image(k: int) -> torch.Tensor:
        return ro.pixel_values[image_patches[k]:image_patches[k + 1]]

    def same_images(i: int, j: int) -> bool:
        a, b = range(row_images[i], row_images[i + 1]), range(row_images[j], row_images[j + 1])
        if len(a) != len(b):
            return False
        if ro.image_keys is not None:
            return [ro.image_keys[k] for k in a] == [ro.image_keys[k] for k in b]
        return all(torch.equal(ro.image_grid_thw[x], ro.image_grid_thw[y]) and torch.equal(image(x), image(y))
                   for x, y in zip(a, b, strict=True))

    P = ro.prompt_len
    prompts, masks = ro.sequences[:, :P], ro.prompt_mask
    same_text = ((prompts[1:] == prompts[:-1]).all(dim=1) & (masks[1:] == masks[:-1]).all(dim=1)).tolist()
    sizes = [1]
    for i in range(1, n):
        if same_text[i - 1] and same_images(i - 1, i):
            sizes[-1] += 1
        else:
            sizes.append(1)
    return sizes


def shared_prompt_logits(model, ro: Rollout, memo: FeatureMemo | None = None) -> torch.Tensor:
    """`response_logits(model, ro)` (logits [N, L, V] predicting the response tokens) with the prompt of each run
    of rows that share it computed once (see the module docstring). `memo`: a frozen pass's vision features, as
    in `response_logits`."""
    hf = unwrap(model)
    sizes = prompt_runs(ro)
    if not lean_pass_supported(hf) or len(sizes) == len(ro):
        return response_logits(model, ro, memo)
    inner, lm = hf.model, hf.model.language_model
    attn_impl = hf.config._attn_implementation
    P, L = ro.prompt_len, ro.response_mask.shape[1]
    device = ro.sequences.device
    counts = torch.tensor(sizes, device=device)
    attention = torch.cat([ro.prompt_mask, ro.response_mask.to(ro.prompt_mask.dtype)], dim=1)
    positions, rope_deltas = mrope_positions(inner, ro.sequences, ro.image_grid_thw, attention)
    inner.rope_deltas = rope_deltas
    first = [0, *itertools.accumulate(sizes[:-1])]
    prompts = ro.pick(first)
    with autocast_for(model):
        ids = prompts.sequences[:, :P]
        embeds = inner.get_input_embeddings()(ids)
        feats = image_features(hf, prompts.pixel_values, prompts.image_grid_thw, dedupe_by_default(hf, device),
                               keys=prompts.image_keys, memo=memo)
        feats = feats.to(embeds.device, embeds.dtype)
        image_mask, _ = inner.get_placeholder_mask(ids, inputs_embeds=embeds, image_features=feats)
        embeds = embeds.masked_scatter(image_mask, feats)
        cache = DynamicCache(config=hf.config.get_text_config())
        prompt_mask = prefill_mask(prompts.prompt_mask, attn_impl, embeds.dtype)
        out = lm(inputs_embeds=embeds, position_ids=positions[:, first, :P],
                 attention_mask={"full_attention": prompt_mask}, use_cache=True, return_dict=True,
                 **cache_kwargs(lm, cache, torch.arange(P, device=device)))
        hidden = out.last_hidden_state[:, -1:, :].repeat_interleave(counts, dim=0)  # predicts response token 0
        T = L - 1  # the last response token predicts nothing that is scored
        if T > 0:
            for layer in cache.layers:
                layer.keys = layer.keys.repeat_interleave(counts, dim=0)
                layer.values = layer.values.repeat_interleave(counts, dim=0)
            query = torch.arange(P, P + T, device=device)[:, None]
            key = torch.arange(P + T, device=device)[None, :]
            keep = (key <= query)[None, None] & attention[:, None, None, :P + T].to(torch.bool)
            responses = inner.get_input_embeddings()(ro.sequences[:, P:P + T])
            out = lm(inputs_embeds=responses, position_ids=positions[:, :, P:P + T],
                     attention_mask={"full_attention": attention_mask_from_keep(keep, attn_impl, responses.dtype)},
                     use_cache=True, return_dict=True, **cache_kwargs(lm, cache, query[:, 0]))
            hidden = torch.cat([hidden, out.last_hidden_state], dim=1)
        return hf.lm_head(hidden)
