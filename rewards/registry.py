"""Reward registry: a reward is one file in rewards/ and one `@register_reward("name")` in it.

A reward maps candidate reports and their references to one float per candidate:
    fn(candidates: list[str], references: list[str], **context) -> np.ndarray[N]
`context` carries optional per-sample extras (e.g. reference labels) that some rewards use; a reward takes
what it needs by keyword and ignores the rest. Rewards must be finite: the loop rejects NaN or inf with an
error naming the reward.

What `rl.reward` may name (a *reward spec*, resolved by `resolve_reward`, checked by `check_reward`):
- a registered name: ``bleu4``;
- any importable callable with the signature above, outside this package: ``package.module:function`` (the
  module on the Python path, as TRL takes any callable as a reward);
- a weighted sum of either: ``{bleu4: 0.5, chexpert_f1: 0.5}`` (rewards/composite.py: weights finite, >= 0, summing
  to > 0, used as given).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

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


def reward_label(spec: Any) -> str:
    """A short text for a reward spec: its name, ``module:function``, or ``0.5*bleu4+0.5*chexpert_f1``."""
    if isinstance(spec, Mapping):
        return "+".join(f"{w:g}*{name}" if isinstance(w, int | float) else f"{w!r}*{name}" for name, w in spec.items())
    return str(spec)


def import_reward(path: str) -> RewardFn:
    """The callable ``package.module:function`` names (``function`` may be dotted: ``Class.method``), checked to take
    the reward signature; a ValueError names what is wrong (module, attribute, signature)."""
    module_name, _, attr = path.partition(":")
    if not module_name.strip() or not attr.strip():
        raise ValueError(f"reward {path!r} must look like package.module:function")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"reward {path!r}: cannot import module '{module_name}' ({e}); is its folder on the Python "
                         "path (PYTHONPATH)?") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"reward {path!r}: module '{module_name}' has no attribute '{attr}'")
        obj = getattr(obj, part)
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


def resolve_reward(spec: Any) -> RewardFn:
    """The reward function of a spec (module docstring): a registered name, ``package.module:function``, or a
    weighted mapping of either (a composite, rewards/composite.py). Errors are ValueErrors naming the part."""
    if isinstance(spec, Mapping):
        from rewards.composite import make_composite

        return make_composite(spec)
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"reward {spec!r} must be a name, package.module:function, or {{name: weight, ...}}")
    if ":" in spec:
        return import_reward(spec)
    return get_reward(spec)


def check_reward(spec: Any) -> None:
    """Resolve every part of a spec now (names against the registry, modules imported, signatures and weights
    checked), so that a typo fails when the config loads; raises ValueError naming the function or weight."""
    if isinstance(spec, Mapping):
        from rewards.composite import check_weights

        for name in check_weights(spec):  # each weight finite, >= 0, their sum > 0 (the error names the weight)
            try:
                resolve_reward(name)
            except ValueError as e:
                raise ValueError(f"component '{name}' of the weighted reward: {e}") from e
    else:
        resolve_reward(spec)


def compute_reward(name: Any, candidates: list[str], references: list[str], **context) -> np.ndarray:
    """Call the reward of a spec (a registered name, ``module:function`` or a weighted mapping) and check its
    output: shape [N], finite."""
    label = reward_label(name)
    if len(candidates) != len(references):
        raise ValueError(f"reward '{label}': {len(candidates)} candidates but {len(references)} references")
    out = np.asarray(resolve_reward(name)(candidates, references, **context), dtype=np.float64)
    if out.shape != (len(candidates),):
        raise ValueError(f"reward '{label}' returned shape {out.shape}, expected ({len(candidates)},)")
    bad = ~np.isfinite(out)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"reward '{label}' gave {out[i]} for candidate {i}: {candidates[i][:80]!r}")
    return out
