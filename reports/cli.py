"""The `report` and `analyze` subcommands; harness/cli.py registers them with one call (the analysis itself,
sampling from models, is harness/stages/analyze.py; reports/ only reads the files it writes):

    from reports.cli import add_subcommands
    add_subcommands(sub)        # sub = parser.add_subparsers(...)

  regbench report EXPERIMENT_DIR [--out DIR] [--bootstrap B] [--seed S] [--window W]
  regbench analyze {reward-variance,sign-alignment} RUN [--n-prompts N] [--group-size G] [--seed S]
                   [--device auto|cpu|cuda] [--batch-prompts K]
Each handler returns an exit code, like the other `regbench` commands (`ns.func(ns)`).
"""

from __future__ import annotations

import argparse

KINDS = ("reward-variance", "sign-alignment")  # harness/stages/analyze.py (not imported here: it loads torch)


def cmd_report(ns) -> int:
    from reports.build import build_report

    path = build_report(ns.experiment_dir, ns.out, B=ns.bootstrap, seed=ns.seed, window=ns.window)
    print(f"report: {path}")
    return 0


def cmd_analyze(ns) -> int:
    from harness.runs.records import read_json
    from harness.stages.analyze import run_analysis
    from reports.analyses import summary_lines

    path = run_analysis(ns.kind, ns.run, n_prompts=ns.n_prompts, group_size=ns.group_size, seed=ns.seed,
                        device=ns.device, batch_prompts=ns.batch_prompts)
    for line in summary_lines(read_json(path)):
        print(line)
    print(f"wrote {path}")
    return 0


def add_subcommands(subparsers: argparse._SubParsersAction) -> None:
    """Register `report` and `analyze` on the `regbench` subparsers."""
    rep = subparsers.add_parser("report", help="tables, figures and index.html from an experiment's run records")
    rep.add_argument("experiment_dir", metavar="EXPERIMENT_DIR",
                     help="an experiment folder (with index.json), or a folder of RL run directories")
    rep.add_argument("--out", default=None, help="output folder (default EXPERIMENT_DIR/report)")
    rep.add_argument("--bootstrap", type=int, default=2000,
                     help="resamples of the paired bootstrap over test reports (single-seed comparisons; default 2000)")
    rep.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    rep.add_argument("--window", type=int, default=None,
                     help="rolling-mean window of the curves in steps (default: about steps / 50)")
    rep.set_defaults(func=cmd_report)

    ana = subparsers.add_parser("analyze", help="REVA-PO Supp. A analyses of an RL run (before vs after RL)")
    ana.add_argument("kind", choices=list(KINDS),
                     help="reward-variance: within-group reward std (Supp. A.1, Fig. S5); "
                          "sign-alignment: P_sign / P_top1 of BLEU-4 vs CheXpert F1 (Supp. A.3)")
    ana.add_argument("run", metavar="RUN", help="an RL run directory (manifest.json with init_from, model/)")
    ana.add_argument("--n-prompts", type=int, default=None, help="first N validation prompts (default all)")
    ana.add_argument("--group-size", type=int, default=4, help="candidates per prompt, G (default 4)")
    ana.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    ana.add_argument("--device", default="auto", help="auto (cuda when available), cpu or cuda")
    ana.add_argument("--batch-prompts", type=int, default=8, help="prompts per sampling batch (default 8)")
    ana.set_defaults(func=cmd_analyze)
