"""A decode step with fewer ops per token, for `generation.backend = "fused"` (issue 27): not bit-identical.

The lean loop (lean_step.py) runs exactly the ops of transformers' modules so that its tokens equal
`generate`'s; at 16-128 rows x 1 token on a CPU core that is ~290 small ops per decoded token of the tiny model,
each costing more in call overhead than in arithmetic. This step computes the same function with fewer, larger
ops, which rounds differently in the last bits:

- every LoRA layer is merged into one weight per rollout, W + scaling * B A (peft's own merge formula for a
  vanilla adapter); q, k and v are one matrix product (one weight [q; k; v]), and so are the MLP's gate and up;
- activations are [rows, hidden] (one token per row), so the bias and the residual go into `addmm`;
- RMSNorm is `F.rms_norm`, M-RoPE is one multiply-add on q and k together (rotate_half(x) * sin equals
  roll(x, d/2) * [-sin_1, sin_2]), attention is two batched products with the query heads grouped under their
  K/V head (no repeated K/V), the mask added inside the first (`baddbmm`).

The prefill, the logits processors and the sampling are the lean loop's (lean_decode.py), so the first token's
distribution is bit-identical to `generate`'s and later ones differ by float rounding of the logits. That the
tokens follow the same distribution is what tests/harness/sampling/test_fused_step.py checks statistically,
with a planted difference (another temperature) that the same test must reject.

Float32 weights only (the tiny testbed, where call overhead dominates): a bf16 base would round the merged
LoRA delta away (at lr 3e-6 it is below bf16's resolution), so other dtypes raise and keep `lean`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.models.merged_lora import merged_weight
from harness.sampling.hf_api import mrope_section, rope_tables


def _t(w: torch.Tensor) -> torch.Tensor:
    """[out, in] -> [in, out], contiguous: the layout `addmm(bias, x, w)` reads row by row."""
    return w.t().contiguous()


def _bias(b: torch.Tensor | None, n: int, like: torch.Tensor) -> torch.Tensor:
    return b if b is not None else like.new_zeros(n)


def rotate_sign(sin: torch.Tensor) -> torch.Tensor:
    """[-sin_1, sin_2] (halves of the last dim): rotate_half(x) * sin == roll(x, d/2, -1) * rotate_sign(sin)."""
    half = sin.shape[-1] // 2
    return torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)


class FusedDecodeStep:
    """Logits [rows, vocab] (float32) of the next token for one token per row, against lean_decode's SlotCache."""

    def __init__(self, hf):
        lm = hf.model.language_model
        params = [*lm.parameters(), *hf.lm_head.parameters()]
        bad = sorted({str(p.dtype) for p in params if p.dtype != torch.float32})
        if bad:
            raise ValueError(f"generation.backend=fused: float32 weights only, the model has {', '.join(bad)} "
                             "(a merged LoRA delta would round away); use generation.backend=lean")
        if hf.training:
            raise ValueError("generation.backend=fused: the model must be in eval mode")
        with torch.no_grad():
            self.layers = [self._layer(layer) for layer in lm.layers]
            self.embed = lm.embed_tokens.weight
            self.norm = (lm.norm.weight, lm.norm.variance_epsilon)
            w, b = merged_weight(hf.lm_head)
            self.head = (_t(w), b)
        attn = lm.layers[0].self_attn
        self.section = mrope_section(lm.config)
        self.hd = attn.head_dim
        self.cos = self.sin = self.mask = None

    def _layer(self, layer) -> dict:
        a, m = layer.self_attn, layer.mlp
        hq, hkv = a.config.num_attention_heads, a.config.num_key_value_heads
        if hq * a.head_dim != a.config.hidden_size:
            raise ValueError("generation.backend=fused: heads x head_dim != hidden_size; use generation.backend=lean")
        qkv = [merged_weight(p) for p in (a.q_proj, a.k_proj, a.v_proj)]
        gate, up = merged_weight(m.gate_proj), merged_weight(m.up_proj)
        if gate[1] is not None or up[1] is not None:
            raise ValueError("generation.backend=fused: an MLP with biases is not handled; use generation.backend=lean")
        w_o, b_o = merged_weight(a.o_proj)
        w_d, b_d = merged_weight(m.down_proj)
        if b_o is not None or b_d is not None:
            raise ValueError("generation.backend=fused: o_proj / down_proj with a bias is not handled; use "
                             "generation.backend=lean")
        w_qkv = torch.cat([w for w, _ in qkv])
        return dict(
            hq=hq, hkv=hkv, scaling=a.scaling, act=m.act_fn,
            ln1=(layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon),
            ln2=(layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon),
            w_qkv=_t(w_qkv), b_qkv=torch.cat([_bias(b, w.shape[0], w) for w, b in qkv]),
            w_o=_t(w_o), w_gu=_t(torch.cat([gate[0], up[0]])), inter=gate[0].shape[0], w_d=_t(w_d),
        )

    def set_rope(self, cos: torch.Tensor, sin: torch.Tensor) -> None:
        """cos / sin (the rotary embedding of every decode position) -> per-step tables [T, rows, 1, head_dim], each
        M-RoPE section taken from its axis as the attention applies them (harness/sampling/hf_api.py)."""
        cos, sin = (t.squeeze(1) for t in rope_tables(cos, sin, self.section))  # [rows, T, hd]
        self.cos = cos.transpose(0, 1).unsqueeze(2).contiguous()
        self.sin = rotate_sign(sin).transpose(0, 1).unsqueeze(2).contiguous()

    def set_mask(self, attention_mask: torch.Tensor, capacity: int) -> None:
        """The prompt's padding mask [rows, P] -> an additive mask [rows, kv_heads, 1, capacity]: 0 where a decode
        query may attend (every position but prompt padding, as lean_decode's `_decode_mask`), float32's minimum
        elsewhere (eager attention's mask), one copy per K/V head so that rows and heads flatten into a view."""
        rows, P = attention_mask.shape
        add = torch.zeros(rows, capacity, dtype=torch.float32, device=attention_mask.device)
        add[:, :P].masked_fill_(~attention_mask.bool(), torch.finfo(torch.float32).min)
        self.mask = add[:, None, None, :].expand(-1, self.layers[0]["hkv"], 1, -1).contiguous()

    def keep_rows(self, idx: torch.Tensor) -> None:
        self.cos, self.sin = self.cos.index_select(1, idx), self.sin.index_select(1, idx)
        self.mask = self.mask.index_select(0, idx)

    def __call__(self, tokens: torch.Tensor, s: int, cache) -> torch.Tensor:
        """tokens [rows] at decode step s (cache position cache.filled). Writes the step's K/V into `cache` (the
        caller advances it)."""
        rows, hd, pos = tokens.shape[0], self.hd, cache.filled
        cos, sin = self.cos[s], self.sin[s]  # [rows, 1, hd]
        mask = self.mask[..., :pos + 1].reshape(rows * self.mask.shape[1], 1, pos + 1)
        h = F.embedding(tokens, self.embed)
        for i, p in enumerate(self.layers):
            hq, hkv = p["hq"], p["hkv"]
            x = F.rms_norm(h, (h.shape[-1],), *p["ln1"])
            qkv = torch.addmm(p["b_qkv"], x, p["w_qkv"])
            qk = qkv[:, :(hq + hkv) * hd].view(rows, hq + hkv, hd)
            qk = torch.addcmul(qk * cos, qk.roll(hd // 2, -1), sin)
            keys, values = cache.keys[i], cache.values[i]
            keys[:, :, pos].copy_(qk[:, hq:])
            values[:, :, pos].copy_(qkv[:, (hq + hkv) * hd:].view(rows, hkv, hd))
            # Attention of one query per row, the query heads grouped under their K/V head (repeat_kv's order):
            # [rows * hkv, groups, hd] x [rows * hkv, hd, L]; CPU sdpa costs ~5x this at one query.
            L = pos + 1
            q = qk[:, :hq].reshape(rows * hkv, hq // hkv, hd)
            k = keys[:, :, :L].reshape(rows * hkv, L, hd)
            scores = torch.baddbmm(mask, q, k.transpose(1, 2), alpha=p["scaling"])
            out = torch.bmm(torch.softmax(scores, dim=-1), values[:, :, :L].reshape(rows * hkv, L, hd))
            h = torch.addmm(h, out.view(rows, hq * hd), p["w_o"])
            x = F.rms_norm(h, (h.shape[-1],), *p["ln2"])
            gate, up = torch.mm(x, p["w_gu"]).split(p["inter"], dim=-1)
            h = torch.addmm(h, p["act"](gate) * up, p["w_d"])
        h = F.rms_norm(h, (h.shape[-1],), *self.norm)
        w, b = self.head
        return torch.mm(h, w) if b is None else torch.addmm(b, h, w)
