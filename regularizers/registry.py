"""Interfaces and registries for KL regularizers (beta per response) and reference-policy strategies.

A regularizer answers "how hard does each response get pulled toward the reference?" (``beta[B, G]``); a
reference strategy answers "which policy is the reference?" (a snapshot in the ``SnapshotStore``). The two are
orthogonal: any regularizer runs with any strategy. Both are dataclasses whose fields are their config, built
by name from the registry (harness/registry.py; registering a class with config fields that is not a dataclass
is a TypeError):

    @register_regularizer("rer")
    @dataclass
    class RER(Regularizer): ...

    reg = build_regularizer("rer", beta_min=0.05, beta_base=0.1, beta_max=0.12)

A class in the user's own code is named ``package.module:Class`` (``rl.regularizer=my_kl:MyKL``, the module on
PYTHONPATH), as a reward is. The plug-in contract: a checkpoint holds ``state_dict()``, so every instance attribute
that is not a config field (a dataclass init field) must be a key of ``state_dict()`` (and be restored by
``load_state_dict``), or be named in ``derived_attrs`` (rebuilt from the config on construction). A plug-in that
breaks it is refused (:func:`check_state_contract`) when it is built, after a trial ``after_step`` at config load
(regularizers) and before every checkpoint is written: a resumed run never restarts state silently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch

from harness.registry import Registry

if TYPE_CHECKING:
    from harness.policy.snapshots import SnapshotStore

__all__ = [
    "REFERENCES",
    "REGULARIZERS",
    "ReferenceStrategy",
    "Regularizer",
    "available_references",
    "available_regularizers",
    "build_reference",
    "build_regularizer",
    "check_state_contract",
    "config_fields",
    "reference_from_config",
    "regularizer_from_config",
    "register_reference",
    "register_regularizer",
]


class Regularizer:
    """Base class: one KL weight per response.

    The RL loop calls, per optimizer step: ``betas(A, h_ref)`` for each batch of groups, then
    ``after_step(kl_mean, n)`` once with the global mean KL of the step and its number of samples. Checkpoints
    hold ``state_dict()``; ``log_stats()`` goes into ``steps.jsonl``.
    """

    name: ClassVar[str] = ""
    # False: the loop skips the reference forward pass entirely (no KL term, no reference entropy).
    needs_reference: ClassVar[bool] = True
    # True: the loop computes h_ref[B, G] (reference full-vocabulary entropy, mean over response tokens).
    needs_reference_entropy: ClassVar[bool] = False
    # Instance attributes rebuilt from the config on construction (not state): exempt from check_state_contract.
    derived_attrs: ClassVar[tuple[str, ...]] = ()

    def betas(self, advantages: torch.Tensor, h_ref: torch.Tensor | None = None) -> torch.Tensor:
        """``beta[B, G]`` for advantages ``[B, G]`` (and reference entropies ``[B, G]`` when needed)."""
        raise NotImplementedError

    def after_step(self, kl_mean: float, n: int) -> None:
        """Called once per optimizer step with the global mean KL and the number of samples in the step."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"regularizer {self.name!r} has no state, got keys {sorted(state)}")

    def log_stats(self) -> dict[str, float]:
        return {}


class ReferenceStrategy:
    """Base class: which snapshot is the reference policy, and when it changes.

    Hooks called by the RL loop:
    - ``on_start(store)`` at the start of RL (not on resume: then the loop loads the store's and the
      strategy's state instead);
    - ``after_step(store, step)`` after each optimizer step (``step`` = optimizer steps done so far, from 1);
    - ``after_validation(store, optimizer, epoch, step, end_of_epoch=True, final=False)`` after each validation
      (``epoch`` = epochs done so far, from 1), once the loop has updated ``"best"`` (the best-validation
      snapshot, harness/grpo/selection.py); ``final`` = no training step follows; returns an event dict that
      the loop logs.
    The snapshot names used by every strategy: ``"ref"`` (reference), ``"old"`` (sampling policy), ``"best"``
    (kept by the loop, read-only here).
    """

    name: ClassVar[str] = ""
    # Steps between mid-epoch validations that the loop runs for this strategy (None: only at epoch ends).
    val_every_steps: int | None = None
    # Instance attributes rebuilt from the config on construction (not state): exempt from check_state_contract.
    derived_attrs: ClassVar[tuple[str, ...]] = ()

    def on_start(self, store: SnapshotStore) -> None:
        store.capture("ref")
        if "old" not in store:
            store.capture("old")

    def after_step(self, store: SnapshotStore, step: int) -> dict[str, Any]:
        return {}

    def after_validation(
        self,
        store: SnapshotStore,
        optimizer: torch.optim.Optimizer | None,
        epoch: int,
        step: int,
        end_of_epoch: bool = True,
        final: bool = False,
    ) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"reference strategy {self.name!r} has no state, got keys {sorted(state)}")

    def log_stats(self) -> dict[str, float]:
        return {}


# Both registries import every module of regularizers/ and regularizers/reference/ on first use: a class registers
# itself on import, so a new regularizer or reference strategy is one file with one decorator.
_PLUGIN_PACKAGES = ("regularizers", "regularizers.reference")
_REGULARIZER_REGISTRY: Registry[type[Regularizer]] = Registry(
    "regularizer", _PLUGIN_PACKAGES, base=Regularizer, decorator="register_regularizer", name_attr="name")
_REFERENCE_REGISTRY: Registry[type[ReferenceStrategy]] = Registry(
    "reference strategy", _PLUGIN_PACKAGES, base=ReferenceStrategy, decorator="register_reference", name_attr="name")
REGULARIZERS: dict[str, type[Regularizer]] = _REGULARIZER_REGISTRY.entries
REFERENCES: dict[str, type[ReferenceStrategy]] = _REFERENCE_REGISTRY.entries
_REGISTRIES = {"regularizer": _REGULARIZER_REGISTRY, "reference strategy": _REFERENCE_REGISTRY}

R = TypeVar("R", bound=type[Regularizer])
S = TypeVar("S", bound=type[ReferenceStrategy])


def register_regularizer(name: str) -> Callable[[R], R]:
    """Class decorator: make a :class:`Regularizer` dataclass buildable as ``build_regularizer(name, **cfg)``."""
    return _REGULARIZER_REGISTRY.register(name)


def register_reference(name: str) -> Callable[[S], S]:
    """Class decorator: make a :class:`ReferenceStrategy` dataclass buildable as ``build_reference(name, **cfg)``."""
    return _REFERENCE_REGISTRY.register(name)


def _init_fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.init] if dataclasses.is_dataclass(cls) else []


def _build(registry: Registry, name: str, cfg: dict[str, Any]):
    cls = registry.lookup(name)
    fields = _init_fields(cls)
    unknown = sorted(set(cfg) - set(fields))
    if unknown and dataclasses.is_dataclass(cls):
        raise ValueError(f"{registry.kind} {name!r} got unknown option(s) {unknown}; its options: {sorted(fields)}")
    plugin = cls(**cfg)
    check_state_contract(plugin, registry.kind)
    return plugin


def unsaved_state(plugin: Regularizer | ReferenceStrategy) -> list[str]:
    """Instance attributes of ``plugin`` that are neither config (its dataclass init fields), nor keys of its
    ``state_dict()``, nor named in its ``derived_attrs``: state a checkpoint would not hold."""
    kept = set(_init_fields(type(plugin))) | set(plugin.derived_attrs) | set(plugin.state_dict())
    # a callable set on the instance (a hook replaced, as a test or a wrapper does) is behaviour, not state
    return sorted(a for a in vars(plugin) if a not in kept and not callable(vars(plugin)[a]))


def check_state_contract(plugin: Regularizer | ReferenceStrategy, kind: str) -> None:
    """Refuse (ValueError, one line) a plug-in holding attributes its checkpoint state would lose. Refusing rather
    than pickling ``vars()`` automatically: checkpoints are read with the safe loader (weights only), so saved
    state must be plain numbers, strings, lists, dicts and tensors, which only the plug-in knows how to make."""
    missing = unsaved_state(plugin)
    if missing:
        raise ValueError(
            f"{kind} {plugin.name or type(plugin).__qualname__!r} ({type(plugin).__module__}."
            f"{type(plugin).__qualname__}) holds attribute(s) {missing} that its state_dict() does not return, so a "
            f"resumed run would restart them from their initial values: return them from state_dict() and restore "
            f"them in load_state_dict(), or name them in derived_attrs if they are rebuilt from the config")


def config_fields(kind: str, name: str, section: Any, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The values of ``section`` (a config dataclass, e.g. RLConfig) for the fields of the class registered as
    ``name`` -- a class's field names are the config's, so one builder serves every regularizer and reference --
    updated with ``extra`` (``rl.regularizer_args`` / ``rl.reference_args``: the knobs of a plug-in that the RL
    config does not have; a name the class lacks is an error listing its fields)."""
    names = _init_fields(_REGISTRIES[kind].lookup(name))
    return {**{n: getattr(section, n) for n in names if hasattr(section, n)}, **(extra or {})}


def regularizer_from_config(rl: Any) -> Regularizer:
    """The regularizer named by ``rl.regularizer``, given the RL config fields its class declares."""
    kind = "regularizer"
    return build_regularizer(rl.regularizer, **config_fields(kind, rl.regularizer, rl, rl.regularizer_args))


def reference_from_config(rl: Any) -> ReferenceStrategy:
    """The reference strategy named by ``rl.reference``, given the RL config fields its class declares."""
    kind = "reference strategy"
    return build_reference(rl.reference, **config_fields(kind, rl.reference, rl, rl.reference_args))


def build_regularizer(name: str, **cfg: Any) -> Regularizer:
    """Instantiate the regularizer registered as ``name`` with config fields ``cfg``."""
    return _build(_REGULARIZER_REGISTRY, name, cfg)


def build_reference(name: str, **cfg: Any) -> ReferenceStrategy:
    """Instantiate the reference strategy registered as ``name`` with config fields ``cfg``."""
    return _build(_REFERENCE_REGISTRY, name, cfg)


def available_regularizers() -> list[str]:
    return _REGULARIZER_REGISTRY.names()


def available_references() -> list[str]:
    return _REFERENCE_REGISTRY.names()
