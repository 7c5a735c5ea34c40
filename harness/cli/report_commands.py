"""`report` (tables, figures and a page from an experiment's run records) and `analyze` (Supp. A analyses).

The harness does what needs models or stores (sampling for `analyze`, opening Optuna storages) and hands
reports/ the records and objects it reads: reports/ itself only reads.
"""

from __future__ import annotations

import argparse

ANALYSIS_KINDS = ("reward-variance", "sign-alignment")  # harness/stages/analyze.py (loads torch: imported late)


def build_experiment_report(experiment_dir, out=None, **kwargs):
    """reports.build.build_report with the Optuna studies stored beside the experiment opened here."""
    from harness.search.stored import experiment_studies
    from reports.build import build_report

    return build_report(experiment_dir, out, optuna_studies=experiment_studies(experiment_dir), **kwargs)


def cmd_report(ns) -> int:
    path = build_experiment_report(ns.experiment_dir, ns.out, B=ns.bootstrap, seed=ns.seed, window=ns.window)
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


def add_parsers(sub: argparse._SubParsersAction) -> None:
    rep = sub.add_parser("report", help="tables, figures and index.html from an experiment's run records")
    rep.add_argument("experiment_dir", metavar="EXPERIMENT_DIR",
                     help="an experiment folder (with index.json), or a folder of RL run directories")
    rep.add_argument("--out", default=None, help="output folder (default EXPERIMENT_DIR/report)")
    rep.add_argument("--bootstrap", type=int, default=2000,
                     help="resamples of the paired bootstrap over test reports (single-seed comparisons; default 2000)")
    rep.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    rep.add_argument("--window", type=int, default=None,
                     help="rolling-mean window of the curves in steps (default: about steps / 50)")
    rep.set_defaults(func=cmd_report)

    ana = sub.add_parser("analyze", help="REVA-PO Supp. A analyses of an RL run (before vs after RL)")
    ana.add_argument("kind", choices=list(ANALYSIS_KINDS),
                     help="reward-variance: within-group reward std (Supp. A.1, Fig. S5); "
                          "sign-alignment: P_sign / P_top1 of BLEU-4 vs CheXpert F1 (Supp. A.3)")
    ana.add_argument("run", metavar="RUN", help="an RL run directory (manifest.json with init_from, model/)")
    ana.add_argument("--n-prompts", type=int, default=None, help="first N validation prompts (default all)")
    ana.add_argument("--group-size", type=int, default=4, help="candidates per prompt, G (default 4)")
    ana.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    ana.add_argument("--device", default="auto", help="auto (cuda when available), cpu or cuda")
    ana.add_argument("--batch-prompts", type=int, default=8, help="prompts per sampling batch (default 8)")
    ana.set_defaults(func=cmd_analyze)
