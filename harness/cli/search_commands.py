"""`search run|confirm|report`: Optuna searches over a study's knobs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli.args import add_executor_args, int_list, slurm_options
from harness.cli.report_commands import build_experiment_report
from harness.search.file import load_search
from harness.search.optuna_study import open_study


def search_report(out: Path, dest=None, storage: str | None = None) -> Path:
    """Open the search's Optuna study (its storage, by default the one search.json names) and hand it to
    reports/search.py, which writes the report folder."""
    # lazy: start-up cost (pandas)
    from reports.search import build_search_report

    if not (out / "search.json").is_file():
        raise FileNotFoundError(f"{out / 'search.json'}: not a search folder (run `regbench search run FILE` first)")
    study, _ = open_study(out, create=False, storage=storage)
    return build_search_report(out, study, dest)


def cmd_search(ns) -> int:
    if ns.search_command == "report":
        dest = search_report(Path(ns.out), ns.dest, storage=ns.storage)
        print(f"search report: {dest / 'README.md'}")
        return 0
    if ns.search_command == "confirm":
        # lazy: start-up cost (torch)
        from harness.search.run import run_confirmation

        result = run_confirmation(Path(ns.out), ns.top, int_list(ns.seeds), workers=ns.workers,
                                  launcher=ns.launcher, executor=ns.executor, slurm=slurm_options(ns))
        if ns.report:
            print(f"report: {build_experiment_report(result.index_path.parent)}")
        return 0 if result.ok else 1
    # lazy: start-up cost (torch)
    from harness.search.run import run_search

    search = load_search(ns.file, preset=ns.preset, sets=ns.set)
    out = Path(ns.out) if ns.out else Path("runs") / f"{search.name}-{search.preset}"
    try:
        result = run_search(search, out, n_trials=ns.n_trials, workers=ns.workers, launcher=ns.launcher,
                            stages_dir=ns.stages_dir, parallel_trials=ns.parallel_trials, storage=ns.storage,
                            executor=ns.executor, slurm=slurm_options(ns))
    except RuntimeError as e:  # trials failing in a row: the message says why and how to continue
        print(f"regbench: error: {e}", file=sys.stderr)
        return 1
    if ns.report:
        dest = search_report(out, storage=ns.storage)
        print(f"search report: {dest / 'README.md'}")
    return 0 if result.best else 1


def add_parsers(sub: argparse._SubParsersAction) -> None:
    search = sub.add_parser("search", help="Optuna search over a study's knobs (experiments/searches/*.yaml)")
    search_sub = search.add_subparsers(dest="search_command", required=True)
    p = search_sub.add_parser("run", help="run trials until n_trials have finished (resumes an earlier run)")
    p.add_argument("file", help="search YAML, e.g. experiments/searches/rer_bounds.yaml")
    p.add_argument("--out", default=None, help="output folder (default runs/<search>-<preset>)")
    p.add_argument("--n-trials", type=int, default=None, help="finished trials to reach (default: the file's)")
    p.add_argument("--workers", type=int, default=1, help="worker processes for a trial's seeds (default 1)")
    p.add_argument("--parallel-trials", type=int, default=1, metavar="K",
                   help="run K trials at a time, in K worker processes (one GPU each where there are several)")
    p.add_argument("--preset", default=None, help="preset YAML replacing the search's base: preset")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a key of the merged search file, e.g. seeds=[0,1] (repeatable)")
    p.add_argument("--launcher", default=None, metavar="CMD",
                   help='run warm-up, SFT and RL under CMD, e.g. "torchrun --nproc_per_node 8" (see experiment run)')
    p.add_argument("--stages-dir", default=None, metavar="DIR",
                   help="keep stage runs in DIR, shared with studies given the same DIR (see experiment run)")
    p.add_argument("--storage", default=None, metavar="URL",
                   help="Optuna storage: sqlite (default, OUT/optuna.db), a database URL (sqlite:///x.db, "
                        "postgresql://...), journal or journal:PATH (shared disks); replaces the file's storage:")
    add_executor_args(p)
    p.add_argument("--no-report", dest="report", action="store_false", help="skip the report at the end")
    p.set_defaults(func=cmd_search)
    p = search_sub.add_parser("confirm", help="rerun the best trials and the preset's values over several seeds "
                                               "(OUT/confirm: an experiment with paired tests against the preset)")
    p.add_argument("out", help="the search's output folder")
    p.add_argument("--top", type=int, default=3, help="how many of the best complete trials (default 3)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--workers", type=int, default=2, help="parallel worker processes (default 2)")
    p.add_argument("--launcher", default=None, metavar="CMD", help="as for experiment run (needs --workers 1)")
    add_executor_args(p)
    p.add_argument("--no-report", dest="report", action="store_false", help="skip the report at the end")
    p.set_defaults(func=cmd_search)
    p = search_sub.add_parser("report", help="trials table and Optuna plots of a search folder")
    p.add_argument("out", help="the search's output folder")
    p.add_argument("--dest", default=None, help="report folder (default OUT/search_report)")
    p.add_argument("--storage", default=None, metavar="URL", help="the search's Optuna storage (default: the "
                   "one OUT/search.json names)")
    p.set_defaults(func=cmd_search)
