"""`report` (tables, figures and a page from an experiment's run records), `analyze` (Supp. A analyses) and
`compare` (one study run two ways).

The harness does what needs models or stores (sampling for `analyze`, opening Optuna storages) and hands
reports/ the records and objects it reads: reports/ itself only reads.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from harness.cli.args import int_list
from harness.config import ConfigError
from harness.runs.records import read_json
from harness.runs.staged import staged_folder
from harness.search.stored import experiment_studies
from harness.stages.analyze import KINDS, run_analysis

ANALYSIS_KINDS = KINDS  # harness/stages/analyze.py (it loads no heavy library at import)


def build_experiment_report(experiment_dir, out=None, **kwargs):
    """reports.build.build_report with the Optuna studies stored beside the experiment opened here."""
    # lazy: start-up cost (matplotlib, pandas)
    from reports.build import build_report

    return build_report(experiment_dir, out, optuna_studies=experiment_studies(experiment_dir), **kwargs)


def cmd_report(ns) -> int:
    out = Path(ns.out) if ns.out else Path(ns.experiment_dir) / "report"
    # Built aside and moved in whole: a failure (a full disk) leaves `out` as it was (harness/runs/staged.py).
    with staged_folder(out, "the report") as staging:
        path = build_experiment_report(ns.experiment_dir, staging, B=ns.bootstrap, seed=ns.seed, window=ns.window)
    print(f"report: {out / path.relative_to(staging)}")
    return 0


def cmd_analyze(ns) -> int:
    # lazy: summary_lines is another import in another function of this module
    from reports.analyses import summary_lines

    path = run_analysis(ns.kind, ns.run, n_prompts=ns.n_prompts, group_size=ns.group_size, seed=ns.seed,
                        device=ns.device, batch_prompts=ns.batch_prompts)
    for line in summary_lines(read_json(path)):
        print(line)
    print(f"wrote {path}")
    return 0


def _deltas(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        metric, sep, value = item.partition("=")
        if not sep or not metric.strip():
            raise ConfigError(f"--delta takes METRIC=VALUE (e.g. gold_f1=0.02), got '{item}'")
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        if not math.isfinite(number) or number <= 0:
            raise ConfigError(f"--delta {item}: the value must be a number > 0 (e.g. {metric.strip()}=0.02)")
        out[metric.strip()] = value.strip()
    return out


def _check_alpha(alpha: float | None) -> None:
    """--alpha: a level in (0, 0.5), as a study's decide.alpha (harness/experiments/study.py: check_decide)."""
    if alpha is not None and not (math.isfinite(alpha) and 0 < alpha < 0.5):
        raise ConfigError(f"--alpha {alpha:g}: must be in (0, 0.5), as a study's decide.alpha (e.g. --alpha 0.05)")


def cmd_compare(ns) -> int:
    # lazy: tests replace atomic_write_text and load_experiment at their source (read at call time);
    # lazy: summary_lines is another import in another function of this module
    from harness.runs.records import atomic_write_text
    from reports.experiment import load_experiment
    from reports.option_check import as_json, check_option, summary_lines

    if ns.json and Path(ns.json).is_dir():  # refused before the readings print, not after
        raise ValueError(f"--json {ns.json} is a folder; give a file name")
    _check_alpha(ns.alpha)  # the options before the study folders are read
    deltas = _deltas(ns.delta)
    first, other = load_experiment(ns.first), load_experiment(ns.other)
    check = check_option(first, other, seeds=int_list(ns.seeds), other_seeds=int_list(ns.other_seeds),
                         alpha=ns.alpha, deltas=deltas)
    for line in summary_lines(check, Path(ns.first).name or "first", Path(ns.other).name or "other"):
        print(line)
    if ns.json:
        atomic_write_text(Path(ns.json), json.dumps(as_json(check), indent=1) + "\n")
        print(f"wrote {ns.json}")
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

    cmp = sub.add_parser("compare", help="one study run two ways (the exact path and an option): identical runs, "
                                         "each arm's and each declared contrast's shift decided, the verdicts side "
                                         "by side")
    cmp.add_argument("first", metavar="FIRST_DIR", help="the study run first, the usual way (index.json)")
    cmp.add_argument("other", metavar="OTHER_DIR", help="the same study run with the option (may be FIRST_DIR "
                                                        "itself with --other-seeds)")
    cmp.add_argument("--seeds", default=None,
                     help="comma-separated seeds of FIRST_DIR (default: the seeds with a complete run in both)")
    cmp.add_argument("--other-seeds", default=None,
                     help="seeds of OTHER_DIR paired in order with --seeds (default: the same seeds)")
    cmp.add_argument("--alpha", type=float, default=None, help="level (default: the study's decide.alpha)")
    cmp.add_argument("--delta", action="append", metavar="METRIC=VALUE",
                     help="compare METRIC with this delta (default: each metric of the study's contrasts with its "
                          "smallest delta); repeatable")
    cmp.add_argument("--json", default=None, metavar="FILE", help="also write the comparison as JSON")
    cmp.set_defaults(func=cmd_compare)
