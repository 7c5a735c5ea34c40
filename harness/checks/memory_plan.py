"""Per-GPU memory of each stage of a preset, planned before any GPU is asked for (`regbench doctor PRESET`).

`memory_plan(cfg, stage, world_size)` adds, in GiB per GPU:

- weights: the frozen base in `model.dtype`, the trained parameters in fp32 (harness/models/precision.py);
- grads: one fp32 gradient per trained parameter (ZeRO-2: a 1/world share), plus DDP's gradient buckets (another
  copy; DeepSpeed reduces in fixed-size buckets instead, not counted);
- optimizer: AdamW's two fp32 moments per trained parameter, a 1/world share under ZeRO-1/2 (train.deepspeed);
- snapshots (RL): the old / reference / best / start copies of the trained parameters (harness/policy/snapshots.py,
  on the device);
- activations: what the backward pass keeps of one forward/backward pass (the batch per process, or the
  micro-batch), at the preset's lengths; `activation_bytes_per_token` below lists each saved tensor;
- context: the CUDA context and kernels (an estimate, 1 GiB).

Parameter counts are exact: the model is built on the meta device through the project's own code (the published
config of the 3B/7B, or model.path's config.json; add_lora and set_trainable as the stages call them). The
activation model counts the tensors autograd saves per token in a decoder layer / vision block; it is checked
against measured CPU peaks at the 7B's widths (benchmarks/memory_plan_check.py, benchmarks/RESULTS.md).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from harness.models.published import PRESET_SHAPES, published_config
from harness.parallel.ds_config_path import deepspeed_config_path

GIB = 2**30
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Tokens of a prompt besides its images: chat template, instruction and the classifier's disease list (an
# estimate: the real tokenizer may not be on this machine).
PROMPT_TEXT_TOKENS = 64
# Views per study where data.views is null: MIMIC-CXR the first view; IU-Xray every view, 2 in most studies.
PLAN_VIEWS = {"mimic_cxr": 1, "phantom": 1, "iu_xray": 2}
CUDA_CONTEXT_GIB = 1.0
# Snapshots of the trained parameters an RL run keeps on the device (old, ref, best, start).
RL_SNAPSHOTS = 4
# Bytes per element of the dropout mask autograd keeps: CUDA's fused dropout a bool mask; on the CPU,
# torch's dropout multiplies by an fp32 noise tensor and keeps that.
MASK_BYTES = {"cuda": 1, "cpu": 4}


# ---------------------------------------------------------------------------------------------------------
# The activation model (bytes autograd keeps per token of one layer)


def block_bytes(hidden: int, inter: int, lora_inputs: list[int], lora_r: int, dropout: bool,
                trains_lora: bool, act_bytes: int = 2, mask_bytes: int = 1, kv: int | None = None,
                heads: int = 0) -> int:
    """Bytes saved for the backward pass per token of one pre-norm attention + gated-MLP block (a Qwen2.5-VL
    decoder layer or vision block), the forward under autocast to the base's dtype (`act_bytes` wide;
    harness/models/precision.py), as counted with torch.autograd.graph.saved_tensors_hooks at the 7B's widths:

    - 2 RMSNorms: the fp32 copy of their input (transformers' Qwen2RMSNorm computes in fp32): 2 x 4h;
    - attention (sdpa): q and the output (h wide each), k and v (`kv` wide: the key/value heads, or h where they
      are repeated to every head), and the fp32 log-sum-exp per head;
    - gated MLP: gate's output (SiLU's input), SiLU's output and up's output: 3 x i;
    - with trained LoRA, per adapted linear of input width n: the input as autocast casts it for lora_A (n),
      lora_A's output (r), and with lora_dropout > 0 the dropout's mask (mask_bytes x n: a bool mask on CUDA,
      an fp32 noise tensor on the CPU).
    The frozen linears keep nothing more (their weights need no gradient)."""
    kv = hidden if kv is None else kv
    total = 2 * 4 * hidden + (2 * hidden + 2 * kv + 3 * inter) * act_bytes + 4 * heads
    if trains_lora:
        total += sum((n + lora_r) * act_bytes + (mask_bytes * n if dropout else 0) for n in lora_inputs)
    return total


def text_layer_bytes(config, lora_r: int, dropout: bool, trains_lora: bool, act_bytes: int = 2,
                     mask_bytes: int = 1, repeat_kv: bool = True) -> int:
    """block_bytes of a decoder layer. `repeat_kv`: sdpa gets k / v repeated to every head (transformers does so
    when an attention mask is passed, i.e. a padded batch), else the key/value heads only."""
    t = config.text_config
    h, i = t.hidden_size, t.intermediate_size
    kv = h if repeat_kv else t.num_key_value_heads * (h // t.num_attention_heads)
    return block_bytes(h, i, [h] * 6 + [i], lora_r, dropout, trains_lora, act_bytes, mask_bytes, kv,
                       t.num_attention_heads)


def vision_block_bytes(config, lora_r: int, dropout: bool, trains_lora: bool, act_bytes: int = 2,
                       mask_bytes: int = 1) -> int:
    v = config.vision_config
    h, i = v.hidden_size, v.intermediate_size
    return block_bytes(h, i, [h] * 4 + [i], lora_r, dropout, trains_lora, act_bytes, mask_bytes, h, v.num_heads)


# ---------------------------------------------------------------------------------------------------------
# The model's shape and its exact parameter counts


def model_config(cfg):
    """The Qwen2.5-VL config of cfg.model: model.path's config.json when it is a folder holding one, else the
    published shape of the preset."""
    path = cfg.model.path
    if path and (Path(path) / "config.json").is_file():
        # lazy: start-up cost (transformers)
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(path, local_files_only=True)
    if cfg.model.preset not in PRESET_SHAPES:
        raise ValueError(f"model.preset = {cfg.model.preset!r}: the memory plan covers "
                         f"{', '.join(PRESET_SHAPES)} (the tiny preset runs anywhere)")
    return published_config(PRESET_SHAPES[cfg.model.preset])


def parameter_counts(config, stage: str, lora_r: int) -> dict[str, int]:
    """{"total", "trained", "lora"} of the model as `stage` trains it, built on the meta device through
    harness.models.trainable (add_lora for SFT / RL, set_trainable)."""
    return dict(_counts(config.to_json_string(), stage, lora_r))


@functools.lru_cache(maxsize=16)
def _counts(config_json: str, stage: str, lora_r: int) -> tuple:
    # lazy: start-up cost (torch, transformers)
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    # lazy: start-up cost (torch)
    from harness.models.trainable import add_lora, set_trainable

    config = Qwen2_5_VLConfig(**json.loads(config_json))
    with torch.device("meta"):
        model = Qwen2_5_VLForConditionalGeneration(config)
        if stage in ("sft", "rl"):
            model = add_lora(model, r=lora_r, alpha=lora_r, dropout=0.0)
        set_trainable(model, stage)
    params = list(model.parameters())
    return (("total", sum(p.numel() for p in params)),
            ("trained", sum(p.numel() for p in params if p.requires_grad)),
            ("lora", sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)))


# ---------------------------------------------------------------------------------------------------------
# The plan


def zero_stage(path: str) -> int:
    """ZeRO stage of train.deepspeed (0: none, DDP). A relative path is read from here, else from the repository."""
    if not path:
        return 0
    return int((json.loads(deepspeed_config_path(path).read_text()).get("zero_optimization") or {}).get("stage", 0))


def views(cfg) -> int:
    return cfg.data.views or PLAN_VIEWS.get(cfg.data.dataset, 1)


def sequence(cfg, config, stage: str) -> dict[str, int]:
    """Tokens of one sample: image patches (vision tower), prompt tokens (image tokens after the merger plus
    PROMPT_TEXT_TOKENS) and report / response tokens."""
    v = config.vision_config
    side = cfg.model.image_size // v.patch_size
    patches = views(cfg) * side * side
    image_tokens = patches // v.spatial_merge_size**2
    report = cfg.rl.max_new_tokens if stage == "rl" else cfg.prompt.max_report_tokens
    if report is None:  # untruncated SFT targets (the official recipe): planned at the decoding bound, the length
        report = max(cfg.generation.max_new_tokens, cfg.rl.max_new_tokens)  # the reports are written to
    return {"patches": patches, "prompt": image_tokens + PROMPT_TEXT_TOKENS, "report": report}


def pass_size(cfg, stage: str, world_size: int) -> int:
    """Samples (SFT / warm-up) or responses (RL) in one forward/backward pass of a process."""
    if stage == "rl":  # the largest share (ceil) of the step's responses
        share = -(-cfg.rl.prompts_per_step * cfg.rl.group_size // world_size)
        return min(share, cfg.rl.micro_batch_size or share)
    share = -(-cfg.train.batch_size // world_size)
    return min(share, cfg.train.micro_batch_size or share)


def memory_plan(cfg, stage: str, world_size: int, device: str = "cuda") -> dict[str, float]:
    """GiB per GPU of `stage` (warmup, sft, rl, classifier, eval) run on `world_size` processes; see the module
    docstring. Keys: weights, grads, optimizer, snapshots, activations, context, total, and the inputs of the
    activation term (batch, tokens, ...)."""
    if stage == "classifier":
        return classifier_plan(cfg, world_size)
    config = model_config(cfg)
    t = config.text_config
    base_bytes = _BYTES[cfg.model.dtype]
    seq = sequence(cfg, config, stage)
    out: dict[str, float] = {"world_size": world_size, "views": views(cfg), **seq}
    if stage == "eval":
        counts = parameter_counts(config, "warmup", cfg.model.lora_r)  # LoRA merged into the base for decoding
        batch = cfg.generation.batch_size
        positions = seq["prompt"] + cfg.generation.max_new_tokens
        kv = 2 * t.num_hidden_layers * t.num_key_value_heads * (t.hidden_size // t.num_attention_heads)
        out.update(batch=batch, weights=counts["total"] * base_bytes / GIB, grads=0.0, optimizer=0.0,
                   snapshots=0.0, activations=batch * positions * kv * base_bytes / GIB
                   + batch * t.vocab_size * 4 / GIB)  # KV cache of the batch + one step's fp32 logits
    else:
        counts = parameter_counts(config, stage, cfg.model.lora_r)
        zero = zero_stage(cfg.train.deepspeed)
        trained, frozen = counts["trained"], counts["total"] - counts["trained"]
        shard = world_size if zero >= 1 else 1
        lora = stage in ("sft", "rl")
        dropout = lora and cfg.model.lora_dropout > 0 and (stage != "rl" or cfg.rl.policy_dropout)
        mask = MASK_BYTES.get(device, 1)
        batch = pass_size(cfg, stage, world_size)
        tokens = seq["prompt"] + seq["report"]
        gc = cfg.model.gradient_checkpointing
        layer = text_layer_bytes(config, cfg.model.lora_r, dropout, lora, base_bytes, mask, repeat_kv=batch > 1)
        block = vision_block_bytes(config, cfg.model.lora_r, dropout, lora, base_bytes, mask)
        if gc:  # each layer's input, plus one layer recomputed in the backward pass
            text = (t.num_hidden_layers * t.hidden_size * base_bytes + layer) * tokens
            vision = (config.vision_config.depth * config.vision_config.hidden_size * base_bytes + block) \
                * seq["patches"] if lora else 0
        else:
            text = t.num_hidden_layers * layer * tokens
            vision = config.vision_config.depth * block * seq["patches"] if lora else 0
        # the loss's logits over the report positions: bf16 from lm_head, fp32 for the log-softmax
        logits = seq["report"] * t.vocab_size * (base_bytes + 4)
        # autocast's copies of the fp32 trained weights in the base's dtype, held for the backward pass
        casts = trained * base_bytes if base_bytes < 4 else 0
        out.update(batch=batch, zero=zero, gradient_checkpointing=gc, lora_dropout=dropout,
                   trained_params=trained, total_params=counts["total"],
                   weights=(frozen * base_bytes + trained * 4) / GIB,
                   grads=(trained * 4 / (world_size if zero >= 2 else 1)
                          + (trained * 4 if zero == 0 and world_size > 1 else 0)) / GIB,
                   optimizer=trained * 8 / shard / GIB,
                   snapshots=(RL_SNAPSHOTS * trained * 4 / GIB) if stage == "rl" else 0.0,
                   activations=(batch * (text + vision + logits) + casts) / GIB)
    out["context"] = CUDA_CONTEXT_GIB
    out["total"] = sum(out[k] for k in ("weights", "grads", "optimizer", "snapshots", "activations", "context"))
    return out


def classifier_plan(cfg, world_size: int) -> dict[str, float]:
    """The ViT classifier in fp32 (bf16 activations with classifier.amp_bf16): weights, grads, AdamW and the
    activations of a transformer block per Korthikanti et al. 2022 (34 s h + 5 a s^2 bytes per sample at 16 bit)."""
    # lazy: start-up cost (timm, torch)
    import timm
    import torch

    c = cfg.classifier
    with torch.device("meta"):
        model = timm.create_model(c.arch, pretrained=False, img_size=c.img_size, num_classes=14) \
            if c.arch not in ("tiny_vit", "tiny_cnn") else None
    n = sum(p.numel() for p in model.parameters()) if model is not None else 0
    batch = max(1, c.batch_size // world_size)
    if c.micro_batch_size:  # gradient accumulation: one micro-batch's activations at a time
        batch = min(batch, c.micro_batch_size)
    acts = 0.0
    if model is not None and hasattr(model, "blocks"):
        s = model.patch_embed.num_patches + 1
        h, heads, depth = model.embed_dim, model.blocks[0].attn.num_heads, len(model.blocks)
        acts = depth * (34 * s * h + 5 * heads * s * s) * (1 if c.amp_bf16 else 2) * batch
    out = {"world_size": world_size, "batch": batch, "total_params": n, "trained_params": n,
           "weights": n * 4 / GIB, "grads": n * 4 / GIB, "optimizer": n * 8 / GIB, "snapshots": 0.0,
           "activations": acts / GIB, "context": CUDA_CONTEXT_GIB}
    out["total"] = sum(out[k] for k in ("weights", "grads", "optimizer", "snapshots", "activations", "context"))
    return out
