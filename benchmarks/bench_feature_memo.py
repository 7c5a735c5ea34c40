"""The reference pass of a GRPO step with and without the frozen passes' vision-feature memo (issue 27,
harness/sampling/feature_memo.py), side by side on the same rollout.

    python benchmarks/bench_feature_memo.py                  # 4 prompts x G = 4 (bench_vs_trl.py's step)
    python benchmarks/bench_feature_memo.py --prompts 32     # 32 x 4 = 128 rows (tiny-power's RL step)

The trainer is bench_vs_trl.py's regbench side (tiny preset model saved and loaded, LoRA r 32 + merger, constant
KL against a static reference, lean decoding, one thread). One rollout is sampled; then the reference pass
(`GRPOTrainer._frozen_pass("ref", ...)`: swap the snapshot in, the log-probs of every response token) is timed
alternately with the memo (filled by a first pass, as from the second epoch on) and without it (every image
encoded, as before). Before timing, both must give the same log-probs bit for bit (the run stops otherwise).
Printed: the median time of each and the ratio.
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

    args = pass_bench_args(__doc__.splitlines()[0], 20, argv)
    import torch

    with saved_regbench_trainer(args) as trainer:
        ro = trainer._rollout(list(range(args.prompts)))
        chunks = trainer._chunks(len(ro))
        real_memo = trainer.frozen_features.memo

        def ref_pass(memo_on: bool):
            trainer.frozen_features.memo = real_memo if memo_on else (lambda name, version: None)
            start = time.perf_counter()
            logps, _ = trainer._frozen_pass("ref", ro, chunks, False)
            return time.perf_counter() - start, logps

        _, plain = ref_pass(False)
        ref_pass(True)  # fills the memo
        _, read = ref_pass(True)
        if not torch.equal(plain, read):
            print("the reference log-probs differ with the memo", file=sys.stderr)
            return 1
        times: dict[bool, list[float]] = {True: [], False: []}
        for r in range(args.rounds):
            for memo_on in ((True, False) if r % 2 == 0 else (False, True)):
                times[memo_on].append(ref_pass(memo_on)[0])
        hits, misses = trainer.frozen_features.counts()["ref"]
    on, off = statistics.median(times[True]), statistics.median(times[False])
    print(f"{args.prompts} prompts x G={args.group_size} ({len(ro)} rows, {ro.sequences.shape[1]} positions), "
          f"{args.rounds} passes each, alternating, 1 thread: reference pass without memo {off * 1e3:.1f} ms, "
          f"with memo {on * 1e3:.1f} ms, ratio {on / off:.3f} (log-probs bit for bit equal; memo: {hits} images "
          f"read, {misses} encoded)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
