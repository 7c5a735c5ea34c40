"""The module mode of the current policy's pass with grad (harness/grpo/trainer.py).

By default that pass runs in eval mode (dropout off: current = old gives a ratio of exactly 1). transformers only
recomputes activations under gradient checkpointing in train mode (`self.gradient_checkpointing and
self.training`), so in eval mode `model.gradient_checkpointing` was silently off in RL. With checkpointing on, the
pass now runs in train mode with every dropout module in eval mode: the same values as eval mode (Qwen2.5-VL has no
other layer that differs between the modes), the activations recomputed in the backward.
"""

from __future__ import annotations

from torch import nn

from harness.models.unwrap import unwrap


def checkpointing_enabled(model: nn.Module) -> bool:
    return bool(getattr(unwrap(model), "is_gradient_checkpointing", False))


def set_grad_pass_mode(model: nn.Module, dropout: bool) -> None:
    """Train mode with dropout when `dropout` (rl.policy_dropout); else eval mode's values, in train mode with the
    dropout modules off when gradient checkpointing is enabled (see the module docstring)."""
    if dropout or not checkpointing_enabled(model):
        model.train(dropout)
        return
    model.train()
    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd):
            module.eval()
