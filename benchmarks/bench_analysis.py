"""A Supp. A analysis of one RL run three ways (issue 27, sixth session), one thread, one after the other, each on
a fresh copy of the run and of its start model so that nothing is shared between them unless said:

- `hf`: the policies sampled with transformers' `generate` (what the analyses called before);
- `lean`: with the run's generation.backend, the lean loop (the tokens of `generate`);
- `lean, before-RL sample shared`: the same again, with the start model's sample already kept beside it (what every
  analysis after the first of a study pays).

    python benchmarks/bench_analysis.py RUNS/stages/rl-seed0-xxxx [--n-prompts 100]

Each must give the same candidates and rewards as the run's stored analysis file, when it has one for the same
prompts. Printed: seconds of each.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a complete RL stage run (manifest.json, model/, init_from in its config)")
    parser.add_argument("--n-prompts", type=int, default=None, help="first n validation prompts (default all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch

    from harness.stages.analyze import KINDS, run_analyses

    torch.set_num_threads(1)
    run = Path(args.run)
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    start = Path(manifest["config"]["init_from"])
    if not (run / "model").is_dir() or not start.is_dir():
        parser.error(f"{run}: needs its model/ and its start model {start}")
    stored = run / "analysis_reward-variance.json"
    stored = json.loads(stored.read_text(encoding="utf-8")) if stored.is_file() else None
    with tempfile.TemporaryDirectory() as tmp:
        for name, backend in (("hf", "hf"), ("lean", "lean"), ("lean, before-RL sample shared", "lean")):
            root = Path(tmp) / backend
            if not root.is_dir():  # a fresh copy for hf and lean; the shared case reuses lean's
                shutil.copytree(start, root / "start" / "model")
                shutil.copytree(run / "model", root / "rl" / "model")
                man = json.loads(json.dumps(manifest))
                man["config"].update(init_from=str(root / "start" / "model"), out_dir=str(root / "rl"))
                man["config"]["generation"]["backend"] = backend
                (root / "rl" / "manifest.json").write_text(json.dumps(man), encoding="utf-8")
            t0 = time.perf_counter()
            path = run_analyses(root / "rl", list(KINDS), n_prompts=args.n_prompts, seed=args.seed)[0]
            seconds = time.perf_counter() - t0
            got = json.loads(path.read_text(encoding="utf-8"))
            same = "-"
            if stored is not None and stored["n_prompts"] == got["n_prompts"] and stored["seed"] == got["seed"]:
                same = all(got["policies"][p][k] == stored["policies"][p][k]
                           for p in ("before", "after") for k in ("candidates", "rewards"))
            print(f"{name}: {seconds:.1f} s; equal to the stored analysis: {same}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
