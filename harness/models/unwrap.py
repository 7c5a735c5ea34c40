"""The Hugging Face model inside a peft wrapper: every name of a trainable tensor is the unwrapped module's."""

from __future__ import annotations

from torch import nn


def unwrap(model: nn.Module) -> nn.Module:
    """The Hugging Face model inside a peft wrapper (or the model itself)."""
    # lazy: start-up cost (peft)
    from peft import PeftModel

    if isinstance(model, PeftModel):
        return model.base_model.model
    return model
