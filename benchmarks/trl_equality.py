"""regbench's `policy_loss` against TRL's own loss code (`GRPOTrainer._compute_loss`) on identical inputs (issue 45).

For every setting TRL can express (loss_type x beta x use_bias_correction_kl x importance_sampling_level, plus
INTELLECT-2's delta = regbench's dual clip), in float32 and bfloat16, on "typical" inputs (log-ratios ~0.1-0.5)
and "stressed" ones (|logp_ref - logp| up to ~6: the k3 cap of 10 would act; regbench runs with rl.kl_cap null
as TRL has none), with a zero-length completion among the rows: the same per-token log-probs (a leaf tensor),
old and reference log-probs, advantages and mask go to both; printed are max |loss diff| and max |grad diff|
(the gradient with respect to the current log-probs, every position).

TRL's `_compute_loss` runs unchanged, as an unbound method on a stub trainer that holds the attributes it reads
and returns the given log-probs from `_get_per_token_logps_and_entropies` (one process, no gradient
accumulation, steps_per_generation 1, no vLLM, no entropy mask or bonus). TRL 1.16.0 is a test-only dependency:
the dev extra (`pip install -e .[dev]`), or its own venv over the project's packages (benchmarks/bench_vs_trl.py's
docstring shows how); then

    PYTHONPATH=$PWD /tmp/trlvenv/bin/python benchmarks/trl_equality.py

tests/harness/grpo/test_trl_equality.py runs the same comparison (skipped where TRL is not installed).
"""

from __future__ import annotations

import itertools
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.grpo.core import policy_loss  # noqa: E402

# TRL loss_type -> (regbench rl.aggregation, rl.surrogate)
LOSS_TYPES = {
    "grpo": ("seq_mean_token_mean_all", "clip"),
    "bnpo": ("token_mean", "clip"),
    "dr_grpo": ("dr_grpo", "clip"),
    "dapo": ("token_mean", "clip"),
    "luspo": ("seq_sum", "clip"),
    "cispo": ("token_mean", "cispo"),
    "sapo": ("seq_mean_token_mean_all", "sapo"),
}
EPS_LOW, EPS_HIGH, CISPO_EPS_HIGH, DELTA = 0.2, 0.28, 5.0, 4.0


@dataclass(frozen=True)
class Setting:
    loss_type: str
    beta: float
    bias_correction: bool
    level: str
    delta: float | None = None
    kl_cap: float | None = None  # regbench's rl.kl_cap; 10 (its default) is not TRL's: the contrast rows

    @property
    def name(self) -> str:
        kl = f"beta {self.beta:g}" + ((" k3_is" if self.bias_correction else " k3") if self.beta else "")
        return (f"{self.loss_type}, {kl}, {self.level}" + (f", delta {self.delta:g}" if self.delta else "")
                + (f", regbench kl_cap {self.kl_cap:g} (not TRL's)" if self.kl_cap else ""))


def settings() -> list[Setting]:
    """Every combination TRL expresses (the KL correction only with a KL term; luspo is sequence-level by design,
    but TRL runs it at token level too), and delta (two-sided clip) on the clip losses at token level."""
    out = []
    for loss_type, beta, level in itertools.product(LOSS_TYPES, (0.0, 0.04), ("token", "sequence")):
        for corr in ((False, True) if beta else (False,)):
            out.append(Setting(loss_type, beta, corr, level))
    out += [Setting(t, 0.04, True, "token", DELTA) for t in ("grpo", "bnpo", "dapo", "dr_grpo")]
    return out


def contrast_settings() -> list[Setting]:
    """Rows that are NOT TRL's computation: regbench's default k3 cap of 10 (on stressed inputs it acts)."""
    return [Setting("dapo", 0.04, False, "token", kl_cap=10.0), Setting("dapo", 0.04, True, "token", kl_cap=10.0)]


def make_inputs(dtype: torch.dtype, stressed: bool, seed: int = 0, groups: int = 2, group_size: int = 4,
                length: int = 7) -> dict:
    """Log-probs [N, T] (current, old, reference), advantages [N] (group-relative), mask with lengths 0..T."""
    g = torch.Generator().manual_seed(seed)
    n = groups * group_size
    logp = -torch.rand(n, length, generator=g) * 3.0 - 0.05
    spread_old, spread_ref = (1.5, 6.0) if stressed else (0.3, 0.5)
    old = logp + spread_old * (torch.rand(n, length, generator=g) - 0.5)
    ref = logp + spread_ref * (torch.rand(n, length, generator=g) - 0.5)
    lengths = torch.randint(1, length + 1, (n,), generator=g)
    lengths[1] = 0  # a zero-length completion
    lengths[2] = length
    mask = (torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)).long()
    rewards = torch.rand(groups, group_size, generator=g)
    adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).reshape(-1)
    return {"logp": logp.to(dtype), "old": old.to(dtype), "ref": ref.to(dtype), "mask": mask,
            "adv": adv.to(dtype), "group_size": group_size, "length": length}


class _Accelerator:
    num_processes = 1

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x


def trl_loss(s: Setting, inp: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's `GRPOTrainer._compute_loss` on the inputs: (loss, d loss / d logp)."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    logp = inp["logp"].clone().requires_grad_(True)
    stub = SimpleNamespace(
        loss_type=s.loss_type, beta=s.beta, epsilon_low=EPS_LOW,
        epsilon_high=CISPO_EPS_HIGH if s.loss_type == "cispo" else EPS_HIGH, importance_sampling_level=s.level,
        args=SimpleNamespace(use_bias_correction_kl=s.bias_correction, delta=s.delta, sapo_temperature_pos=1.0,
                             sapo_temperature_neg=1.05, steps_per_generation=1),
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, aux_loss_enabled=False, use_vllm=False,
        vllm_importance_sampling_correction=False, model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, accelerator=_Accelerator(), max_completion_length=inp["length"],
        _entropy_bonus_enabled=False, _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
    )
    n, t = logp.shape
    mask = inp["mask"]
    inputs = {"prompt_ids": torch.zeros(n, 1, dtype=torch.long), "prompt_mask": torch.ones(n, 1, dtype=torch.long),
              "completion_ids": torch.zeros(n, t, dtype=torch.long), "completion_mask": mask,
              "advantages": inp["adv"], "old_per_token_logps": inp["old"], "ref_per_token_logps": inp["ref"],
              "num_items_in_batch": mask.sum()}
    loss = GRPOTrainer._compute_loss(stub, None, inputs)
    loss.backward()
    return loss.detach(), logp.grad


def regbench_loss(s: Setting, inp: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """regbench's `policy_loss` with the options that express the setting: (loss, d loss / d logp)."""
    aggregation, surrogate = LOSS_TYPES[s.loss_type]
    logp = inp["logp"].clone().requires_grad_(True)
    n = logp.shape[0]
    # CISPO's cap on the ratio: TRL's epsilon_high is the cap itself, regbench's 1 + eps_high.
    eps_high = CISPO_EPS_HIGH - 1.0 if surrogate == "cispo" else EPS_HIGH
    loss, _ = policy_loss(
        logp, inp["old"], inp["ref"] if s.beta else None, inp["adv"], torch.full((n,), s.beta), inp["mask"],
        eps_low=EPS_LOW, eps_high=eps_high, dual_clip=s.delta, kl_estimator="k3_is" if s.bias_correction else "k3",
        aggregation=aggregation, group_size=inp["group_size"], max_len=inp["length"], kl_cap=s.kl_cap,
        importance_sampling=s.level, surrogate=surrogate)
    loss.backward()
    return loss.detach(), logp.grad


def compare(s: Setting, inp: dict) -> tuple[float, float, float, float]:
    """max |loss diff|, max |grad diff| (in float64), and the scales: |loss|, max |grad| (TRL's)."""
    l_trl, g_trl = trl_loss(s, inp)
    l_rb, g_rb = regbench_loss(s, inp)
    return (float((l_trl.double() - l_rb.double()).abs()), float((g_trl.double() - g_rb.double()).abs().max()),
            float(l_trl.double().abs()), float(g_trl.double().abs().max()))


def table(seeds: int = 3, contrast: bool = True) -> list[tuple[str, str, str, float, float, float, float]]:
    """One row per (setting, dtype, inputs): the largest differences and scales over `seeds` input draws."""
    rows = []
    cases = [(d, st, s) for d, st, s in itertools.product((torch.float32, torch.bfloat16), (False, True), settings())]
    if contrast:
        cases += [(torch.float32, True, s) for s in contrast_settings()]
    for dtype, stressed, s in cases:
        diffs = [compare(s, make_inputs(dtype, stressed, seed)) for seed in range(seeds)]
        rows.append((s.name, str(dtype).removeprefix("torch."), "stressed" if stressed else "typical",
                     *(max(d[i] for d in diffs) for i in range(4))))
    return rows


def main() -> int:
    import trl

    torch.set_num_threads(1)
    rows = table()
    print(f"TRL {trl.__version__}, torch {torch.__version__}; 3 seeds per row, 8 completions x 7 tokens "
          "(one of length 0); regbench rl.kl_cap null")
    print("| setting | dtype | inputs | max \\|loss diff\\| | max \\|grad diff\\| | \\|loss\\| | max \\|grad\\| |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, dtype, inputs, dl, dg, sl, sg in rows:
        print(f"| {name} | {dtype} | {inputs} | {dl:.1e} | {dg:.1e} | {sl:.2g} | {sg:.2g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
