"""M-RoPE positions of a batch of image prompts: transformers' `get_rope_index` vs harness/sampling/mrope_index.py
(issue 27), side by side on the same inputs, alternating, one thread.

    python benchmarks/bench_mrope_index.py                       # 32 and 128 rows (an evaluation batch, a rollout)
    python benchmarks/bench_mrope_index.py --rows 16,512 --repeats 21

The prompts are the tiny preset's (synthetic chest X-rays and their instructions, encoded by the tiny processor,
built as benchmarks/bench_rl_step.py builds them); a rollout repeats each prompt G times, so 128 rows are 32
prompts x G = 4. Every round checks that both return the same tensors. Printed: median ms of each and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="32,128", help="comma-separated batch sizes (rows)")
    parser.add_argument("--repeats", type=int, default=11, help="measured calls of each per batch size")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch
    from bench_rl_step import build_model_and_processor, build_prompts

    from harness.prompting.batching import encode_prompts
    from harness.sampling.mrope_index import mrope_positions

    torch.set_num_threads(1)
    sizes = [int(r) for r in args.rows.split(",")]
    model, processor, _ = build_model_and_processor(args.seed)
    inner = model.model
    prompts = build_prompts(max(sizes), 112, args.seed)
    print(f"{'rows':>5} {'get_rope_index ms':>18} {'batched ms':>11} {'ratio':>6}")
    for rows in sizes:
        batch = encode_prompts(processor, prompts.images[:rows], prompts.instructions[:rows])
        ids, grid, mask = batch["input_ids"], batch["image_grid_thw"], batch["attention_mask"]
        times: dict[str, list[float]] = {"hf": [], "batched": []}
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            want = inner.get_rope_index(ids, grid, None, second_per_grid_ts=None, attention_mask=mask)
            times["hf"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            got = mrope_positions(inner, ids, grid, mask)
            times["batched"].append(time.perf_counter() - t0)
            if not (torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])):
                print("the two differ; not timing", file=sys.stderr)
                return 1
        hf, fast = (statistics.median(times[k]) * 1e3 for k in ("hf", "batched"))
        print(f"{rows:>5} {hf:>18.2f} {fast:>11.2f} {fast / hf:>6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
