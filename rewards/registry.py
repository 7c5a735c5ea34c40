"""Reward registry: a reward is one file in rewards/ and one `@register_reward("name")` in it.

A reward maps candidate reports and their references to one float per candidate:
    fn(candidates: list[str], references: list[str], **context) -> np.ndarray[N]
`context` carries optional per-sample extras (e.g. reference labels) that some rewards use; a reward takes
what it needs by keyword and ignores the rest. Rewards must be finite: the loop rejects NaN or inf with an
error naming the reward.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from harness.registry import Registry

RewardFn = Callable[..., np.ndarray]
# Every module of the `rewards` package is imported on first use, so that their `@register_reward`s run. Reward
# modules must import heavy dependencies (models, radgraph, ...) lazily, inside functions.
_REWARD_REGISTRY: Registry[RewardFn] = Registry("reward", ("rewards",), decorator="register_reward")
REWARDS: dict[str, RewardFn] = _REWARD_REGISTRY.entries


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator: make the function the reward ``rl.reward=name``."""
    return _REWARD_REGISTRY.register(name)


def available_rewards() -> list[str]:
    return _REWARD_REGISTRY.names()


def get_reward(name: str) -> RewardFn:
    """The reward registered as ``name``; an unknown name is a ValueError listing the registered ones."""
    return _REWARD_REGISTRY.lookup(name)


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
