"""LoRA linears as one matrix product with the merged weight W + s B A (issue 27): the fused sampler's weights
(harness/sampling/fused_step.py) and the GRPO log-prob passes under `rl.lora_pass = merged`.

peft's LoRA Linear computes base(x) + s * B(A(dropout(x))): three matrix products forward and five backward
(x's gradient through W, A and B, and the gradients of A and B). `merged_lora(model)` makes each such layer
compute F.linear(x, W + s B A, b) instead: the same linear map (the gradients of A and B flow through the merge),
one product forward and two backward plus two [out, r] x [r, in] products, rounding differently in the last bits.
At the tiny testbed's widths (64, LoRA r 32-64, thousands of positions a pass) a training pass (forward +
backward) took 0.78x the time and a no-grad pass 0.87x, and a whole GRPO step beside TRL's 0.315-0.322x instead
of 0.326-0.366x (benchmarks/RESULTS.md; benchmarks/bench_vs_trl.py --lora-pass merged). It is not bit-identical,
so it is opt-in (`rl.lora_pass`), like `generation.backend = fused`.

Only where LoRA's dropout is off (eval mode, or p = 0): dropout acts on x before A alone, which one merged weight
cannot express, so a layer whose dropout is active keeps peft's computation (config validation refuses
`rl.lora_pass = merged` with `rl.policy_dropout`). Float32 weights only, as the fused sampler: in a bf16 base the
merged weight would round the small LoRA delta away (at lr 3e-6 it is below bf16's resolution), so other dtypes
raise.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn


def _vanilla_adapter(mod) -> str | None:
    """The name of `mod`'s one active vanilla LoRA adapter (plain linears, no DoRA-like variant, no LoRA bias, not
    fan-in-fan-out, not merged or disabled), or None when `mod` is anything else."""
    # lazy: start-up cost (peft)
    from peft.tuners.lora import Linear as LoraLinear

    if not isinstance(mod, LoraLinear) or mod.disable_adapters or mod.merged:
        return None
    active = [a for a in mod.active_adapters if a in mod.lora_A.keys()]
    if len(active) != 1:
        return None
    name = active[0]
    plain = all(type(m) is nn.Linear for m in (mod.get_base_layer(), mod.lora_A[name], mod.lora_B[name]))
    if plain and name not in mod.lora_variant and not mod.lora_bias.get(name, False) \
            and not getattr(mod, "fan_in_fan_out", False):
        return name
    return None


def merged_weight(mod, who: str = "generation.backend=fused") -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) of the linear map `mod` computes in eval: an nn.Linear, or a peft LoRA Linear with one
    active vanilla adapter (W + scaling * B @ A, peft's delta weight). Anything else raises, naming `who`."""
    if type(mod) is nn.Linear:
        return mod.weight, mod.bias
    name = _vanilla_adapter(mod)
    if name is None:
        raise ValueError(f"{who}: cannot merge {type(mod).__name__} into one weight (only nn.Linear and peft LoRA "
                         "Linear with one vanilla adapter)")
    base = mod.get_base_layer()
    return base.weight + mod.scaling[name] * (mod.lora_B[name].weight @ mod.lora_A[name].weight), base.bias


def _merged_forward(mod, name: str):
    base, lora_a, lora_b, scaling = mod.get_base_layer(), mod.lora_A[name], mod.lora_B[name], mod.scaling[name]

    def forward(x, *args, **kwargs):
        # W + s B A built per call, so the graph reaches A and B (W is frozen in every stage that has LoRA).
        weight = torch.addmm(base.weight, lora_b.weight, lora_a.weight, alpha=scaling)
        return F.linear(x, weight, base.bias)

    return forward


def _dropout_active(mod, name: str) -> bool:
    drop = mod.lora_dropout[name]
    return isinstance(drop, nn.Dropout) and drop.training and drop.p > 0


@contextlib.contextmanager
def merged_lora(model):
    """Within the block, every peft LoRA Linear of `model` with one active vanilla adapter and its dropout off
    computes x @ (W + s B A)^T + b (see the module docstring); other modules are untouched. The layers' own
    forward is restored on exit, also after an error."""
    layers = [(mod, name) for mod in model.modules()
              if (name := _vanilla_adapter(mod)) is not None and not _dropout_active(mod, name)]
    bad = sorted({str(mod.get_base_layer().weight.dtype) for mod, _ in layers
                  if mod.get_base_layer().weight.dtype != torch.float32})
    if bad:
        raise ValueError(f"rl.lora_pass=merged: float32 weights only, the LoRA layers' base weights are "
                         f"{', '.join(bad)} (the merged weight would round the LoRA delta away); use "
                         "rl.lora_pass=peft")
    patched = []
    try:
        for mod, name in layers:
            # An instance-level forward (accelerate's hooks set one) is put back as it was.
            patched.append((mod, mod.__dict__.get("forward")))
            mod.forward = _merged_forward(mod, name)
        yield model
    finally:
        for mod, previous in patched:
            if previous is None:
                del mod.forward
            else:
                mod.forward = previous
