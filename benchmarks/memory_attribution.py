"""What is alive at the peak of one SFT or RL step at the 3B's widths: torch.profiler's memory timeline, walked to
its peak, with every live tensor attributed to the op (and the project / transformers / peft frames) that created
it (issue 14; benchmarks/RESULTS.md, "Two fixes").

    PYTHONPATH=$PWD python benchmarks/memory_attribution.py rl 2 2      # STAGE GLOBAL MICRO (as bench_memory_3b)

The setting is bench_memory_3b.py's (`prepare`): same model, data and step. Prints the peak of the tracked
tensors, the ops running at that moment, and the largest groups of live tensors by category (PARAMETER,
OPTIMIZER_STATE, GRADIENT, ACTIVATION, TEMPORARY, ...) and creator. The profiler's CPU tracking covers tensors only,
so the figures are below peak RSS (bench_memory_3b.py), which also counts the allocator's retained heap. Uses
torch.profiler's private `_memory_profile()` (the data behind `export_memory_timeline`); never part of the suite.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

KEEP_FRAMES = ("harness", "peft", "transformers")


def _where(event) -> str:
    """The creating op and its nearest frames from this project, transformers or peft."""
    chain, e = [], event
    while e is not None and len(chain) < 80:
        chain.append(e.name)
        e = e.parent
    frames = [c.split("/")[-1] for c in chain if ".py(" in c and any(k in c for k in KEEP_FRAMES)]
    return " <- ".join([event.name, *frames[:4]])


def attribute(prof, top: int = 12) -> None:
    from torch.profiler._memory_profiler import Action

    mp = prof._memory_profile()
    creator = {}
    for node in mp._data_flow_graph.flow_nodes:
        for key, version in node.outputs.items():
            if version == 0:
                creator.setdefault(key, node._event)
    live: dict = {}
    cur = peak = 0
    peak_t, peak_live = None, {}
    for t, action, (key, _version), nbytes in mp.timeline:
        if key.device.type != "cpu":
            continue
        if action in (Action.PREEXISTING, Action.CREATE):
            live[key] = nbytes
            cur += nbytes
        elif action == Action.DESTROY:
            cur -= live.pop(key, 0)
        if cur > peak:
            peak, peak_t, peak_live = cur, t, dict(live)
    running = [e for e in mp._op_tree.sorted_nodes if e.start_time_ns <= peak_t <= e.end_time_ns]
    groups: collections.Counter = collections.Counter()
    for key, nbytes in peak_live.items():
        category = str(mp._categories.get(key, 0)).split(".")[-1]
        event = creator.get(key)
        where = _where(event) if event is not None else "(before the step, or no creator recorded)"
        groups[(category, where)] += nbytes
    print(f"peak of the tracked tensors: {peak / 2**20:,.0f} MiB")
    print("running at the peak: " + " > ".join(e.name.split("/")[-1][:60] for e in running[-10:]))
    for (category, where), nbytes in groups.most_common(top):
        print(f"  {nbytes / 2**20:9.1f} MiB  {category:16s} {where}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=["sft", "rl"])
    ap.add_argument("global_batch", type=int)
    ap.add_argument("micro", type=int)
    ap.add_argument("--gc", action="store_true", help="gradient checkpointing")
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args(argv)

    import torch
    from bench_memory_3b import prepare
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as out:
        step, _ = prepare(args.stage, args.global_batch, args.micro, args.gc, Path(out))
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                     with_stack=True) as prof:
            step()
    print(f"{args.stage}, global {args.global_batch}, micro-batch {args.micro}, gradient checkpointing "
          f"{'on' if args.gc else 'off'}")
    attribute(prof, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
