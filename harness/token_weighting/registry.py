"""The registry of token weighters (`rl.token_weighting`; DiTPO, paper 003).

A weighter is a dataclass subclassing `TokenWeighting`, registered with `@register_token_weighting("name")` in a
module of harness/token_weighting/ (imported on first use: a new weighter is one file there). Its dataclass fields
are filled from the RL config fields of the same name (e.g. `token_weight_boost`, `token_weight_max`,
`logprob_chunk_positions`), as the regularizers are. `setup(tokenizer, train_reports)` runs once before training;
`weights(model, rollout)` returns `[N, L]` weights, 0 outside the response mask and mean 1 over each response's
tokens; `model` holds the old policy (the engine swaps it in), for weighters that look through it.
"""

from __future__ import annotations

import dataclasses

import torch

from harness.registry import Registry

__all__ = ["TokenWeighting", "available_token_weightings", "build_token_weighting", "register_token_weighting"]


class TokenWeighting:
    """Base class of the registered token weighters (module docstring)."""

    name = ""

    def setup(self, tokenizer, train_reports: list[str]) -> None:
        """Called once before training with the tokenizer and the RL training split's reference reports."""

    def weights(self, model, rollout) -> torch.Tensor:
        raise NotImplementedError


_REGISTRY: Registry[type[TokenWeighting]] = Registry(
    "token weighting",
    ("harness.token_weighting",),
    base=TokenWeighting,
    decorator="register_token_weighting",
    name_attr="name",
)


def register_token_weighting(name: str):
    """Class decorator: makes `rl.token_weighting=name` use this weighter (config validation lists the names)."""
    return _REGISTRY.register(name)


def available_token_weightings() -> list[str]:
    """'none' (no weighting) and every registered weighter."""
    return ["none", *_REGISTRY.names()]


def build_token_weighting(rl, tokenizer, train_reports: list[str]) -> TokenWeighting | None:
    """The weighter `rl.token_weighting` names (None for 'none'), its fields filled from the RL config fields of
    the same names, set up on the tokenizer and the training reports."""
    if rl.token_weighting == "none":
        return None
    cls = _REGISTRY.lookup(rl.token_weighting)
    names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    weighter = cls(**{n: getattr(rl, n) for n in names if hasattr(rl, n)})
    weighter.setup(tokenizer, train_reports)
    return weighter
