"""Attention kernels of the tiny preset: transformers' `eager` against `sdpa`, side by side (issue 27).

    python benchmarks/bench_attention.py                  # 6 measured rounds, 1 thread
    python benchmarks/bench_attention.py --rounds 10

Two workloads, each timed for both kernels in alternating order (eager, sdpa, sdpa, eager, ...) so that both see
the same machine load; the ratio sdpa / eager is the figure to read:
- `lm_step`: one full-parameter training step of stage 0's shape (32 samples, AdamW), the loop of stage 0, warm-up
  and SFT (harness/stages/lm_train.py);
- `rl_step`: one GRPO step (`GRPOTrainer.train_step`: rollout with the lean sampler, reward, old and reference
  passes, update) with the tiny preset's RL settings (8 prompts x G = 4, up to 80 new tokens, constant KL).
Both kernels start from the same weights; the script first checks that they compute the same loss to float
rounding (they are the same function, summed in another order).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_rl_step import build_model_and_processor, build_prompts  # noqa: E402

KERNELS = ("eager", "sdpa")


def with_kernel(model, kernel: str):
    clone = copy.deepcopy(model)
    clone.set_attn_implementation(kernel)
    return clone


def lm_stepper(model, processor, prompts, kernel: str, batch: int = 32):
    """A closure running one stage-0 training step (full parameters) on the first `batch` prompts."""
    import torch

    from harness.models.trainable import set_trainable
    from harness.prompting.batching import encode_sft
    from harness.stages.lm_loss import lm_loss

    net = with_kernel(model, kernel)
    set_trainable(net, "pretrain")
    net.train()
    opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=1e-4)
    enc = encode_sft(processor, prompts.images[:batch], prompts.instructions[:batch], prompts.references[:batch],
                     max_report_tokens=100)

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        loss, _ = lm_loss(net, enc)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def rl_stepper(model, processor, prompts, kernel: str, run_dir: Path, seed: int):
    """A closure running one GRPO step with the tiny preset's RL settings."""
    from harness.config import ModelConfig, RLConfig, TrainConfig
    from harness.grpo.trainer import GRPOTrainer
    from harness.models.trainable import add_lora, set_trainable
    from harness.runs.records import RunDir

    m = ModelConfig()
    net = add_lora(with_kernel(model, kernel), r=m.lora_r, alpha=m.lora_alpha, dropout=m.lora_dropout)
    set_trainable(net, "rl")
    rl = RLConfig(regularizer="constant", reference="static", reward="bleu4", group_size=4, prompts_per_step=8,
                  max_new_tokens=80, min_new_tokens=0, samples_every=0)
    tc = TrainConfig(epochs=1000, lr=5e-4, scheduler="constant", weight_decay=1e-3)
    trainer = GRPOTrainer(net, processor, rl, tc, RunDir(run_dir), prompts, None, seed=seed, progress=False)
    trainer.reference.on_start(trainer.store)
    trainer.store.capture("old")
    return lambda: trainer.train_step()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="measured rounds (each times both kernels)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)  # as the experiment runner's workers
    from harness.config import ModelConfig

    prompts = build_prompts(64, ModelConfig().image_size, args.seed)
    model, processor, _ = build_model_and_processor(args.seed)
    losses = {k: lm_stepper(model, processor, prompts, k)() for k in KERNELS}
    print(f"first lm step loss: eager {losses['eager']:.7f}, sdpa {losses['sdpa']:.7f}", flush=True)
    if abs(losses["eager"] - losses["sdpa"]) > 1e-4 * abs(losses["eager"]):
        raise SystemExit("the kernels disagree beyond float rounding")
    with tempfile.TemporaryDirectory() as tmp:
        steppers = {("lm_step", k): lm_stepper(model, processor, prompts, k) for k in KERNELS}
        steppers |= {("rl_step", k): rl_stepper(model, processor, prompts, k, Path(tmp) / k, args.seed)
                     for k in KERNELS}
        for fn in steppers.values():  # warm-up, not timed
            fn()
        times: dict = {key: [] for key in steppers}
        for r in range(args.rounds):
            order = KERNELS if r % 2 == 0 else KERNELS[::-1]
            for work in ("lm_step", "rl_step"):
                for k in order:
                    t0 = time.perf_counter()
                    steppers[(work, k)]()
                    times[(work, k)].append(time.perf_counter() - t0)
    print("| workload | eager median (s) | sdpa median (s) | sdpa / eager |")
    print("|---|---|---|---|")
    for work in ("lm_step", "rl_step"):
        e, s = statistics.median(times[(work, "eager")]), statistics.median(times[(work, "sdpa")])
        print(f"| {work} | {e:.3f} | {s:.3f} | {s / e:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
