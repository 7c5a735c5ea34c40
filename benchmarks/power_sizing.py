"""Measure a study's noise and size its test split / seeds (reports/power.py).

    python benchmarks/power_sizing.py STUDY_DIR ARM REFERENCE [--target 0.01] [--seeds 3]

Reads STUDY_DIR/<arm>/seed*/eval/predictions_final_test.jsonl of both arms, takes each seed's paired bootstrap
(reports/bootstrap.py) on gold findings micro-F1 and BLEU-4, splits the seed-to-seed std into training and
test-split parts, and prints the MDD at the given seeds and the test split (or seeds) the target needs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from reports.bootstrap import paired_bootstrap, report_data_from_rows
from reports.power import reports_needed, seeds_needed, split_noise

METRICS = ("ce_micro_f1", "BLEU_4")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study_dir", type=Path)
    ap.add_argument("arm")
    ap.add_argument("baseline")
    ap.add_argument("--target", type=float, default=0.01)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args(argv)
    per_seed: dict[str, list[tuple[float, float]]] = {m: [] for m in METRICS}
    n = 0
    for ref_dir in sorted((args.study_dir / args.baseline).glob("seed*")):
        arm_file = args.study_dir / args.arm / ref_dir.name / "eval" / "predictions_final_test.jsonl"
        ref_file = ref_dir / "eval" / "predictions_final_test.jsonl"
        if not (arm_file.is_file() and ref_file.is_file()):
            continue
        boot = paired_bootstrap(report_data_from_rows(_rows(arm_file), str(arm_file)),
                                report_data_from_rows(_rows(ref_file), str(ref_file)), METRICS)
        n = boot[METRICS[0]].n_reports
        for m in METRICS:
            per_seed[m].append((boot[m].diff, boot[m].se))
    if len(per_seed[METRICS[0]]) < 2:
        raise SystemExit(f"{args.study_dir}: fewer than 2 seeds with test predictions for both "
                         f"'{args.arm}' and '{args.baseline}'")
    print(f"{args.arm} - {args.baseline}: {len(per_seed[METRICS[0]])} seeds, n = {n} test reports")
    print("| metric | per-seed diffs | sd seed | sd report | sd train | MDD now | "
          f"MDD {args.seeds} seeds, n=n | n for MDD<={args.target} at {args.seeds} seeds | seeds at n |")
    print("|---|---|---|---|---|---|---|---|---|")
    for m in METRICS:
        diffs, ses = zip(*per_seed[m], strict=True)
        parts = split_noise(diffs, ses, n)
        need_n = reports_needed(parts, args.seeds, args.target)
        need_s = seeds_needed(parts, n, args.target)
        print(f"| {m} | {', '.join(f'{d:+.4f}' for d in diffs)} | {parts.sd_seed:.4f} | {parts.sd_report:.4f} | "
              f"{parts.sd_train:.4f} | {parts.mdd(parts.seeds, n):.4f} | {parts.mdd(args.seeds, n):.4f} | "
              f"{need_n if need_n else 'unreachable (training noise)'} | {need_s if need_s else '> 200'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
