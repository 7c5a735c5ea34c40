"""Reward registry: a reward is one file in rewards/ and one `@register_reward("name")` in it.

A reward maps candidate reports and their references to one float per candidate:
    fn(candidates: list[str], references: list[str], **context) -> np.ndarray[N]
`context` carries optional per-sample extras (e.g. reference labels) that some rewards use; a reward takes
what it needs by keyword and ignores the rest. Rewards must be finite: the loop rejects NaN or inf with an
error naming the reward.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

import numpy as np

RewardFn = Callable[..., np.ndarray]
REWARDS: dict[str, RewardFn] = {}
_loaded = False


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    def deco(fn: RewardFn) -> RewardFn:
        if name in REWARDS and REWARDS[name] is not fn:
            raise ValueError(f"reward '{name}' is already registered")
        REWARDS[name] = fn
        return fn

    return deco


def _ensure_builtins() -> None:
    """Import every module of the `rewards` package once, so that their `@register_reward`s run.

    Reward modules must import heavy dependencies (models, radgraph, ...) lazily, inside functions.
    """
    global _loaded
    if _loaded:
        return
    import rewards

    for info in pkgutil.iter_modules(rewards.__path__):
        if info.name != "registry":
            importlib.import_module(f"rewards.{info.name}")
    _loaded = True


def available_rewards() -> list[str]:
    _ensure_builtins()
    return sorted(REWARDS)


def get_reward(name: str) -> RewardFn:
    _ensure_builtins()
    if name not in REWARDS:
        raise ValueError(f"unknown reward '{name}'; available: {', '.join(sorted(REWARDS))}")
    return REWARDS[name]


def compute_reward(name: str, candidates: list[str], references: list[str], **context) -> np.ndarray:
    """Call a registered reward and check its output: shape [N], finite."""
    if len(candidates) != len(references):
        raise ValueError(f"reward '{name}': {len(candidates)} candidates but {len(references)} references")
    out = np.asarray(get_reward(name)(candidates, references, **context), dtype=np.float64)
    if out.shape != (len(candidates),):
        raise ValueError(f"reward '{name}' returned shape {out.shape}, expected ({len(candidates)},)")
    bad = ~np.isfinite(out)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"reward '{name}' gave {out[i]} for candidate {i}: {candidates[i][:80]!r}")
    return out
