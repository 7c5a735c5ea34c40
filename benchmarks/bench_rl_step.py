"""Step time and peak memory of the RL loop with regularizer `rer` vs `constant` (both with reference `static`).

    python benchmarks/bench_rl_step.py                         # tiny preset, B=4 prompts x G=4, 8 steps each
    python benchmarks/bench_rl_step.py --steps 12 --max-new-tokens 160 --min-new-tokens 80 --prompts 8

Both variants start from the same tiny Qwen2.5-VL (built like tests/conftest.py: harness.models.tiny, with the
tiny preset's sizes from harness.config.ModelConfig), wrapped in LoRA and set trainable for stage "rl" like
tests/harness/grpo/test_trainer.py, on the same PromptSet of synthetic chest X-rays (harness.data.phantom)
with the `bleu4` reward and the same seed. `GRPOTrainer.train_step()` is driven directly: warm-up steps
first, then the measured steps alternate between the variants (rer, constant, constant, rer, ...), so both
see the same machine load. Reported per variant: mean / median step time, a breakdown (rollout, reward,
frozen forward passes of the old and reference policies, and the rest = current forward + loss + backward
+ optimizer), and the peak memory added by a step (CUDA: max_memory_allocated; CPU: peak RSS via
/proc/self/clear_refs + VmHWM, reset before every step). The goal: RER within 5% of constant.

RER needs the reference policy's entropy: the reference forward pass that `constant` already runs gives the
logits, and `token_entropy` adds one more pass over them (harness/grpo/trainer.py, `_frozen_pass`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from proc_status import status_kb  # noqa: E402

VARIANTS = ("rer", "constant")
PARTS = ("rollout", "reward", "old_fwd", "ref_fwd", "rest")


class PeakMeter:
    """Peak memory added during one step: CUDA allocator peak, or the process's peak RSS (Linux)."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.rss_ok = True

    def start(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return
        self.base = status_kb("VmRSS") or 0
        try:
            Path("/proc/self/clear_refs").write_text("5")  # peak RSS := current RSS
        except OSError:
            self.rss_ok = False

    def stop(self) -> float | None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            return float(torch.cuda.max_memory_allocated() - self.base)
        if not self.rss_ok:
            return None
        return float(((status_kb("VmHWM") or 0) - self.base) * 1024)

    @property
    def method(self) -> str:
        if self.cuda:
            return "CUDA max_memory_allocated - memory_allocated before the step"
        return "peak RSS (VmHWM after clear_refs) - RSS before the step" if self.rss_ok else "n/a"


def build_prompts(n: int, image_px: int, seed: int):
    """Synthetic chest X-rays and their reports (harness.data.phantom), as a PromptSet."""
    from PIL import Image

    from harness.config import PromptConfig
    from harness.data.phantom import draw_image, sample_case, write_report
    from harness.grpo.trainer import PromptSet

    rng = np.random.default_rng(seed)
    images, reports = [], []
    for _ in range(n):
        case = sample_case(rng)
        images.append([Image.fromarray(draw_image(case, rng, size=image_px)).convert("RGB")])
        reports.append(write_report(case, rng))
    return PromptSet([f"s{i}" for i in range(n)], images, [PromptConfig().instruction] * n, reports)


def build_model_and_processor(seed: int, corpus_size: int = 2000):
    """The tiny preset: tokenizer trained on phantom reports (as stage 0 does), processor, model."""
    from harness.config import ModelConfig
    from harness.data.phantom import sample_case, write_report
    from harness.models.tiny import build_processor, build_tiny_model, train_tokenizer

    m = ModelConfig()
    rng = np.random.default_rng(seed + 1)
    corpus = [write_report(sample_case(rng), rng) for _ in range(corpus_size)]
    tokenizer = train_tokenizer(corpus, vocab_size=m.tiny_vocab_size)
    processor = build_processor(tokenizer, m.image_size)
    model = build_tiny_model(tokenizer, seed=seed, text_hidden=m.tiny_text_hidden, text_layers=m.tiny_text_layers,
                             vision_hidden=m.tiny_vision_hidden, vision_depth=m.tiny_vision_depth,
                             image_size=m.image_size)
    return model, processor, m


@contextmanager
def _timed(bucket: dict, key: str, sync):
    sync()
    start = time.perf_counter()
    try:
        yield
    finally:
        sync()
        bucket[key] = bucket.get(key, 0.0) + time.perf_counter() - start


def instrument(trainer, sync) -> dict:
    """Wrap the trainer's pieces (instance attributes only; the class is untouched) to time them per step."""
    parts: dict = {}
    rollout, frozen = trainer._rollout, trainer._frozen_pass

    def timed_rollout(idx):
        with _timed(parts, "rollout", sync):
            return rollout(idx)

    def timed_frozen(name, ro, chunks, want_entropy):
        # name None: the live parameters' no-grad pass for the reference entropies (part of the ref pass cost)
        with _timed(parts, f"{name or 'ref'}_fwd", sync):
            return frozen(name, ro, chunks, want_entropy)

    trainer._rollout, trainer._frozen_pass = timed_rollout, timed_frozen
    trainer._bench_parts = parts
    return parts


def make_trainer(variant: str, model_state, model, processor, mcfg, prompts, args, run_dir: Path):
    import copy

    import torch

    from harness.config import RLConfig, TrainConfig
    from harness.grpo.trainer import GRPOTrainer
    from harness.models.trainable import add_lora, set_trainable
    from harness.runs.records import RunDir

    model = copy.deepcopy(model)
    model.load_state_dict(model_state)
    model.to(getattr(torch, args.dtype))  # bf16: the real presets' dtype (fp32 master weights for what trains)
    model = add_lora(model, r=mcfg.lora_r, alpha=mcfg.lora_alpha, dropout=mcfg.lora_dropout)
    set_trainable(model, "rl")
    model.to(args.device)
    rl = RLConfig(regularizer=variant, reference="static", reward="bleu4", group_size=args.group_size,
                  prompts_per_step=args.prompts, max_new_tokens=args.max_new_tokens,
                  min_new_tokens=args.min_new_tokens, samples_every=0)
    tc = TrainConfig(epochs=1000, lr=3e-6, scheduler="constant", weight_decay=1e-3)
    trainer = GRPOTrainer(model, processor, rl, tc, RunDir(run_dir), prompts, None, seed=args.seed, progress=False)
    trainer.reference.on_start(trainer.store)
    trainer.store.capture("old")
    return trainer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="measured steps per variant")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up steps per variant (not measured)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step (B)")
    parser.add_argument("--group-size", type=int, default=4, help="candidates per prompt (G)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--min-new-tokens", type=int, default=32)
    parser.add_argument("--n-prompts", type=int, default=32, help="size of the synthetic PromptSet")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="the frozen base's dtype (bfloat16 as on the real presets; what trains stays fp32)")
    args = parser.parse_args(argv)

    import torch

    import harness.grpo.reward as reward_module

    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    cuda = args.device.startswith("cuda")

    def sync():
        if cuda:
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    from harness.config import ModelConfig

    prompts = build_prompts(args.n_prompts, ModelConfig().image_size, args.seed)
    model, processor, mcfg = build_model_and_processor(args.seed)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    print(f"setup {time.perf_counter() - t0:.1f} s; device {args.device}, base {args.dtype}; "
          f"tiny preset (text {mcfg.tiny_text_hidden}x"
          f"{mcfg.tiny_text_layers}, vision {mcfg.tiny_vision_hidden}x{mcfg.tiny_vision_depth}, vocab "
          f"{len(processor.tokenizer)}, image {mcfg.image_size}px); B={args.prompts} x G={args.group_size}, "
          f"new tokens {args.min_new_tokens}..{args.max_new_tokens}; reward bleu4; reference static")

    # The reward is called through the run's reward (harness/grpo/reward.py, `call_reward`): time it there.
    reward_parts: dict = {}
    original_reward = reward_module.call_reward

    def timed_reward(*a, **k):
        with _timed(reward_parts, "reward", sync):
            return original_reward(*a, **k)

    reward_module.call_reward = timed_reward
    meter = PeakMeter(cuda)
    results = {v: {"time": [], "peak": [], **{p: [] for p in PARTS}} for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {}
        for v in VARIANTS:
            trainers[v] = make_trainer(v, state, model, processor, mcfg, prompts, args, Path(tmp) / v)
            instrument(trainers[v], sync)
        for _ in range(args.warmup):
            for v in VARIANTS:
                trainers[v].train_step()
        for i in range(args.steps):
            order = VARIANTS if i % 2 == 0 else VARIANTS[::-1]
            for v in order:
                tr = trainers[v]
                tr._bench_parts.clear()
                reward_parts.clear()
                meter.start()
                sync()
                start = time.perf_counter()
                tr.train_step()
                sync()
                total = time.perf_counter() - start
                peak = meter.stop()
                parts = {**tr._bench_parts, **reward_parts}
                r = results[v]
                r["time"].append(total)
                r["peak"].append(peak)
                for p in PARTS[:-1]:
                    r[p].append(parts.get(p, 0.0))
                r["rest"].append(total - sum(parts.get(p, 0.0) for p in PARTS[:-1]))
    reward_module.call_reward = original_reward

    print(f"{args.steps} measured steps per variant after {args.warmup} warm-up, interleaved; times in ms")
    print(f"{'variant':9s} {'mean':>8s} {'median':>8s} " + " ".join(f"{p:>9s}" for p in PARTS)
          + f" {'peak MiB':>9s}")
    med = {}
    for v in VARIANTS:
        r = results[v]
        med[v] = statistics.median(r["time"])
        peaks = [p for p in r["peak"] if p is not None]
        peak = f"{max(peaks) / 2**20:9.1f}" if peaks else f"{'n/a':>9s}"
        print(f"{v:9s} {statistics.mean(r['time']) * 1e3:8.1f} {med[v] * 1e3:8.1f} "
              + " ".join(f"{statistics.median(r[p]) * 1e3:9.1f}" for p in PARTS) + f" {peak}")
    ratio = med["rer"] / med["constant"]
    paired = [a / b for a, b in zip(results["rer"]["time"], results["constant"]["time"], strict=True)]
    ref = [statistics.median(results[v]["ref_fwd"]) for v in ("rer", "constant")]
    # No reference pass at all while the reference equals the live policy (e.g. no warm-up steps): no ratio.
    ref_ratio = f"{ref[0] / ref[1]:.3f}" if ref[1] > 0 else "n/a (no reference pass ran)"
    print(f"rer / constant: median step {ratio:.3f} (median of paired per-step ratios {statistics.median(paired):.3f});"
          f" reference forward pass {ref_ratio}; goal: step ratio <= 1.05")
    print(f"memory: {meter.method} (max over measured steps); parts are medians, so they need not add up to the"
          " median step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
