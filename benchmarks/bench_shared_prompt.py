"""The GRPO log-prob passes with each group's prompt computed once (rl.prompt_pass = shared, issue 27,
harness/grpo/shared_prompt.py) against the per-row passes, side by side on the same rollout.

    python benchmarks/bench_shared_prompt.py                                     # 4 prompts x G = 4, 48 tokens
    python benchmarks/bench_shared_prompt.py --prompts 32 --max-new-tokens 80   # tiny-power's RL step

The trainer is bench_vs_trl.py's regbench side (tiny preset model saved and loaded, LoRA r 32 + merger, constant
KL against a static reference, lean decoding, one thread). One rollout is sampled; then, alternating, each side
times the reference pass (`GRPOTrainer._frozen_pass("ref", ...)`, no grad, the feature memo off so that both
encode the images) and a current pass (the logits of the live policy, a loss on their log-probs, the backward).
Before timing, the two sides' reference log-probs must agree to 1e-4 (the run stops otherwise; printed: the
largest difference). Printed: the median time of each pass and side, and the ratios.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    from bench_vs_trl import pass_bench_args, saved_regbench_trainer

    args = pass_bench_args(__doc__.splitlines()[0], 10, argv)

    from harness.policy.logprobs import token_logprobs

    with saved_regbench_trainer(args) as trainer:
        trainer.frozen_features.memo = lambda name, version: None
        ro = trainer._rollout(list(range(args.prompts)))
        chunks = trainer._chunks(len(ro))
        from harness.grpo.trainer import _pass_logits

        def ref_pass(mode: str):
            trainer.rl.prompt_pass = mode
            start = time.perf_counter()
            logps, _ = trainer._frozen_pass("ref", ro, chunks, False)
            return time.perf_counter() - start, logps

        def current_pass(mode: str):
            trainer.rl.prompt_pass = mode
            trainer.model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            logits = _pass_logits(trainer.rl)(trainer.model, ro)
            logp = token_logprobs(logits, ro.responses, 1.0, None)
            (logp * ro.response_mask).sum().backward()
            return time.perf_counter() - start

        _, per_row = ref_pass("per_row")
        _, shared = ref_pass("shared")
        mask = ro.response_mask.bool()
        diff = float((per_row - shared)[mask].abs().max())
        if diff > 1e-4:
            print(f"the reference log-probs differ by {diff:.2e} (> 1e-4)", file=sys.stderr)
            return 1
        times: dict[str, list[float]] = {f"{p} {m}": [] for p in ("ref", "current") for m in ("per_row", "shared")}
        for r in range(args.rounds):
            for mode in (("per_row", "shared") if r % 2 == 0 else ("shared", "per_row")):
                times[f"ref {mode}"].append(ref_pass(mode)[0])
                times[f"current {mode}"].append(current_pass(mode))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.prompts} prompts x G={args.group_size} ({len(ro)} rows, prompt {ro.prompt_len} + response "
          f"{ro.response_mask.shape[1]} positions), {args.rounds} passes each, alternating, 1 thread; largest "
          f"log-prob difference {diff:.1e}")
    for name in ("ref", "current"):
        a, b = med[f"{name} per_row"], med[f"{name} shared"]
        label = "reference pass (no grad)" if name == "ref" else "current pass (forward + backward)"
        print(f"  {label}: per_row {a * 1e3:.1f} ms, shared {b * 1e3:.1f} ms, ratio {b / a:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
