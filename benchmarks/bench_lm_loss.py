"""One LM training step (Eq. 1, forward + backward) through transformers' own forward call vs the lean full-sequence
forward that `lm_loss` uses since issue 27 (harness/stages/lm_loss.py, harness/sampling/lean_forward.py).

    python benchmarks/bench_lm_loss.py                 # stage 0 (all parameters, batch 32) and SFT (LoRA r 64, 16)
    python benchmarks/bench_lm_loss.py --rounds 20 --stages sft

The model is the tiny preset (built like benchmarks/bench_rl_step.py, with the tiny preset files' matmul patch
embedding and sdpa attention), in train mode; the batch is synthetic chest X-rays with phantom reports, encoded as
the stages encode them (harness.prompting.batching.encode_sft). Before timing, both forms run from the same RNG state
and must give the same loss and every gradient bit for bit (the run stops otherwise). Rounds alternate the two forms,
one thread. Printed: the median step time of each and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SETTINGS = {"pretrain": 32, "sft": 16}  # stage -> batch size (experiments/presets/tiny.yaml, PretrainConfig)


def training_model(seed: int, stage: str):
    """The tiny preset's model as a stage trains it (sdpa, the matmul patch embedding; SFT: LoRA r 64), in train
    mode, with its processor and ModelConfig."""
    from bench_rl_step import build_model_and_processor

    from harness.models.patch_embed import use_patch_embed
    from harness.models.trainable import add_lora, set_trainable

    model, processor, m = build_model_and_processor(seed)
    model.set_attn_implementation("sdpa")
    use_patch_embed(model, "matmul")
    if stage == "sft":
        model = add_lora(model, r=64, alpha=128, dropout=m.lora_dropout)
    set_trainable(model, stage)
    model.train()
    return model, processor, m


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12, help="measured steps per form and stage")
    parser.add_argument("--stages", default="pretrain,sft", help="comma-separated: pretrain, sft")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    stages = [s for s in args.stages.split(",") if s]
    unknown = sorted(set(stages) - set(SETTINGS))
    if unknown or not stages:
        parser.error(f"--stages: {', '.join(unknown) or 'none given'}; choose from {', '.join(SETTINGS)}")

    import numpy as np
    import torch
    from bench_rl_step import build_prompts

    from harness.data.phantom import sample_case, write_report
    from harness.prompting.batching import encode_sft
    from harness.stages.lm_loss import lm_loss, plain_call_lm_loss

    torch.set_num_threads(1)
    for stage in stages:
        bs = SETTINGS[stage]
        model, processor, m = training_model(args.seed, stage)
        prompts = build_prompts(bs, m.image_size, args.seed)
        rng = np.random.default_rng(args.seed)
        reports = [write_report(sample_case(rng), rng) for _ in range(bs)]
        batch = encode_sft(processor, prompts.images, prompts.instructions, reports, 120)
        params = [p for p in model.parameters() if p.requires_grad]
        forms = {"plain call": plain_call_lm_loss, "lean forward": lm_loss}

        def step(fn, model=model, batch=batch, params=params):
            torch.manual_seed(args.seed)  # the same dropout masks for both forms
            start = time.perf_counter()
            loss, _ = fn(model, batch)
            grads = torch.autograd.grad(loss, params)
            return time.perf_counter() - start, loss.detach(), grads

        (_, l0, g0), (_, l1, g1) = (step(fn) for fn in forms.values())
        if not (torch.equal(l0, l1) and all(torch.equal(a, b) for a, b in zip(g0, g1, strict=True))):
            print(f"{stage}: the two forms differ (loss {float(l0)} vs {float(l1)})", file=sys.stderr)
            return 1
        times: dict[str, list[float]] = {name: [] for name in forms}
        for r in range(args.rounds):
            for name in (list(forms) if r % 2 == 0 else list(forms)[::-1]):
                times[name].append(step(forms[name])[0])
        med = {name: statistics.median(t) for name, t in times.items()}
        print(f"{stage} (batch {bs}, {batch['input_ids'].shape[1]} positions, {len(params)} trainable tensors): "
              f"plain call {med['plain call'] * 1e3:.1f} ms, lean forward {med['lean forward'] * 1e3:.1f} ms, "
              f"ratio {med['lean forward'] / med['plain call']:.3f} (loss and gradients bit for bit equal)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
