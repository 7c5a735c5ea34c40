"""`experiment run|list` (a study: arms x seeds, shared stages cached) and `demo` (the tiny study end to end)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.args import add_executor_args, int_list, name_list, slurm_options
from harness.cli.demo import run_demo, verdict_arms
from harness.cli.report_commands import build_experiment_report
from harness.config import ConfigError
from harness.experiments.sequential import run_until_decided
from harness.experiments.slurm import experiment_status
from harness.runs.preemption import REQUEUE_EXIT_CODE
from reports.demo_decision import decision_text
from reports.demo_verdict import demo_verdict


def cmd_demo(ns) -> int:
    out = Path(ns.out)
    results = run_demo(out, progress=not ns.no_progress, workers=ns.workers)
    arms = verdict_arms()
    decided = decision_text(out, {arms[0]: arms[1], arms[2]: arms[3]} if arms else None)
    verdict = demo_verdict(out, *arms) if arms else ""
    # The declared contrast decided over the RL seeds (issue 23), then the first seed's report bootstrap (issue 12)
    text = "\n\n".join(t for t in (decided, verdict) if t)
    if text:
        print(f"\n{text}\n", flush=True)
        results.write_text(results.read_text() + f"\n{text}\n")
    print("[demo] building the report", flush=True)
    print(f"report: {build_experiment_report(out)}")
    return 0


def cmd_experiment(ns) -> int:
    # lazy: tests replace run_experiment at its source, read at call time
    from harness.experiments import build_plan, describe_plan, load_study, run_experiment

    if ns.experiment_command == "status":
        print(experiment_status(ns.dir))
        return 0

    study = load_study(ns.file, preset=ns.preset, sets=ns.set)
    out = Path(ns.out) if ns.out else Path("runs") / f"{study.name}-{study.preset}"
    seeds, arms = int_list(ns.seeds), name_list(ns.arms)
    if ns.experiment_command == "list":
        for a in arms or []:
            study.arm(a)
        print(describe_plan(build_plan(study, out, seeds, ns.stages_dir), seeds=seeds, arms=arms))
        return 0
    if ns.until_decided:
        if seeds:
            raise ConfigError("--until-decided chooses the seeds (the study's, then the next integers): drop --seeds")
        result, _ = run_until_decided(study, out, max_seeds=ns.max_seeds, workers=ns.workers, arms=arms,
                                      launcher=ns.launcher, stages_dir=ns.stages_dir, executor=ns.executor,
                                      slurm=slurm_options(ns))
        return 0 if result is not None and result.ok else 1
    if ns.max_seeds is not None:
        raise ConfigError("--max-seeds goes with --until-decided")
    result = run_experiment(study, out, workers=ns.workers, seeds=seeds, arms=arms, launcher=ns.launcher,
                            stages_dir=ns.stages_dir, executor=ns.executor, slurm=slurm_options(ns),
                            max_requeues=ns.max_requeues)
    if result.preempted:
        return REQUEUE_EXIT_CODE
    return 0 if result.ok else 1


def add_parsers(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="the whole tiny study on synthetic data: stages 0-2, six RL arms, report")
    demo.add_argument("--out", default="runs/demo", help="output folder (default runs/demo)")
    demo.add_argument("--workers", type=int, default=2, help="parallel worker processes for the RL arms")
    demo.add_argument("--no-progress", action="store_true", help="hide progress bars")
    demo.set_defaults(func=cmd_demo)

    exp = sub.add_parser("experiment", help="run a study (experiments/*.yaml): arms x seeds, shared stages cached")
    exp_sub = exp.add_subparsers(dest="experiment_command", required=True)
    for name, text in (("run", "run the study's arms x seeds (skips complete runs, resumes interrupted ones)"),
                       ("list", "show the arms x seeds, their stage runs (shared ones marked) and status")):
        p = exp_sub.add_parser(name, help=text)
        p.add_argument("file", help="study YAML, e.g. experiments/table4_rl_ablation.yaml")
        p.add_argument("--out", default=None, help="output folder (default runs/<study>-<preset>)")
        p.add_argument("--seeds", default=None, help="comma-separated seeds (default: the study's)")
        p.add_argument("--arms", default=None, help="comma-separated arm names (default: all)")
        p.add_argument("--preset", default=None, help="preset YAML replacing the study's base: preset")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a key of the merged study, e.g. common.data.annotation=/x.json (repeatable)")
        p.add_argument("--stages-dir", default=None, metavar="DIR",
                       help="keep stage runs in DIR (default OUT/stages); studies given the same DIR share every "
                            "stage run whose key agrees, e.g. one warm-up and SFT per seed for all tables")
        if name == "run":
            p.add_argument("--workers", type=int, default=2, help="parallel worker processes (default 2)")
            p.add_argument("--launcher", default=None, metavar="CMD",
                           help='run warm-up, SFT and RL as `CMD -m harness.cli train ...`, e.g. "torchrun '
                                '--nproc_per_node 8" (data parallel over the GPUs; needs --workers 1; with '
                                '--executor slurm: inside each job)')
            add_executor_args(p)
            p.add_argument("--max-requeues", type=int, default=3, metavar="N",
                           help="resubmit a stage run preempted by a stop signal (SIGTERM / SIGUSR1 to its worker) "
                                "up to N times, resuming from its checkpoint (default 3); a signal to the runner "
                                "itself stops the experiment with exit status 75 (rerun to resume)")
            p.add_argument("--until-decided", action="store_true",
                           help="run seeds in rounds (the study's decide.looks) until every declared contrast is "
                                "better, worse or equivalent (sequential.json); decide.rule anytime (default): "
                                "every look at alpha, a later call may raise --max-seeds; fixed_n: alpha spent "
                                "over the planned looks, a changed plan refused")
            p.add_argument("--max-seeds", type=int, default=None, metavar="K",
                           help="with --until-decided: stop after K seeds (without decide.looks: looks 3, 5, 8, "
                                "... up to K)")
        p.set_defaults(func=cmd_experiment)
    st = exp_sub.add_parser("status", help="an experiment's runs and stage runs with their status; for --executor "
                                           "slurm, each job's queue state (squeue)")
    st.add_argument("dir", metavar="DIR", help="the experiment folder (the one with index.json)")
    st.set_defaults(func=cmd_experiment)
