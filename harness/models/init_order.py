"""The tiny model's random initial weights independent of the transformers version (issue 43).

`Qwen2_5_VLForConditionalGeneration(config)` after `torch.manual_seed(seed)` draws the same random numbers in
transformers 4.57 and 5.x (the same ops on tensors of the same shapes) but in another order: 4.57 draws every
construction-time init of the inner model (visual, then text), then re-initialises the text model's and the
vision model's weights (`_init_weights`), then the lm_head; 5.x re-initialises the vision model right after
building it. Same draws in another order give other weights, so stage 0 would train another base.

`reference_order_init` builds the model while recording every random fill (`Tensor.normal_` / `uniform_`, where
torch.nn.init's functions end), then replays the fills from the seed in 4.57's order: construction fills first
(a tensor's first fill), then re-fills of the text model, then of the vision model, then everything from the first
fill of a tensor outside the inner model (the lm_head) on, each in the order it happened. Under 4.57 that is the
order it happened in, so the weights and the generator's state after are those of the plain construction bit for
bit; under 5.x they become 4.57's. Where a later non-random op changed a filled value (an embedding's padding row
zeroed, say), that value is kept. tests/harness/models/test_init_order.py pins the hash of the weights.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import torch

_METHODS = ("normal_", "uniform_")


def _key(t: torch.Tensor) -> tuple:
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))


@contextmanager
def _recording(log: list):
    originals = {name: getattr(torch.Tensor, name) for name in _METHODS}

    def wrap(name):
        orig = originals[name]

        def fill(self, *args, **kwargs):
            if kwargs.get("generator") is not None:
                raise ValueError("reference_order_init: a fill with its own generator is not replayed")
            out = orig(self, *args, **kwargs)
            log.append(dict(tensor=self, method=name, args=args, kwargs=kwargs, after=self.detach().clone()))
            return out

        return fill

    try:
        for name in _METHODS:
            setattr(torch.Tensor, name, wrap(name))
        yield
    finally:
        for name, orig in originals.items():
            setattr(torch.Tensor, name, orig)


def canonical_order(log: list, inner_names: dict) -> list[int]:
    """Indices of `log` in 4.57's order. `inner_names`: tensor key -> parameter name in the inner model."""
    seen: set = set()
    first, refill, tail = [], [], []
    for i, rec in enumerate(log):
        key = _key(rec["tensor"])
        name = inner_names.get(key)
        if tail or name is None:
            tail.append(i)
        elif key in seen:
            refill.append(i)
        else:
            first.append(i)
        seen.add(key)
    text = [i for i in refill if "language_model" in inner_names[_key(log[i]["tensor"])]]
    vision = [i for i in refill if i not in set(text)]
    return first + text + vision + tail


def reference_order_init(construct: Callable[[], torch.nn.Module], seed: int, inner: str = "model"):
    """`construct()` after torch.manual_seed(seed), its random fills replayed in 4.57's order (module docstring).
    `inner`: the attribute holding the inner model (Qwen2_5_VLModel)."""
    log: list = []
    torch.manual_seed(seed)
    with _recording(log):
        model = construct()
    inner_names = {_key(p): n for n, p in getattr(model, inner).named_parameters(remove_duplicate=False)}
    order = canonical_order(log, inner_names)
    torch.manual_seed(seed)
    replayed: dict[int, torch.Tensor] = {}
    for i in order:
        rec = log[i]
        fresh = torch.empty_like(rec["after"])
        getattr(fresh, rec["method"])(*rec["args"], **rec["kwargs"])
        replayed[i] = fresh
    last: dict = {}
    for i, rec in enumerate(log):
        last[_key(rec["tensor"])] = i
    with torch.no_grad():
        for p in model.parameters():  # a tied weight once
            i = last.get(_key(p))
            if i is not None:  # values a later op set (a bias zeroed, a padding row) stay
                p.copy_(torch.where(p == log[i]["after"], replayed[i], p))
    return model
