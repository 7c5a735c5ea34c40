"""A lean decoding loop for Qwen2.5-VL: the tokens of `model.generate`, without its per-step overhead.

What `generate` spends a decoding step on (transformers 4.57, one CPU core, the tiny model): most of it is
rebuilding the 4-D attention mask through `vmap` (`masking_utils.create_causal_mask`), concatenating the
KV cache, the attention mask and the token ids, and re-deriving positions, none of which is arithmetic.
This loop keeps the arithmetic identical and drops the rest:

- the prefill (harness/sampling/lean_prefill.py) is `generate`'s first step with the same arithmetic: the vision
  encoder runs once per distinct image (a rollout repeats each prompt G times) and the 4-D mask is built
  directly, so the prompt's K/V, M-RoPE `rope_deltas` and logits are bit-identical; batches it does not
  handle get `generate`'s own first step (`prepare_inputs_for_generation` + the model's forward);
- the K/V of every layer go into buffers preallocated for prompt + max_new_tokens; a step writes one slot and
  attends to a view of the filled prefix (the same shapes the growing cache of `generate` has);
- each decode step calls the model's own embedding, rotary embedding, decoder layers (LoRA included), norm and
  `lm_head`; the attention mask is a view of one mask built at the start, the rotary cos/sin of all decode
  positions are computed once (an outer product per element, so no rounding differs from one at a time);
- the logits processors are transformers' own classes, in `generate`'s order (`_get_logits_processor`),
  except top-p on the CPU: harness/sampling/lean_topp.py gives the same bits without sorting indices;
- rows that have finished are dropped from the batch (K/V, positions, mask and token buffers compacted once
  per finishing event), while sampling still draws `torch.multinomial` over a [rows, vocab] matrix of the
  full batch, so the generator is consumed exactly as `generate` consumes it.

Attention implementations: eager (the tiny preset) and sdpa (the real presets). Others raise.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from transformers import (
    DynamicCache,
    GenerationConfig,
    LogitsProcessorList,
    MinNewTokensLengthLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import eager_attention_forward

from harness.models.logit_positions import last_positions
from harness.models.trainable import unwrap
from harness.sampling.feature_memo import FeatureMemo
from harness.sampling.fused_step import FusedDecodeStep
from harness.sampling.hf_api import cache_kwargs, first_step_inputs, layer_output
from harness.sampling.lean_prefill import prefill, prefill_supported
from harness.sampling.lean_step import DecodeStep
from harness.sampling.lean_topp import SortFreeTopP
from harness.sampling.mrope_index import decode_positions

SUPPORTED_ATTENTION = ("eager", "sdpa")
# generation_config fields whose non-default values would make `generate` add processors or stopping rules
# that this loop does not implement (the callers set everything else explicitly).
UNSUPPORTED_IF_SET = (
    "min_length", "no_repeat_ngram_size", "bad_words_ids", "sequence_bias", "begin_suppress_tokens",
    "forced_bos_token_id", "forced_eos_token_id", "encoder_repetition_penalty", "exponential_decay_length_penalty",
    "renormalize_logits", "remove_invalid_values", "guidance_scale", "min_p", "typical_p", "epsilon_cutoff",
    "eta_cutoff", "watermarking_config", "stop_strings", "max_time", "num_beams",
)


# Values of those fields that add nothing: transformers 4.x's defaults. 5.x's GenerationConfig defaults them to None,
# and a model saved by 4.x (or built by it, harness/models/tiny.py) carries the 4.x value.
NEUTRAL = {"min_length": 0, "no_repeat_ngram_size": 0, "encoder_repetition_penalty": 1.0,
           "renormalize_logits": False, "remove_invalid_values": False, "typical_p": 1.0, "epsilon_cutoff": 0.0,
           "eta_cutoff": 0.0, "num_beams": 1}


def _inactive(name: str, value) -> bool:
    return value is None or (name in NEUTRAL and value == NEUTRAL[name] and type(value) is type(NEUTRAL[name]))


def _hf_model(model):
    return unwrap(model)


def check_supported(hf) -> None:
    """Raise (naming the setting) where `generate` would do something this loop does not."""
    attn = hf.config._attn_implementation
    if attn not in SUPPORTED_ATTENTION:
        raise ValueError(f"generation.backend=lean: attention implementation '{attn}' is not supported "
                         f"(supported: {', '.join(SUPPORTED_ATTENTION)}); use generation.backend=hf")
    text = hf.config.get_text_config()
    if getattr(text, "use_sliding_window", False):
        raise ValueError("generation.backend=lean: the model config sets use_sliding_window=true, which the lean "
                         "loop does not implement; use generation.backend=hf")
    default = GenerationConfig()
    for name in UNSUPPORTED_IF_SET:
        have = getattr(hf.generation_config, name, None)
        if have != getattr(default, name, None) and not _inactive(name, have):
            raise ValueError(f"generation.backend=lean: the model's generation_config.{name} = {have!r} is not "
                             "implemented by the lean loop; use generation.backend=hf")


def logits_processors(prompt_len: int, *, min_new_tokens: int, repetition_penalty: float, do_sample: bool,
                      temperature: float, top_p: float, top_k: int, suppress_tokens: Sequence[int] | None,
                      eos: torch.Tensor) -> LogitsProcessorList:
    """transformers' processors, with `generate`'s conditions and order (GenerationMixin._get_logits_processor)."""
    procs = LogitsProcessorList()
    device = eos.device
    if repetition_penalty != 1.0:
        procs.append(RepetitionPenaltyLogitsProcessor(penalty=float(repetition_penalty)))
    if min_new_tokens > 0:
        procs.append(MinNewTokensLengthLogitsProcessor(prompt_len, min_new_tokens, eos, device=device))
    if suppress_tokens is not None:
        procs.append(SuppressTokensLogitsProcessor(list(suppress_tokens), device=device))
    if do_sample:
        if temperature != 1.0:
            procs.append(TemperatureLogitsWarper(float(temperature)))
        if top_k:
            procs.append(TopKLogitsWarper(top_k=int(top_k), min_tokens_to_keep=1))
        if top_p < 1.0:
            procs.append(SortFreeTopP(top_p=float(top_p), min_tokens_to_keep=1))
    return procs


def inverse_cdf_sample(probs: torch.Tensor) -> torch.Tensor:
    """One index per row of probs [rows, vocab] with probability probs[i] / sum(probs): the first index whose
    cumulative sum exceeds a uniform draw times the row's total. One uniform per row, where torch.multinomial
    draws an exponential variate per vocabulary entry (the largest cost of a fused decode step at 128 rows).
    A zero-probability index is never returned (its cumulative sum equals its predecessor's)."""
    cdf = probs.cumsum(dim=-1)
    u = torch.rand(probs.shape[0], 1, dtype=cdf.dtype, device=cdf.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=probs.shape[-1] - 1)


class SlotCache:
    """Preallocated K/V per layer, [rows, kv_heads, capacity, head_dim]. The decoder layers call `update` with
    new positions (the prompt, then one per step); they are written in place and the filled prefix comes back as
    a view. A layer's buffers are allocated at its first update, in the dtype of its K/V."""

    def __init__(self, n_layers: int, capacity: int, filled: int = 0):
        self.keys: list = [None] * n_layers
        self.values: list = [None] * n_layers
        self.capacity, self.filled = capacity, filled

    def update(self, key, value, layer_idx, cache_kwargs=None, **kwargs):  # 5.x passes kwargs=...
        n = key.shape[2]
        if self.keys[layer_idx] is None:
            self.keys[layer_idx] = key.new_empty(*key.shape[:2], self.capacity, key.shape[3])
            self.values[layer_idx] = value.new_empty(*value.shape[:2], self.capacity, value.shape[3])
        end = self.filled + n
        self.keys[layer_idx][:, :, self.filled:end].copy_(key)
        self.values[layer_idx][:, :, self.filled:end].copy_(value)
        if self.filled == 0:  # the prompt: attend to the new K/V themselves, as from generate's empty cache
            return key, value
        return self.keys[layer_idx][:, :, :end], self.values[layer_idx][:, :, :end]

    def advance(self, n: int = 1) -> None:
        self.filled += n

    def keep_rows(self, idx: torch.Tensor) -> None:
        self.keys = [k.index_select(0, idx) for k in self.keys]
        self.values = [v.index_select(0, idx) for v in self.values]


def _decode_mask(attention_mask: torch.Tensor, capacity: int, attn: str, dtype: torch.dtype):
    """The mask every decode step of `generate` builds, for all positions at once ([rows, 1, 1, capacity]).

    A decode query attends to every earlier position that is not prompt padding (generate extends the mask with
    ones). eager: additive, 0 or dtype-min (masking_utils.eager_mask); sdpa: boolean, or None when nothing is
    padded (masking_utils._ignore_causal_mask_sdpa lets SDPA run unmasked then).
    """
    rows, P = attention_mask.shape
    keep = torch.ones(rows, capacity, dtype=torch.bool, device=attention_mask.device)
    keep[:, :P] = attention_mask.bool()
    keep = keep[:, None, None, :]
    if attn == "sdpa":
        return None if bool(attention_mask.all()) else keep
    zero = torch.tensor(0.0, device=keep.device, dtype=dtype)
    return torch.where(keep, zero, torch.finfo(dtype).min)


def _decode_step(hf, lm, attn: str):
    """harness/sampling/lean_step.DecodeStep in eval mode (what it reproduces); None = call the decoder layers."""
    if hf.training:
        return None


    return DecodeStep(lm, eager_attention_forward if attn == "eager" else ALL_ATTENTION_FUNCTIONS[attn])


@torch.no_grad()
def lean_generate(model, batch: dict, *, max_new_tokens: int, eos_token_id: int, pad_token_id: int,
                  min_new_tokens: int = 0, repetition_penalty: float = 1.0, do_sample: bool = False,
                  temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                  suppress_tokens: Sequence[int] | None = None, drop_finished: bool | None = None,
                  dedupe_images: bool | None = None, fused: bool = False,
                  image_keys: Sequence[Hashable] | None = None, memo: FeatureMemo | None = None) -> torch.Tensor:
    """Prompt + new tokens [rows, P + steps], as `model.generate(**batch, ...)` returns them with the same
    settings (pad after each row's end token; steps = until every row ended, at most max_new_tokens).

    `top_k` 0 = off. Runs under the caller's autocast / eval state, like `generate`. `drop_finished` None = on
    the CPU only: there the tokens are tested equal with rows dropped; on CUDA, GEMM kernels chosen by row count
    may round differently, so rows are kept (same shapes as generate) until a GPU run shows dropping is exact.
    `dedupe_images` (encode each distinct image once, harness/sampling/lean_prefill.py) None = on the CPU only,
    likewise. `fused` (do_sample only): decode steps 2.. with harness/sampling/fused_step.py and tokens drawn by
    `inverse_cdf_sample` (generation.backend = "fused": fewer ops, other random draws, float rounding differs;
    the prefill and the logits processors stay these). `image_keys` and `memo` (with `dedupe_images`): the
    prefill reads and stores the images' vision features there (harness/sampling/feature_memo.py; the same
    numbers).
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens = {max_new_tokens} must be >= 1")
    hf = _hf_model(model)
    check_supported(hf)
    attn = hf.config._attn_implementation
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    rows, P = input_ids.shape
    device = input_ids.device
    capacity = P + max_new_tokens
    if drop_finished is None:
        drop_finished = device.type == "cpu"
    if dedupe_images is None:
        dedupe_images = device.type == "cpu"
    eos = torch.tensor([eos_token_id], device=device)
    procs = logits_processors(P, min_new_tokens=min_new_tokens, repetition_penalty=repetition_penalty,
                              do_sample=do_sample, temperature=temperature, top_p=top_p, top_k=top_k,
                              suppress_tokens=suppress_tokens, eos=eos)

    lm = hf.model.language_model
    layers = list(lm.layers)
    slots = SlotCache(len(layers), capacity)
    if prefill_supported(hf, batch):
        logits = prefill(hf, batch, slots, dedupe_images=dedupe_images, image_keys=image_keys, memo=memo)
    else:  # generate's first step, verbatim (positions, rope_deltas, vision features, logits of the last position)
        cache = DynamicCache(config=hf.config.get_text_config())
        extra = {k: v for k, v in batch.items() if k not in ("input_ids", "attention_mask")}
        inputs = first_step_inputs(hf, input_ids, attention_mask, cache, last_positions(1, P, device), **extra)
        logits = hf(**inputs, return_dict=True).logits[:, -1, :].to(copy=True, dtype=torch.float32)
        for i, layer in enumerate(cache.layers):
            slots.update(layer.keys, layer.values, i)
        del cache, inputs
    slots.filled = P

    if fused:
        if not do_sample:
            raise ValueError("fused decoding samples (do_sample=True); greedy decoding uses the exact lean loop")

        if torch.is_autocast_enabled(device.type):
            raise ValueError("generation.backend=fused: not under autocast (a bf16 / fp16 base); use "
                             "generation.backend=lean")
        fused_step = FusedDecodeStep(hf)
    step_fn = None if fused else _decode_step(hf, lm, attn)
    embed = lm.embed_tokens
    # generate's mask has the dtype of the input embeddings (autocast leaves the embedding in the weight's).
    mask = None if fused else _decode_mask(attention_mask, capacity, attn, embed.weight.dtype)
    # M-RoPE positions of decode step s (its token sits at cache position P + s): P + s + rope_delta in 4.57, on all
    # three axes (Qwen2_5_VLForConditionalGeneration.prepare_inputs_for_generation; 5.x: mrope_index.py).
    pos = decode_positions(hf.model, attention_mask, capacity).expand(3, rows, -1)
    probe = embed.weight.new_empty(1)
    cos, sin = lm.rotary_emb(probe, pos)  # [3, rows, max_new_tokens, head_dim]
    if fused:
        fused_step.set_rope(cos, sin)
        fused_step.set_mask(attention_mask, capacity)
    elif step_fn is not None:
        cos, sin = step_fn.sections(cos, sin)  # [rows, 1, max_new_tokens, head_dim]
    row_dim = 0 if step_fn is not None else cos.dim() - 3  # the rotary output: [3, rows, ...] in 4.57, [rows, ...] 5.x

    seq = torch.full((rows, capacity), pad_token_id, dtype=input_ids.dtype, device=device)
    seq[:, :P] = input_ids
    result = seq.clone() if drop_finished else seq
    live = torch.arange(rows, device=device)  # original row of each live row
    done = torch.zeros(rows, dtype=torch.bool, device=device)
    probs_all = torch.empty(rows, logits.shape[-1], dtype=torch.float32, device=device) if do_sample else None
    cache_pos = torch.empty(1, dtype=torch.long, device=device)

    n_steps = 0
    for s in range(max_new_tokens):
        cur = P + s
        scores = logits
        for proc in procs:  # LogitsProcessorList's own call inspects signatures every step
            scores = proc(seq[:, :cur], scores)
        if fused:  # always sampling: greedy decoding never takes the fused step
            nxt = inverse_cdf_sample(torch.softmax(scores, dim=-1))
        elif do_sample:
            probs = torch.softmax(scores, dim=-1)
            if probs.shape[0] == rows:
                probs_all.copy_(probs)
            else:
                probs_all.index_copy_(0, live, probs)
            nxt = torch.multinomial(probs_all, num_samples=1).squeeze(1)
            if probs.shape[0] != rows:
                nxt = nxt.index_select(0, live)
        else:
            nxt = torch.argmax(scores, dim=-1)
        nxt = torch.where(done, pad_token_id, nxt)  # rows kept after their end token (drop_finished off)
        seq[:, cur] = nxt
        n_steps = s + 1
        done = done | (nxt == eos_token_id)
        if s + 1 == max_new_tokens or bool(done.all()):
            break
        if drop_finished and bool(done.any()):
            keep = (~done).nonzero().squeeze(1)
            result[live] = seq
            live, seq, done = live[keep], seq.index_select(0, keep), done[keep]
            slots.keep_rows(keep)
            if fused:
                fused_step.keep_rows(keep)
            else:
                cos, sin = cos.index_select(row_dim, keep), sin.index_select(row_dim, keep)
            mask = None if mask is None else mask.index_select(0, keep)
            nxt = nxt[keep]
        if fused:
            logits = fused_step(nxt, s, slots)
            slots.advance()
            continue
        # One decode step with the model's own modules.
        cache_pos.fill_(cur)
        hidden = embed(nxt[:, None])
        pe = (cos[..., s:s + 1, :], sin[..., s:s + 1, :])
        step_mask = None if mask is None else mask[..., :cur + 1]
        if step_fn is not None:
            hidden = step_fn(hidden, *pe, step_mask, slots)
        else:
            for layer in layers:
                hidden = layer_output(layer(hidden, attention_mask=step_mask, position_ids=None, use_cache=True,
                                            position_embeddings=pe, **cache_kwargs(layer, slots, cache_pos)))
        slots.advance()
        hidden = lm.norm(hidden)
        logits = hf.lm_head(hidden[:, -1:, :])[:, -1, :].to(dtype=torch.float32)
    if drop_finished:
        result[live] = seq
        seq = result
    return seq[:, :P + n_steps]
