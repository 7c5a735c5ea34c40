"""The few places where transformers 4.57 and 5.x call Qwen2.5-VL's pieces differently, found by feature detection.

The lean loops (lean_prefill.py, lean_decode.py, lean_step.py, fused_step.py, harness/grpo/shared_prompt.py) call
the model's own modules; between 4.57 and 5.x these changed their calling conventions, not their arithmetic:

- the cache argument is `past_key_values` in 4.57 and up to 5.20, `cache` in later 5.x (checked: 5.25; the old name
  deprecated), and 4.57's text model and decoder layers take `cache_position`, which 5.x dropped (the cache knows
  its length); 5.x's `prepare_inputs_for_generation` tells the first step by `is_first_iteration`;
- 4.57's rotary embedding returns cos/sin of every M-RoPE axis, [3, rows, T, head_dim], and the attention picks each
  section from its axis (`apply_multimodal_rotary_pos_emb`, sections in `config.rope_scaling`); 5.x's returns the
  picked tables, [rows, T, head_dim] (sections in `config.rope_parameters`), and the attention applies them as they
  are. `rope_tables` gives [rows, 1, T, head_dim] either way, the same values (a selection, no arithmetic);
- 5.x's `get_rope_index` reads the modality of each token from `mm_token_type_ids` (text 0, image 1, video 2,
  which 5.x's processor returns), 4.57's from the token ids;
- 4.57's decoder layer returns a tuple, 5.x's the hidden states.
"""

from __future__ import annotations

import inspect
from functools import cache

import torch


@cache
def _params(fn) -> frozenset:
    return frozenset(inspect.signature(fn).parameters)


def cache_kwargs(module, cache, cache_position: torch.Tensor | None) -> dict:
    """Keyword arguments passing `cache` (and, where the module takes it, `cache_position`) to `module`'s forward."""
    names = _params(type(module).forward)
    out = {"cache" if "cache" in names else "past_key_values": cache}
    if "cache_position" in names and cache_position is not None:
        out["cache_position"] = cache_position
    return out


def layer_output(out) -> torch.Tensor:
    """A decoder layer's hidden states (4.57: the first item of the tuple it returns)."""
    return out[0] if isinstance(out, tuple) else out


def mrope_section(config) -> list[int]:
    """The M-RoPE sections (time, height, width) of a text config (4.57: rope_scaling; 5.x: rope_parameters)."""
    for name in ("rope_parameters", "rope_scaling"):
        params = getattr(config, name, None)
        if isinstance(params, dict) and "mrope_section" in params:
            return list(params["mrope_section"])
    raise ValueError("the text config names no mrope_section (rope_parameters / rope_scaling)")


def select_mrope_sections(t: torch.Tensor, section) -> torch.Tensor:
    """[3, rows, T, head_dim] -> [rows, 1, T, head_dim]: each M-RoPE section of the last dim taken from its axis
    (temporal, height, width, repeated for both halves), as apply_multimodal_rotary_pos_emb selects them."""
    parts = t.split(list(section) * 2, dim=-1)
    return torch.cat([m[i % 3] for i, m in enumerate(parts)], dim=-1).unsqueeze(1)


def rope_tables(cos: torch.Tensor, sin: torch.Tensor, section) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotary embedding's output -> the tables the attention multiplies q and k by, [rows, 1, T, head_dim]."""
    if cos.dim() == 4:  # 4.57: one table per axis, the sections picked here
        return select_mrope_sections(cos, section), select_mrope_sections(sin, section)
    return cos.unsqueeze(1), sin.unsqueeze(1)  # 5.x: picked by the rotary embedding (apply_rotary_pos_emb's unsqueeze)


def mm_token_type_ids(config, input_ids: torch.Tensor) -> torch.Tensor:
    """5.x's processor's token types of `input_ids`: 1 image token, 2 video token, 0 anything else."""
    types = torch.zeros_like(input_ids, dtype=torch.int32)
    types[input_ids == config.image_token_id] = 1
    types[input_ids == config.video_token_id] = 2
    return types


def get_rope_index(model, input_ids: torch.Tensor, image_grid_thw, attention_mask):
    """`model.get_rope_index` for image prompts, in either version's signature."""
    if "mm_token_type_ids" in _params(type(model).get_rope_index):
        return model.get_rope_index(input_ids, mm_token_type_ids(model.config, input_ids),
                                    image_grid_thw=image_grid_thw, video_grid_thw=None, second_per_grid_ts=None,
                                    attention_mask=attention_mask)
    return model.get_rope_index(input_ids, image_grid_thw, None, second_per_grid_ts=None,
                                attention_mask=attention_mask)


def model_kwargs_for_positions(hf, input_ids: torch.Tensor) -> dict:
    """What the model's own forward needs besides input_ids to compute the M-RoPE positions itself (5.x:
    mm_token_type_ids, else it falls back to 1-D positions); nothing in 4.57."""
    if "mm_token_type_ids" in _params(type(hf).forward):
        return {"mm_token_type_ids": mm_token_type_ids(hf.config, input_ids)}
    return {}


def first_step_inputs(hf, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache, logits_to_keep,
                      **extra) -> dict:
    """`hf.prepare_inputs_for_generation` of generate's first step (the whole prompt into an empty cache)."""
    names = _params(type(hf).prepare_inputs_for_generation)
    kw = {"cache" if "cache" in names else "past_key_values": cache}
    # 5.x (5.20 still names the cache `past_key_values`) tells the first step by a flag, without which it leaves the
    # images out; 4.57 by the cache position
    if "is_first_iteration" in names:
        kw["is_first_iteration"] = True
    if "cache_position" in names:
        kw["cache_position"] = torch.arange(input_ids.shape[1], device=input_ids.device)
    return hf.prepare_inputs_for_generation(input_ids, attention_mask=attention_mask, use_cache=True,
                                            logits_to_keep=logits_to_keep, **kw, **extra)
