"""Speed of the offline clinical-entity F1 (``rewards.entity.entity_f1``) on distinct reports.

Run on purpose, never in the test suite::

    python benchmarks/bench_entity.py [--n 1000] [--repeats 5] [--min-rate 1000]

Each repeat scores ``--n`` distinct candidate reports against distinct references (the texts of a repeat are new:
the entity cache never hits), and the median rate over the repeats is reported in reports per second. The module
docstring of rewards/entity.py claims thousands per second; below ``--min-rate`` the exit status is 1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewards.entity import entity_f1  # noqa: E402

BASE = (
    "small left pleural effusion , no pneumothorax .",
    "mild cardiomegaly . bibasilar atelectasis .",
    "the lungs are clear . no acute osseous abnormality .",
    "right lower lobe opacity may represent pneumonia .",
)


def reports(n: int, tag: str) -> list[str]:
    """`n` distinct reports (two of the base sentences and a case number)."""
    return [f"{BASE[i % 4]} {BASE[(i + 1) % 4]} case {tag}-{i} ." for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="candidate/reference pairs per repeat")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--min-rate", type=float, default=1000.0, help="distinct reports per second expected at least")
    args = ap.parse_args(argv)
    rates = []
    for r in range(args.repeats):
        hyps = reports(args.n, f"h{r}")
        refs = reports(args.n, f"r{r}")[::-1]
        start = time.perf_counter()
        entity_f1(hyps, refs)
        elapsed = time.perf_counter() - start
        rates.append(2 * args.n / elapsed)  # 2n distinct texts labelled
    rate = statistics.median(rates)
    print(f"entity_f1: {args.n} pairs ({2 * args.n} distinct reports) per repeat, median {rate:,.0f} reports/s "
          f"over {args.repeats} repeats (min {min(rates):,.0f}, max {max(rates):,.0f})")
    if rate < args.min_rate:
        print(f"below --min-rate {args.min_rate:,.0f} reports/s")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
