"""Which parameters each stage trains (REVA-PO Sec. 3.1-3.3), and the LoRA wrap of stages 2-3.

Stage 0 (tiny only): everything. Stage 1 (warm-up): only `visual.merger`. Stages 2-3: the merger fully, plus
LoRA adapters on every linear layer of the vision encoder blocks and the LLM decoder layers (not lm_head).
Names are always those of the unwrapped Hugging Face module, with or without LoRA.
"""

from __future__ import annotations

import torch
from torch import nn

from harness.models.precision import upcast
from harness.models.unwrap import unwrap

MERGER = "model.visual.merger."
# Linear layers of Qwen2.5-VL's vision blocks and LLM decoder layers (module names as in transformers 4.57).
LORA_TARGETS = (
    r"model\.visual\.blocks\.\d+\.(attn\.(qkv|proj)|mlp\.(gate_proj|up_proj|down_proj))"
    r"|model\.language_model\.layers\.\d+\.(self_attn\.(q_proj|k_proj|v_proj|o_proj)"
    r"|mlp\.(gate_proj|up_proj|down_proj))"
)
STAGES = ("pretrain", "warmup", "sft", "rl")


def has_lora(model: nn.Module) -> bool:
    return any("lora_" in n for n, _ in unwrap(model).named_parameters())


def add_lora(model: nn.Module, r: int, alpha: int, dropout: float) -> nn.Module:
    """Inject LoRA adapters in place and return the unwrapped module (adapters live inside it)."""
    from peft import LoraConfig, inject_adapter_in_model

    inner = unwrap(model)
    if has_lora(inner):
        return inner
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=LORA_TARGETS, bias="none")
    return inject_adapter_in_model(config, inner)


def set_trainable(model: nn.Module, stage: str) -> list[str]:
    """Freeze everything, then unfreeze what `stage` trains; returns the trainable parameter names."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage '{stage}'; choose one of {', '.join(STAGES)}")
    inner = unwrap(model)
    if stage in ("sft", "rl") and not has_lora(inner):
        raise ValueError(f"stage '{stage}' trains LoRA adapters: call add_lora first")
    names, trained = [], []
    for name, p in inner.named_parameters():
        train = (
            stage == "pretrain"
            or name.startswith(MERGER)
            or (stage in ("sft", "rl") and "lora_" in name)
        )
        p.requires_grad_(train)
        if train:
            names.append(name)
            trained.append(p)
    upcast(trained)  # fp32 master weights for what trains (harness/models/precision.py)
    return names


def upcast_stage_parameters(model: nn.Module) -> None:
    """Merger and LoRA in fp32 (before loading a stage's saved fp32 tensors into them, exactly)."""
    upcast(p for n, p in unwrap(model).named_parameters() if n.startswith(MERGER) or "lora_" in n)


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters that stages 1-3 change (merger + LoRA), detached copies on CPU."""
    return {
        n: p.detach().to("cpu", copy=True)
        for n, p in unwrap(model).named_parameters()
        if n.startswith(MERGER) or "lora_" in n
    }


def count_parameters(model: nn.Module) -> tuple[int, int]:
    params = list(unwrap(model).parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def lora_settings(cfg) -> dict:
    """add_lora's arguments from a RunConfig's model section (REVA-PO Supp. D.2: r = alpha = 32, dropout 0.1)."""
    return {"r": cfg.model.lora_r, "alpha": cfg.model.lora_alpha, "dropout": cfg.model.lora_dropout}
