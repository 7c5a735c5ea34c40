"""Time a whole study stage by stage: from an empty cache, then each further seed with the shared stages built.

    PYTHONPATH=$PWD python benchmarks/bench_study.py                       # tiny-power Table 4, seeds 0 then 1, 2
    PYTHONPATH=$PWD python benchmarks/bench_study.py --seeds 0,1 --workers 2 --out /tmp/bench-t4 --json t4.json
    PYTHONPATH=$PWD python benchmarks/bench_study.py --seeds 2 --out /tmp/bench-t4 --cache CACHE \
        --set stages.rl.generation.backend=fused --set stages.rl.rl.lora_pass=merged   # the inexact options

    PYTHONPATH=$PWD python benchmarks/bench_study.py --seeds 0,1,2,3,4 --one-call   # as a user runs 5 seeds

Round 1 runs the first seed in a fresh output folder with a fresh per-machine cache ($REGBENCH_CACHE points at an
empty folder, so the phantom sets and stage 0 are built from scratch, as on a fresh machine). Each later round
adds one seed to the same folder: the shared stages (data, stage 0, and the stages the study pins with
`stage_seeds`) are then built, so its time is what one more seed of the study costs. Every stage node's time
comes from the runner's own record ("finished KIND (LABEL) in Ns"); the round's wall time is measured around
the runner. --one-call runs every seed in one call from the empty cache instead (`regbench experiment run
--seeds 0,1,2,3,4`: the workers take any seed's ready run, so they idle less than round by round).

Heavy (the whole study: about half an hour on 2 cores for three seeds of Table 4); nothing here is
part of the test suite. Timings on a shared machine vary with the load: compare runs made side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FINISHED = re.compile(r"^\[experiment [^]]*\] finished (\S+) \((.*)\) in (\d+)s$")


def run_round(study_path: Path, out: Path, seeds: list[int], workers: int, sets: list[str] | None = None,
              stages_dir: str | None = None) -> dict:
    """Run the study's `seeds` into `out`; returns {"wall_s", "nodes": [{"kind", "label", "elapsed_s"}]}."""
    from harness.experiments import load_study, run_experiment

    nodes: list[dict] = []

    def log(line: str) -> None:
        print(line, flush=True)
        m = FINISHED.match(line.strip())
        if m:
            nodes.append({"kind": m.group(1), "label": m.group(2), "elapsed_s": int(m.group(3))})

    t0 = time.perf_counter()
    result = run_experiment(load_study(study_path, sets=sets), out, workers=workers, seeds=seeds, log=log,
                            stages_dir=stages_dir)
    wall = time.perf_counter() - t0
    if not result.ok:
        raise SystemExit(f"bench_study: runs failed: {result.failed}; see {result.index_path}")
    return {"seeds": seeds, "wall_s": round(wall, 1), "nodes": nodes}


def summary(rounds: list[dict], fresh: bool = True) -> str:
    """fresh: the first round started from an empty cache and output folder (else from the given ones)."""
    lines = []
    for i, r in enumerate(rounds):
        what = "from an empty cache" if i == 0 and fresh else "shared stages built"
        lines.append(f"round {i + 1}: seed(s) {r['seeds']} ({what}): wall {r['wall_s']:.0f}s")
        by_kind: dict[str, list[int]] = {}
        for n in r["nodes"]:
            by_kind.setdefault(n["kind"], []).append(n["elapsed_s"])
        for kind, times in by_kind.items():
            lines.append(f"  {kind:<11} x{len(times)}: {sum(times):>5}s in all ({', '.join(f'{t}s' for t in times)})")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--study", default=str(ROOT / "experiments" / "table4_rl_ablation.yaml"))
    ap.add_argument("--seeds", default="0,1,2", help="the first runs from an empty cache, each next one after it")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=None, help="output folder (default: a new temporary folder)")
    ap.add_argument("--cache", default=None, help="the per-machine cache to start from (default: a new, empty one)")
    ap.add_argument("--json", default=None, help="also write the rounds' timings here")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a key of the study, as `regbench experiment run --set` (repeatable)")
    ap.add_argument("--stages-dir", default=None, help="keep stage runs here (default OUT/stages)")
    ap.add_argument("--one-call", action="store_true",
                    help="every seed in one call from the empty cache (one round), not one seed a round")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-study-"))
    fresh = not (out / "index.json").is_file()  # a folder a study already ran in: its stages are built
    os.environ["REGBENCH_CACHE"] = args.cache or tempfile.mkdtemp(prefix="bench-study-cache-")
    print(f"[bench_study] {args.study}: seeds {seeds}, {args.workers} workers, out {out}, "
          f"cache {os.environ['REGBENCH_CACHE']}", flush=True)
    groups = [seeds] if args.one_call else [[seed] for seed in seeds]
    rounds = [run_round(Path(args.study), out, group, args.workers, args.set, args.stages_dir) for group in groups]
    text = summary(rounds, fresh)
    print("\n" + text)
    if args.json:
        Path(args.json).write_text(json.dumps({"study": args.study, "workers": args.workers, "sets": args.set,
                                               "rounds": rounds},
                                              indent=2) + "\n")


if __name__ == "__main__":
    main()
