"""Rollout time of the lean decoding loop vs transformers' `generate` (issue 15; goal: lean >= 3x faster).

    python benchmarks/bench_rollout.py                      # tiny preset, 4 prompts x G=4 = 16 rows x 48 tokens
    python benchmarks/bench_rollout.py --repeats 15 --threads 1 --max-new-tokens 48
    python benchmarks/bench_rollout.py --count-ops               # torch ops per decoded token of the lean loop
    python benchmarks/bench_rollout.py --backends lean,fused --prompts 32 [--count-ops]  # lean vs fused (issue 27)

The model is the tiny preset (built like benchmarks/bench_rl_step.py: harness.models.tiny with
harness.config.ModelConfig's sizes, LoRA r = 32 on every linear layer + the merger, set trainable for stage "rl"),
the prompts are synthetic chest X-rays (harness.data.phantom). A measured call is `sample_rollout` (encoding,
decoding, masks and texts: what a GRPO step pays), with the RL sampling settings (T 0.7, top-p 0.9, repetition
penalty 1.03) and min_new_tokens = max_new_tokens, so every row decodes exactly max_new_tokens tokens.
Repeats alternate the backends (hf, lean, lean, hf, ...) so both see the same machine load; before timing,
hf and lean (when both are measured) decode once from the same seed and must return the same tokens (the run
stops otherwise). `fused` (harness/sampling/fused_step.py) samples the same distribution, not the same tokens.
The same is then timed for the decoding call alone (`decode_tokens` on the encoded batch, prefill included).
Printed: median and min seconds per call for each backend and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

TIMED = ("hf", "lean", "fused")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4, help="prompts per rollout (B)")
    parser.add_argument("--group-size", type=int, default=4, help="candidates per prompt (G)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=10, help="measured rollouts per backend")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (the goal is on one core)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count-ops", action="store_true",
                        help="instead of timing: torch ops per decoded token of the lean loop (torch.profiler)")
    parser.add_argument("--backends", default="hf,lean",
                        help=f"comma-separated, from {', '.join(TIMED)}; --count-ops counts each but hf")
    args = parser.parse_args(argv)
    backends = tuple(b for b in args.backends.split(",") if b)
    if not backends or not set(backends) <= set(TIMED):
        parser.error(f"--backends {args.backends!r}: choose from {', '.join(TIMED)}")

    import torch
    from bench_rl_step import build_model_and_processor, build_prompts

    from harness.grpo.rollout import sample_rollout
    from harness.models.precision import autocast_for
    from harness.models.trainable import add_lora, set_trainable
    from harness.prompting.batching import END, encode_prompts, suppressed_token_ids
    from harness.sampling.decoding import decode_tokens

    torch.set_num_threads(args.threads)
    prompts = build_prompts(args.prompts, 112, args.seed)
    model, processor, mcfg = build_model_and_processor(args.seed)
    model = add_lora(model, r=mcfg.lora_r, alpha=mcfg.lora_alpha, dropout=mcfg.lora_dropout)
    set_trainable(model, "rl")
    model.to(args.device)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)

    def rollout(backend: str):
        torch.manual_seed(args.seed)
        return sample_rollout(model, processor, prompts.images, prompts.instructions, group_size=args.group_size,
                              temperature=0.7, top_p=0.9, top_k=0, max_new_tokens=args.max_new_tokens,
                              min_new_tokens=args.max_new_tokens, repetition_penalty=1.03, backend=backend)

    # The decoding call alone (prefill included): the same processor inputs sample_rollout builds.
    tok = processor.tokenizer
    rep = [v for v in prompts.images for _ in range(args.group_size)]
    ins = [s for s in prompts.instructions for _ in range(args.group_size)]
    batch = {k: v.to(args.device) for k, v in encode_prompts(processor, rep, ins).items()}

    def decode(backend: str):
        torch.manual_seed(args.seed)
        model.eval()
        with torch.no_grad(), autocast_for(model):
            return decode_tokens(model, batch, backend=backend, do_sample=True, temperature=0.7, top_p=0.9,
                                 top_k=0, max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens,
                                 repetition_penalty=1.03, suppress_tokens=suppressed_token_ids(tok),
                                 pad_token_id=tok.pad_token_id, eos_token_id=tok.convert_tokens_to_ids(END))

    if args.count_ops:
        for backend in backends:
            if backend != "hf":
                count_ops(decode, args, backend)
        return 0
    if {"hf", "lean"} <= set(backends):
        ref, lean = rollout("hf"), rollout("lean")
        if not torch.equal(ref.sequences, lean.sequences) or not torch.equal(decode("hf"), decode("lean")):
            print("lean and generate returned different tokens; not timing", file=sys.stderr)
            return 1
    rows = args.prompts * args.group_size
    print(f"{rows} rows x {args.max_new_tokens} new tokens, {args.repeats} interleaved repeats, "
          f"{args.threads} thread(s), {args.device}, torch {torch.__version__}, {platform.machine()}")
    for name, fn in (("sample_rollout (encode + decode + texts)", rollout), ("decoding call only", decode)):
        times: dict[str, list[float]] = {b: [] for b in backends}
        for r in range(args.repeats):
            for backend in backends if r % 2 == 0 else backends[::-1]:
                sync()
                t0 = time.perf_counter()
                fn(backend)
                sync()
                times[backend].append(time.perf_counter() - t0)
        med = {b: statistics.median(t) for b, t in times.items()}
        print(name)
        for b in backends:
            print(f"  {b:5s} median {med[b]:.4f} s   min {min(times[b]):.4f} s")
        for slow, fast in (("hf", "lean"), ("hf", "fused"), ("lean", "fused")):
            if slow in med and fast in med:
                print(f"  speed-up (median {slow} / median {fast}): {med[slow] / med[fast]:.2f}x")
    return 0


def count_ops(decode, args, backend: str = "lean") -> int:
    """Ops per decoded token: the decoding call (`backend`: lean or fused) for max_new_tokens and for 1 new token
    (prefill + the first token) under torch.profiler; the difference over max_new_tokens - 1. "top-level" counts
    the ops the loop calls (an aten op inside another one, e.g. addmm inside linear, is not counted again); "all"
    counts every aten op."""
    from torch.profiler import ProfilerActivity, profile

    def measure(tokens: int) -> tuple[int, int, float]:
        args.max_new_tokens = tokens
        decode(backend)  # warm
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            decode(backend)
        aten = [e for e in prof.events() if e.name.startswith("aten::")]
        top = [e for e in aten if not (e.cpu_parent and e.cpu_parent.name.startswith("aten::"))]
        return len(top), len(aten), sum(e.self_cpu_time_total for e in aten) / 1e6

    full_tokens = args.max_new_tokens
    top_n, all_n, cpu_n = measure(full_tokens)
    top_1, all_1, cpu_1 = measure(1)
    args.max_new_tokens = full_tokens
    steps = full_tokens - 1
    rows = args.prompts * args.group_size
    print(f"{rows} rows, {backend} loop, {full_tokens} vs 1 new tokens, {args.threads} thread(s)")
    print(f"top-level ops per decoded token: {(top_n - top_1) / steps:.0f}; "
          f"all aten ops: {(all_n - all_1) / steps:.0f}; "
          f"aten self CPU per token {(cpu_n - cpu_1) / steps * 1e3:.2f} ms "
          f"({(cpu_n - cpu_1) / max(top_n - top_1, 1) * 1e6:.1f} us per top-level op; profiler overhead included)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
