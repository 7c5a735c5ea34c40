"""Reward registry: a reward is one file in rewards/ and one `@register_reward("name")` in it.

A reward maps candidate reports and their references to one float per candidate:
    fn(candidates: list[str], references: list[str], **context) -> np.ndarray[N]
`context` carries optional per-sample extras (e.g. reference labels) that some rewards use; a reward takes
what it needs by keyword and ignores the rest. Rewards must be finite: the loop rejects NaN or inf with an
error naming the reward.

A reward is named (`named_reward`) by its registered name, ``bleu4``, or, outside this package, by any importable
callable with the signature above, ``package.module:function`` (the module on the Python path, as TRL takes any
callable as a reward). What `rl.reward` may name, a weighted sum of named rewards included, is a *reward spec*:
rewards/spec.py resolves and checks it; rewards/composite.py builds the weighted sums.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from harness.registry import Registry, import_object

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


def import_reward(path: str) -> RewardFn:
    """The callable ``package.module:function`` names (``function`` may be dotted: ``Class.method``), checked to take
    the reward signature; a ValueError names what is wrong (module, attribute, signature)."""
    obj = import_object(path, "reward", "look like package.module:function")
    if not callable(obj):
        raise ValueError(f"reward {path!r} is a {type(obj).__name__}, not a function")
    check_signature(path, obj)
    return obj


def check_signature(name: str, fn: Callable) -> None:
    """A reward must accept (candidates, references, **context); a ValueError names the function otherwise."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a readable signature: trusted
        return
    try:
        sig.bind(["candidate"], ["reference"])
    except TypeError as e:
        raise ValueError(f"reward {name!r}: function {getattr(fn, '__qualname__', fn)}{sig} cannot be called as "
                         f"fn(candidates, references, **context) ({e})") from e
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        raise ValueError(f"reward {name!r}: function {getattr(fn, '__qualname__', fn)}{sig} must also take "
                         "**context (the per-sample extras some rewards use; a reward ignores what it does not need)")


def named_reward(name: str) -> RewardFn:
    """The reward a name gives: ``package.module:function`` (imported and checked, `import_reward`) or a registered
    name (`get_reward`); a ValueError names what is wrong."""
    if ":" in name:
        return import_reward(name)
    return get_reward(name)
