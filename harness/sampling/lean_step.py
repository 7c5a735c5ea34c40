"""One decode step of the Qwen2.5-VL language model, op for op what its modules compute, with less Python.

At 16 rows x 1 token on a CPU core, a decode step is almost all call overhead: every LoRA linear layer is a peft
module whose forward walks adapters, dropout modules and dtype checks around three small matrix products.
`linear_fn` returns, for a plain `nn.Linear` or a peft LoRA `Linear` in the state rollouts use (eval, one
vanilla adapter, not merged), a function with exactly the ops the module runs in that state, in the same order
(`peft.tuners.lora.layer.Linear.forward`, transformers' `Qwen2_5_VLAttention` / `Qwen2_5_VLDecoderLayer` /
`Qwen2MLP` forward), so the rounding is the same; anything else falls back to calling the module.
RMSNorm, `rotate_half` and attention are transformers' own functions. The token equality with `generate`
is what tests/harness/sampling/test_lean_decode.py checks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from harness.sampling.hf_api import mrope_section, rope_tables


def _lora_fn(mod) -> Callable | None:
    """The eval-time forward of a peft LoRA Linear with one active vanilla adapter, or None if not that case."""
    try:
        # lazy: start-up cost (peft)
        from peft.tuners.lora import Linear as LoraLinear
    except ImportError:  # peft absent: no LoRA layers to find
        return None
    if not isinstance(mod, LoraLinear) or mod.disable_adapters or mod.merged or mod.training:
        return None
    active = [a for a in mod.active_adapters if a in mod.lora_A.keys()]
    if len(active) != 1:
        return None
    name = active[0]
    if name in mod.lora_variant or mod.lora_bias.get(name, False) or getattr(mod, "fan_in_fan_out", False):
        return None
    base, lora_a, lora_b = mod.get_base_layer(), mod.lora_A[name], mod.lora_B[name]
    if not all(type(m) is nn.Linear for m in (base, lora_a, lora_b)):
        return None
    scaling = mod.scaling[name]
    cast = getattr(mod, "cast_input_dtype_enabled", True)

    def fn(x):
        result = F.linear(x, base.weight, base.bias)
        dtype = result.dtype
        if cast and x.dtype != lora_a.weight.dtype:
            x = x.to(dtype=lora_a.weight.dtype)
        # dropout is the identity in eval
        result = result + F.linear(F.linear(x, lora_a.weight), lora_b.weight) * scaling
        return result.to(dtype)

    return fn


def linear_fn(mod) -> Callable:
    """A function computing `mod(x)` with the module's own ops (see the module docstring)."""
    if type(mod) is nn.Linear:
        return lambda x: F.linear(x, mod.weight, mod.bias)
    return _lora_fn(mod) or mod


class DecodeStep:
    """The decoder layers of `lm` (a Qwen2_5_VLTextModel) for one new token per row, against a slot cache."""

    def __init__(self, lm, attention_fn: Callable):
        # lazy: start-up cost (transformers)
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import rotate_half

        self.rotate_half = rotate_half
        self.attention_fn = attention_fn
        self.layers = []
        for layer in lm.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append(dict(
                layer=layer, attn=a, ln1=layer.input_layernorm, ln2=layer.post_attention_layernorm,
                q=linear_fn(a.q_proj), k=linear_fn(a.k_proj), v=linear_fn(a.v_proj), o=linear_fn(a.o_proj),
                gate=linear_fn(m.gate_proj), up=linear_fn(m.up_proj), down=linear_fn(m.down_proj), act=m.act_fn,
            ))
        self.section = mrope_section(lm.config)

    def sections(self, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary embedding's cos/sin -> [rows, 1, T, head_dim] with each M-RoPE section taken from its axis,
        as the attention applies them (a copy, no arithmetic), for all steps at once (harness/sampling/hf_api.py)."""
        return rope_tables(cos, sin, self.section)

    def __call__(self, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask, cache) -> torch.Tensor:
        """cos/sin: this step's slices of `sections` ([rows, 1, 1, head_dim])."""
        rows = hidden.shape[0]
        for i, p in enumerate(self.layers):
            attn = p["attn"]
            residual = hidden
            x = p["ln1"](hidden)
            hd = attn.head_dim
            q = p["q"](x).view(rows, 1, -1, hd).transpose(1, 2)
            k = p["k"](x).view(rows, 1, -1, hd).transpose(1, 2)
            v = p["v"](x).view(rows, 1, -1, hd).transpose(1, 2)
            q = (q * cos) + (self.rotate_half(q) * sin)  # apply_multimodal_rotary_pos_emb's arithmetic
            k = (k * cos) + (self.rotate_half(k) * sin)
            k, v = cache.update(k, v, i)
            out, _ = self.attention_fn(attn, q, k, v, mask, dropout=0.0, scaling=attn.scaling,
                                       sliding_window=attn.sliding_window, position_ids=None)
            out = out.reshape(rows, 1, -1).contiguous()
            hidden = residual + p["o"](out)
            residual = hidden
            x = p["ln2"](hidden)
            hidden = residual + p["down"](p["act"](p["gate"](x)) * p["up"](x))
        return hidden
