"""Supervised training steps on random vs length-grouped batches (train / pretrain.group_by_length).

    python benchmarks/bench_group_by_length.py                   # stage 0's data mix and an SFT-like mix
    python benchmarks/bench_group_by_length.py --studies 1000 --steps 12 --rounds 4

The data are stage 0's own mix, built as harness/stages/pretrain.py builds it: a phantom set's training reports,
plus its "list the findings" examples (short answers) and its reports under instructions that name noisy findings
(stage 2's prompt format); the SFT-like mix is the last part alone (LoRA r 64, batch 16, the tiny preset's SFT).
Both orders take `--steps` optimizer steps spread evenly over an epoch from harness.stages.lm_batches.StepBatches: the
seeded random order every preset uses, and harness.training.schedule.length_grouped_order. Each step is the loop's own
work (lm_loss, backward, AdamW) on the tiny preset's model, one thread; rounds alternate the orders. Printed per mix:
the share of computed positions that are padding, the median time of a step, and the ratio grouped / random.
Other batches mean other weights: this measures speed only (benchmarks/RESULTS.md has the quality check).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

MIXES = {"stage0": 32, "sft": 16}  # mix -> batch size (PretrainConfig; experiments/presets/tiny.yaml)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=1000, help="phantom studies drawn (70%% are training ones)")
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps per order and round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--mixes", default="stage0,sft", help="comma-separated: stage0, sft")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    mixes = [m for m in args.mixes.split(",") if m]
    if not mixes or set(mixes) - set(MIXES):
        parser.error(f"--mixes: choose from {', '.join(MIXES)}")

    import torch
    from bench_lm_loss import training_model
    from bench_rl_step import build_model_and_processor

    from harness.config import PromptConfig
    from harness.data.datasets import load_annotation
    from harness.stages.common import ensure_phantom
    from harness.stages.lm_batches import StepBatches, sample_lengths
    from harness.stages.lm_loss import lm_loss
    from harness.stages.lm_train import LMData
    from harness.stages.pretrain import with_findings_task, with_hint_task
    from harness.stages.prompts import load_images

    torch.set_num_threads(1)
    prompt = PromptConfig()
    with tempfile.TemporaryDirectory() as tmp:
        _, processor, m = build_model_and_processor(args.seed)
        ann = ensure_phantom(Path(tmp) / "data", args.studies, 1000 + args.seed, 128, progress=False,
                             splits=("train",))
        train = load_annotation(ann, "phantom")["train"]
        images = load_images(train, m.image_size, cache_dir=Path(tmp) / "pixels")
        plain = LMData(images, [prompt.instruction] * len(train), [s.report for s in train])
        stage0 = with_hint_task(with_findings_task(plain, train, 1.0, args.seed), train, 1.0, args.seed,
                                prompt.instruction, prompt.disease_template)
        hinted = LMData(stage0.images[2 * len(train):], stage0.instructions[2 * len(train):],
                        stage0.reports[2 * len(train):])
        data = {"stage0": stage0, "sft": hinted}
        for mix in mixes:
            bs = MIXES[mix]
            model, _, _ = training_model(args.seed, "pretrain" if mix == "stage0" else "sft")
            optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
            lengths = sample_lengths(processor, data[mix], prompt.max_report_tokens)
            per_epoch = -(-len(data[mix]) // bs)
            steps = min(args.steps, per_epoch)
            # steps spread evenly over the epoch: a grouped epoch runs each mega-batch longest batch first
            picks = [k * per_epoch // steps for k in range(steps)]
            orders = {}
            for name, lens in (("random", None), ("grouped", lengths)):
                batches = StepBatches(data[mix], processor, batch_size=bs, micro_batch_size=None, seed=args.seed,
                                      first_step=0, total_steps=per_epoch, steps_per_epoch=per_epoch,
                                      max_report_tokens=prompt.max_report_tokens, lengths=lens)
                orders[name] = [batches[k][0] for k in picks]
            pad = {name: 1 - sum(int(b["attention_mask"].sum()) for b in enc) / sum(b["attention_mask"].numel()
                                                                                     for b in enc)
                   for name, enc in orders.items()}

            def step(batch, model=model, optimizer=optimizer):
                start = time.perf_counter()
                loss, _ = lm_loss(model, batch)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                return time.perf_counter() - start

            times: dict[str, list[float]] = {name: [] for name in orders}
            for r in range(args.rounds + 1):  # round 0 warms up
                for name in (list(orders) if r % 2 == 0 else list(orders)[::-1]):
                    spent = [step(b) for b in orders[name]]
                    if r:
                        times[name].extend(spent)
            med = {name: statistics.median(t) for name, t in times.items()}
            print(f"{mix} (batch {bs}, {len(data[mix])} samples, {steps} steps spread over an epoch, "
                  f"{args.rounds} rounds): padding {pad['random']:.1%} random vs {pad['grouped']:.1%} grouped; "
                  f"step {med['random'] * 1e3:.0f} ms vs {med['grouped'] * 1e3:.0f} ms, "
                  f"ratio {med['grouped'] / med['random']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
