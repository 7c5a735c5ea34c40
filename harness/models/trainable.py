"""Which parameters each stage trains (REVA-PO Sec. 3.1-3.3), and the LoRA wrap of stages 2-3.

Stage 0 (tiny only): everything. Stage 1 (warm-up): only `visual.merger` (or, with model.warmup_trainable =
merger_mlp, only its MLP, as the official stage 1). Stages 2-3: the merger fully, plus LoRA adapters on every linear
layer of the vision encoder blocks and the LLM decoder layers (not lm_head), and, with model.lora_patch_embed, on
the vision patch embedding's Conv3d (the official target list's "proj" matches it).
Names are always those of the unwrapped Hugging Face module, with or without LoRA.

Optionally (`token_indices`, `model.train_format_tokens`: MRG-R1's <think>/<report> tags on the tiny preset,
issue 24), stages 2-3 also train some rows of the input embedding (and so of the tied lm_head, or of an untied
one too) through peft's own `trainable_token_indices`: a copy of those rows that replaces them in every forward,
saved in the peft adapter (so an AdamW weight decay pulls the rows toward 0, not toward the base's values).
"""

from __future__ import annotations

import torch
from torch import nn

from harness.models.precision import upcast
from harness.models.unwrap import unwrap
from harness.prompting.output_format import format_token_ids

MERGER = "model.visual.merger."
# The parameter peft's `trainable_token_indices` adds: the [k, H] values of k embedding rows (peft's name).
TOKEN_DELTA = "trainable_tokens_delta"
# Linear layers of Qwen2.5-VL's vision blocks and LLM decoder layers (module names as in transformers 4.57).
LORA_TARGETS = (
    r"model\.visual\.blocks\.\d+\.(attn\.(qkv|proj)|mlp\.(gate_proj|up_proj|down_proj))"
    r"|model\.language_model\.layers\.\d+\.(self_attn\.(q_proj|k_proj|v_proj|o_proj)"
    r"|mlp\.(gate_proj|up_proj|down_proj))"
)
# The vision patch embedding's Conv3d: a LoRA target only with `model.lora_patch_embed` (the official target list
# catches it by its name "proj"; peft's LoRA Conv3d).
PATCH_EMBED = r"model\.visual\.patch_embed\.proj"
MERGER_MLP = MERGER + "mlp."  # the official stage 1's trainable set (model.warmup_trainable = merger_mlp)
WARMUP_TRAINABLE = ("merger", "merger_mlp")
STAGES = ("pretrain", "warmup", "sft", "rl")


def lora_targets(patch_embed: bool = False) -> str:
    """peft's target_modules (a full-match regex): LORA_TARGETS, plus the patch embedding's Conv3d."""
    return f"{LORA_TARGETS}|{PATCH_EMBED}" if patch_embed else LORA_TARGETS


def has_lora(model: nn.Module) -> bool:
    return any("lora_" in n for n, _ in unwrap(model).named_parameters())


def is_stage_parameter(name: str) -> bool:
    """Whether a parameter (unwrapped name) is one stages 1-3 may change: the merger, LoRA, trainable token rows."""
    return name.startswith(MERGER) or "lora_" in name or TOKEN_DELTA in name


def token_targets(model: nn.Module, token_indices: list[int] | None):
    """peft's `trainable_token_indices` for `model`: the list itself when lm_head is tied to the input embedding
    (peft then ties the output rows to the same delta), else the rows of both, so the output rows train too."""
    if not token_indices:
        return None
    inner = unwrap(model)
    out, emb = inner.get_output_embeddings(), inner.get_input_embeddings()
    if out is None or getattr(inner.config, "tie_word_embeddings", False):  # what peft's tying looks at
        return list(token_indices)
    names = {m: n.rsplit(".", 1)[-1] for n, m in inner.named_modules()}
    return {names[emb]: list(token_indices), names[out]: list(token_indices)}


def add_lora(model: nn.Module, r: int, alpha: int, dropout: float,
             token_indices: list[int] | None = None, patch_embed: bool = False) -> nn.Module:
    """Inject LoRA adapters in place and return the unwrapped module (adapters live inside it); with
    `token_indices`, also peft's trainable rows of those tokens' input (and output) embeddings; with `patch_embed`,
    also LoRA on the vision patch embedding's Conv3d (model.lora_patch_embed)."""
    # lazy: start-up cost (peft)
    from peft import LoraConfig, inject_adapter_in_model

    inner = unwrap(model)
    if has_lora(inner):
        return inner
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=lora_targets(patch_embed),
                        bias="none",
                        trainable_token_indices=token_targets(inner, token_indices))
    return inject_adapter_in_model(config, inner)


def set_trainable(model: nn.Module, stage: str, warmup_trainable: str = "merger") -> list[str]:
    """Freeze everything, then unfreeze what `stage` trains; returns the trainable parameter names.
    `warmup_trainable` (model.warmup_trainable): the warm-up's set, the whole merger or its MLP only."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage '{stage}'; choose one of {', '.join(STAGES)}")
    if warmup_trainable not in WARMUP_TRAINABLE:
        raise ValueError(f"model.warmup_trainable must be one of {', '.join(WARMUP_TRAINABLE)}, "
                         f"got {warmup_trainable!r}")
    merger = MERGER_MLP if stage == "warmup" and warmup_trainable == "merger_mlp" else MERGER
    inner = unwrap(model)
    if stage in ("sft", "rl") and not has_lora(inner):
        raise ValueError(f"stage '{stage}' trains LoRA adapters: call add_lora first")
    names, trained = [], []
    for name, p in inner.named_parameters():
        train = (
            stage == "pretrain"
            or name.startswith(merger)
            or (stage in ("sft", "rl") and is_stage_parameter(name))
        )
        p.requires_grad_(train)
        if train:
            names.append(name)
            trained.append(p)
    upcast(trained)  # fp32 master weights for what trains (harness/models/precision.py)
    return names


def upcast_stage_parameters(model: nn.Module) -> None:
    """Merger, LoRA and token rows in fp32 (before loading a stage's saved fp32 tensors into them, exactly)."""
    upcast(p for n, p in unwrap(model).named_parameters() if is_stage_parameter(n))


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters that stages 1-3 change (merger, LoRA, token rows), detached copies on CPU."""
    return {n: p.detach().to("cpu", copy=True) for n, p in unwrap(model).named_parameters() if is_stage_parameter(n)}


def count_parameters(model: nn.Module) -> tuple[int, int]:
    params = list(unwrap(model).parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def lora_settings(model, tokenizer=None) -> dict:
    """add_lora's arguments from a run's model section `model` (ModelConfig; REVA-PO Supp. D.2: r = alpha = 32,
    dropout 0.1), plus `patch_embed` with model.lora_patch_embed, plus `token_indices` (the tags' tokens in
    `tokenizer`) with `model.train_format_tokens`; a default config gives exactly r, alpha and dropout, as before
    those options."""
    settings = {"r": model.lora_r, "alpha": model.lora_alpha, "dropout": model.lora_dropout}
    if model.lora_patch_embed:  # only when on: a default config's settings (and spec.json) stay as they were
        settings["patch_embed"] = True
    if not model.train_format_tokens:
        return settings
    if tokenizer is None:
        raise ValueError("model.train_format_tokens: lora_settings needs the tokenizer to find the tags' tokens")

    return {**settings, "token_indices": format_token_ids(tokenizer)}
