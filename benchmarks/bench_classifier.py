"""One training batch of the tiny preset's classifier (`tiny_cnn`) at several input sides (issue 27).

    python benchmarks/bench_classifier.py                       # 112 / 96 / 80 px, 32 images, 1 thread
    python benchmarks/bench_classifier.py --sizes 112,80 --rounds 10
    python benchmarks/bench_classifier.py --sizes 112 --amp --rounds 10      # fp32 against bf16 autocast
    python benchmarks/bench_classifier.py --rounds 1 --predict RUNS/stages/classifier-seed0-xxx/classifier \
        --annotation RUNS/data/n20000-seed0-px128-g2-test/annotation.json --split test

A measured call is what `train_classifier` does per batch: forward, BCE-with-logits over the 14 observations,
backward and one AdamW step, on a channels-last float batch. The sizes alternate round by round (112, 96, 80, 112,
...) so all see the same machine load (with --amp each size also in bf16 mixed precision, as classifier.amp_bf16
trains). Printed: median seconds per batch of each size and its ratio to the first.

--predict: a trained classifier's predictions for a split of a phantom set (what harness/stages/prompts.py asks it for
the instructions), with 256 and with 32 images per forward pass (predict_proba's CPU batch, harness/models/classifier/
training.py), alternating: the seconds of each and whether the probabilities are equal bit for bit.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="112,96,80", help="comma-separated input sides in pixels")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--amp", action="store_true",
                        help="also time each size in bf16 mixed precision (classifier.amp_bf16; a CPU with AMX or "
                             "AVX512-BF16)")
    parser.add_argument("--predict", metavar="CLASSIFIER_DIR", help="time predictions of this classifier instead")
    parser.add_argument("--annotation", help="--predict: the phantom set's annotation.json")
    parser.add_argument("--split", default="test", help="--predict: the split to predict")
    args = parser.parse_args(argv)
    if args.predict:
        if not args.annotation:
            parser.error("--predict needs --annotation")
        return predict(args)

    import torch

    from harness.constants import NUM_OBSERVATIONS
    from harness.models.classifier.tiny_cnn import TinyCNN

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    # (side, bf16 autocast) pairs: each size in fp32, and with --amp in bf16 mixed precision too.
    variants = [(int(s), amp) for s in args.sizes.split(",") if s for amp in ((False, True) if args.amp else (False,))]
    n_cls = NUM_OBSERVATIONS
    nets = {v: TinyCNN(n_cls) for v in variants}
    opts = {v: torch.optim.AdamW(nets[v].parameters(), lr=1e-3) for v in variants}
    batches = {v: (torch.rand(args.batch_size, 3, v[0], v[0]).contiguous(memory_format=torch.channels_last),
                   (torch.rand(args.batch_size, n_cls) > 0.7).float()) for v in variants}
    loss_fn = torch.nn.BCEWithLogitsLoss()

    def step(v: tuple[int, bool]) -> float:
        x, y = batches[v]
        t0 = time.perf_counter()
        opts[v].zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=v[1]):  # as train_classifier: forward only
            logits = nets[v](x)
        loss_fn(logits.float(), y).backward()
        opts[v].step()
        return time.perf_counter() - t0

    def name(v: tuple[int, bool]) -> str:
        return f"{v[0]} px{' bf16' if v[1] else ''}"

    for v in variants:  # warm-up: oneDNN picks its kernels on the first call of each shape
        step(v)
    times: dict[tuple[int, bool], list[float]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for v in variants:
            times[v].append(step(v))
    base = statistics.median(times[variants[0]])
    for v in variants:
        med = statistics.median(times[v])
        print(f"{name(v)}: {med * 1000:.1f} ms per batch of {args.batch_size} (median of {args.rounds}), "
              f"{med / base:.2f}x {name(variants[0])}", flush=True)
    return 0


def predict(args) -> int:
    import numpy as np
    import torch

    from harness.data.datasets import load_annotation
    from harness.models.classifier import load_classifier, predict_proba
    from harness.stages.prompts import classifier_inputs

    torch.set_num_threads(args.threads)
    samples = load_annotation(args.annotation, "phantom", splits=(args.split,))[args.split]
    model, ccfg, _ = load_classifier(args.predict)
    x = classifier_inputs(samples, ccfg.img_size, ccfg.normalization)
    got: dict[int, list] = {256: [], 32: []}
    for _ in range(args.rounds):
        for batch in got:
            t0 = time.perf_counter()
            probs = predict_proba(model, x, batch_size=batch)
            got[batch].append((time.perf_counter() - t0, probs))
    for batch, runs in got.items():
        print(f"{len(samples)} {args.split} images, {batch} a pass: "
              f"{statistics.median(t for t, _ in runs):.2f} s (median of {args.rounds})", flush=True)
    same = all(np.array_equal(p, got[256][0][1]) for runs in got.values() for _, p in runs)
    print(f"probabilities equal bit for bit: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
