"""Two studies of the same arms and seeds, run by run: identical or not, and each arm's paired difference.

    PYTHONPATH=$PWD python benchmarks/compare_studies.py A_OUT B_OUT [--metrics gold_f1,BLEU_4]

For an exact change (B should compute what A computed): how many runs' test prediction files are byte-identical
and how many test metrics are equal (paths and times aside). For an inexact option (issue 27): per arm, the test
metric of B minus A paired by seed, with its mean and 95% t-interval over the shared seeds, beside the
seed-to-seed spread of the arm in A; a verdict that differs between the two studies' reports is read against
these. One-off analysis, not part of the test suite.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
from pathlib import Path

IGNORED = ("model_dir",)  # where a run's model lies, not what it scored


def _runs(root: Path) -> dict[tuple[str, int], dict]:
    path = root / "index.json"
    if not path.is_file():
        raise SystemExit(f"compare_studies: {path} not found: give a study's output folder (regbench experiment run "
                         f"--out)")
    index = json.loads(path.read_text())
    return {(r["arm"], int(r["seed"])): r for r in index["runs"] if r.get("status") == "complete"}


def _digest(folder: Path) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("predictions*"))]


def _metrics(root: Path, run: dict) -> dict:
    m = json.loads((root / run["metrics"]).read_text())
    return {k: v for k, v in m.items() if k not in IGNORED and "time" not in k}


def main(argv: list[str] | None = None) -> int:
    from scipy import stats

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path, help="the reference study's output folder")
    ap.add_argument("b", type=Path, help="the other study's output folder")
    ap.add_argument("--metrics", default="gold_f1,BLEU_4", help="comma-separated test metrics to pair")
    args = ap.parse_args(argv)
    ra, rb = _runs(args.a), _runs(args.b)
    shared = sorted(set(ra) & set(rb))
    if not shared:
        print(f"no (arm, seed) run complete in both {args.a} and {args.b}", file=sys.stderr)
        return 2
    ma = {k: _metrics(args.a, ra[k]) for k in shared}
    mb = {k: _metrics(args.b, rb[k]) for k in shared}
    same_files = sum(bool(d) and d == _digest(args.b / rb[k]["eval_dir"])
                     for k in shared for d in [_digest(args.a / ra[k]["eval_dir"])])
    same_metrics = sum(ma[k] == mb[k] for k in shared)
    print(f"{len(shared)} runs in both: test prediction files byte-identical {same_files}, "
          f"test metrics equal {same_metrics}")
    for metric in [m for m in args.metrics.split(",") if m]:
        print(f"\n{metric}: B - A paired by seed, mean [95% t-interval]; the arm's seed-to-seed std in A")
        for arm in sorted({arm for arm, _ in shared}):
            seeds = [s for a, s in shared if a == arm]
            d = [mb[arm, s][metric] - ma[arm, s][metric] for s in seeds]
            mean = statistics.mean(d)
            half = stats.t.ppf(0.975, len(d) - 1) * statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 else float("nan")
            spread = statistics.stdev([ma[arm, s][metric] for s in seeds]) if len(seeds) > 1 else float("nan")
            print(f"  {arm:<12} n={len(d)} {mean:+.4f} [{mean - half:+.4f}, {mean + half:+.4f}]  std in A {spread:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
