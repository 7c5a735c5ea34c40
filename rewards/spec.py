"""Reward specs: what `rl.reward` may name, resolved to one reward function and checked.

A spec is
- a registered name: ``bleu4``;
- any importable callable with the reward signature, outside this package: ``package.module:function``
  (rewards/registry.py: `named_reward`);
- a weighted sum of either: ``{bleu4: 0.5, chexpert_f1: 0.5}`` (rewards/composite.py: weights finite, >= 0, summing
  to > 0, used as given).

`resolve_reward` gives the function, `check_reward` resolves every part now (so that a typo fails when the config
loads), `compute_reward` calls the function and checks its output (`call_reward`: the function already resolved),
`reward_label` is the short text of a spec, `reward_scorers` the model-based scorers a spec will load (so that
preflight checks their weights first).
This module sits above the registry and the composites: both are resolved from here, and neither imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rewards.composite import check_weights, make_composite
from rewards.registry import RewardFn, named_reward

__all__ = ["RewardFailed", "call_reward", "check_reward", "compute_reward", "probe_reward", "resolve_reward",
           "reward_label", "reward_scorers", "user_parts"]


class RewardFailed(RuntimeError):
    """A reward function raised: the message names the reward spec and the exception's type."""


def reward_label(spec: Any) -> str:
    """A short text for a reward spec: its name, ``module:function``, or ``0.5*bleu4+0.5*chexpert_f1``."""
    if isinstance(spec, Mapping):
        return "+".join(f"{w:g}*{name}" if isinstance(w, int | float) else f"{w!r}*{name}" for name, w in spec.items())
    return str(spec)


def resolve_reward(spec: Any) -> RewardFn:
    """The reward function of a spec (module docstring): a registered name, ``package.module:function``, or a
    weighted mapping of either (a composite, rewards/composite.py). Errors are ValueErrors naming the part."""
    if isinstance(spec, Mapping):
        return make_composite(spec)
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"reward {spec!r} must be a name, package.module:function, or {{name: weight, ...}}")
    return named_reward(spec)


def check_reward(spec: Any) -> None:
    """Resolve every part of a spec now (names against the registry, modules imported, signatures and weights
    checked), so that a typo fails when the config loads; raises ValueError naming the function or weight."""
    if isinstance(spec, Mapping):
        for name in check_weights(spec):  # each weight finite, >= 0, their sum > 0 (the error names the weight)
            try:
                resolve_reward(name)
            except ValueError as e:
                raise ValueError(f"component '{name}' of the weighted reward: {e}") from e
    else:
        resolve_reward(spec)


def reward_scorers(spec: Any) -> tuple[str, ...]:
    """The scorers whose weights a spec's rewards load ("chexbert", "radgraph", "radgraph-xl"), each part of a
    weighted sum with weight > 0 included, in order, without repeats. A reward declares them in its attribute
    `scorers` (rewards/chexbert.py, rewards/radgraph.py; a `package.module:function` reward may do the same); a
    composite (rewards/composite.py, attribute `weights`) is the union of its parts. Errors as `resolve_reward`."""
    if isinstance(spec, Mapping):
        parts = [name for name, weight in check_weights(spec).items() if weight > 0]
    else:
        fn = resolve_reward(spec)
        weights = getattr(fn, "weights", None)
        if not isinstance(weights, Mapping):
            return tuple(dict.fromkeys(getattr(fn, "scorers", ())))
        parts = [name for name, weight in weights.items() if weight > 0]
    return tuple(dict.fromkeys(s for part in parts for s in reward_scorers(part)))


def compute_reward(name: Any, candidates: list[str], references: list[str], **context) -> np.ndarray:
    """Call the reward of a spec (a registered name, ``module:function`` or a weighted mapping) and check its
    output: shape [N], finite."""
    label = reward_label(name)
    _check_lengths(label, candidates, references)
    return call_reward(resolve_reward(name), label, candidates, references, **context)


def _check_lengths(label: str, candidates: list[str], references: list[str]) -> None:
    if len(candidates) != len(references):
        raise ValueError(f"reward '{label}': {len(candidates)} candidates but {len(references)} references")


def call_reward(fn: RewardFn, label: str, candidates: list[str], references: list[str], **context) -> np.ndarray:
    """`compute_reward` with the spec already resolved (`resolve_reward`; `label`: its `reward_label`): a caller
    that scores every step resolves it once per run."""
    _check_lengths(label, candidates, references)
    try:
        out = np.asarray(fn(candidates, references, **context), dtype=np.float64)
    except Exception as e:  # noqa: BLE001 - any error of a reward is reported with the reward's name
        raise RewardFailed(f"reward '{label}' raised {type(e).__name__}: {e}") from e
    if out.shape != (len(candidates),):
        raise ValueError(f"reward '{label}' returned shape {out.shape}, expected ({len(candidates)},)")
    bad = ~np.isfinite(out)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"reward '{label}' gave {out[i]} for candidate {i}: {candidates[i][:80]!r}")
    return out


def user_parts(spec: Any) -> list[str]:
    """The parts of a spec that come from the user's code (``module:function``), not from this package."""
    names = list(spec) if isinstance(spec, Mapping) else [spec]
    return [n for n in names if isinstance(n, str) and ":" in n]


def probe_reward(spec: Any, references: list[str], n: int = 4) -> None:
    """Call a spec with user code in it on a probe batch (the first `n` reference reports as candidates, each
    against the next one's reference) and check its output, before any decoding: a user reward that raises or
    returns no number per candidate is refused in seconds, named, instead of at the first RL step (issue 46, 49).
    Specs of this package's rewards only are not probed (their tests cover them; some load a scorer model)."""
    if not user_parts(spec) or not references:
        return
    refs = list(references[:n])
    candidates = refs[1:] + refs[:1]
    compute_reward(spec, candidates, refs)
