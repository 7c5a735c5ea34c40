"""The `regbench` command line.

  regbench data synth --n N --seed S --out DIR
  regbench classifier train [CONFIG.yaml] [key.sub=value ...]
  regbench train {pretrain,warmup,sft,rl} [CONFIG.yaml] [key.sub=value ...]
  regbench eval [CONFIG.yaml] --model DIR [--split test] [key.sub=value ...]
  regbench export RUN/model OUT [--base DIR]
  regbench doctor [CONFIG.yaml] [key.sub=value ...] [--json]
  regbench config show [CONFIG.yaml] [key.sub=value ...] [--stage S]
  regbench config show --study FILE --arm NAME [--stage S] [--seed K] [--preset P] [--set k=v]
  regbench demo [--out DIR]
  regbench experiment run FILE [--workers 2] [--out DIR] [--seeds 0,1] [--arms a,b] [--preset P] [--set k=v]
  regbench experiment list FILE [--out DIR] [--preset P] [--set k=v]
  regbench search run FILE [--n-trials N] [--out DIR] [--workers 1] [--preset P] [--set k=v] [--storage URL]
  regbench search report OUT [--dest DIR]
  regbench search confirm OUT [--top 3] [--seeds 0,1,2] [--workers 2]

CONFIG is a YAML file over the defaults of harness/config/ (see experiments/); `key.sub=value` overrides
any field (value parsed as YAML), e.g. `train.epochs=2 out_dir=runs/x`. `regbench config show` prints every
field with its help and source.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.config import ConfigError, load_config


def _split_config_args(items: list[str]) -> tuple[str | None, list[str]]:
    config, overrides = None, []
    for item in items:
        if "=" in item:
            overrides.append(item)
        elif config is None:
            config = item
        else:
            raise ConfigError(f"unexpected argument '{item}': give one CONFIG file, then key=value overrides")
    return config, overrides


def _add_config_args(p: argparse.ArgumentParser, restart: bool = True) -> None:
    p.add_argument("args", nargs="*", metavar="CONFIG | key=value",
                   help="optional YAML config file, then dotted overrides such as train.epochs=2 (every field "
                        "with its help: regbench config show)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    if restart:
        p.add_argument("--restart", action="store_true",
                       help="discard what out_dir holds (records, checkpoint, model) and run the stage from the start;"
                            " without it, a folder of another stage or config is refused")


def _cfg(ns, stage: str | None = None):
    from harness.preflight import check_names
    from harness.runs.state import request_restart

    config, overrides = _split_config_args(ns.args)
    cfg = load_config(config, overrides, stage=stage)
    check_names(cfg, stage)  # unknown reward / metric names fail here, before any model or data set is built
    request_restart(bool(getattr(ns, "restart", False)))
    return cfg


def cmd_data_synth(ns) -> int:
    from harness.data.phantom import PhantomConfig, synthesize

    path = synthesize(Path(ns.out), PhantomConfig(n=ns.n, seed=ns.seed, image_size=ns.image_size))
    print(f"wrote {path}")
    return 0


def cmd_classifier_train(ns) -> int:
    from harness.stages.classifier import run_classifier_training

    out = run_classifier_training(_cfg(ns, "classifier"), progress=not ns.no_progress)
    print(f"classifier: {out}")
    return 0


def cmd_train(ns) -> int:
    cfg = _cfg(ns, "warmup" if ns.stage == "pretrain" else ns.stage)
    progress = not ns.no_progress
    if ns.stage == "pretrain":
        from harness.stages.pretrain import build_base

        out = build_base(cfg, progress=progress)
    elif ns.stage == "warmup":
        from harness.stages.warmup import run_warmup

        out = run_warmup(cfg, progress=progress)
    elif ns.stage == "sft":
        from harness.stages.sft import run_sft

        out = run_sft(cfg, progress=progress)
    elif ns.stage == "rl":
        from harness.stages.rl import run_rl

        out = run_rl(cfg, progress=progress)
    else:  # pragma: no cover - argparse restricts choices
        raise ConfigError(f"unknown stage {ns.stage}")
    print(f"{ns.stage}: {out}")
    return 0


def cmd_eval(ns) -> int:
    from harness.preflight import check_split
    from harness.runs.records import RunDir
    from harness.stages.evaluate import evaluate_model

    check_split(ns.split, "--split")
    cfg = _cfg(ns, "eval")
    run = RunDir(ns.out) if ns.out else None
    scores = evaluate_model(cfg, ns.model, ns.split, run=run, progress=not ns.no_progress)
    per_label = scores.pop("per_label", None)
    if per_label and ns.per_label:
        print("| observation | precision | recall | f1 | support |", file=sys.stderr)
        print("|---|---|---|---|---|", file=sys.stderr)
        for name, row in per_label.items():
            print(f"| {name} | {row['precision']:.3f} | {row['recall']:.3f} | {row['f1']:.3f} | {row['support']} |",
                  file=sys.stderr)
    print(json.dumps(scores, indent=2))
    return 0


def cmd_export(ns) -> int:
    from harness.models.checkpoint import export_merged

    out = export_merged(ns.model, ns.out, base_path=ns.base)
    print(f"exported: {out} (Qwen2_5_VLForConditionalGeneration.from_pretrained and AutoProcessor load it)")
    return 0


def cmd_doctor(ns) -> int:
    from harness.doctor import format_report, run_doctor

    report = run_doctor(_cfg(ns))
    print(json.dumps(report.as_dict(), indent=2) if ns.json else format_report(report))
    return 0


def cmd_config_show(ns) -> int:
    from harness.config.describe import commented_yaml

    if ns.study:
        from harness.experiments import load_study, resolve_config

        if ns.args:
            raise ConfigError("config show --study takes no CONFIG or key=value arguments; use --set on the study")
        if not ns.arm:
            raise ConfigError("config show --study needs --arm NAME")
        study = load_study(ns.study, preset=ns.preset, sets=ns.set)
        arm = study.arm(ns.arm)
        stage = ns.stage or arm.pipeline[-1]
        seed = study.seeds[0] if ns.seed is None else ns.seed
        cfg = resolve_config(study, arm, stage, seed)
        what = f"{study.path.name}, arm '{arm.name}', stage '{stage}', seed {seed}"
    else:
        for flag in ("arm", "seed", "preset"):
            if getattr(ns, flag) not in (None, []):
                raise ConfigError(f"config show --{flag} needs --study FILE")
        if ns.set:
            raise ConfigError("config show --set needs --study FILE; give key=value arguments instead")
        config, overrides = _split_config_args(ns.args)
        cfg = load_config(config, overrides, stage=ns.stage)
        what = " ".join(ns.args) or "defaults"
        what += f", stage '{ns.stage}'" if ns.stage else ""
    print(commented_yaml(cfg, header=f"regbench resolved config ({what}); each field's help is the comment "
                                     "above it"), end="")
    return 0


def cmd_demo(ns) -> int:
    from harness.demo import run_demo
    from reports.build import build_report

    results = run_demo(Path(ns.out), progress=not ns.no_progress, workers=ns.workers)
    from reports.demo_verdict import demo_verdict

    verdict = demo_verdict(Path(ns.out))
    if verdict:  # the over-optimisation contrast with its interval and p (issue 12)
        print(f"\n{verdict}\n", flush=True)
        results.write_text(results.read_text() + f"\n{verdict}\n")
    print("[demo] building the report", flush=True)
    print(f"report: {build_report(Path(ns.out))}")
    return 0


def _int_list(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise ConfigError(f"--seeds must be comma-separated integers, got '{text}'") from e


def _name_list(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def cmd_experiment(ns) -> int:
    from harness.experiments import build_plan, describe_plan, load_study, run_experiment

    study = load_study(ns.file, preset=ns.preset, sets=ns.set)
    out = Path(ns.out) if ns.out else Path("runs") / f"{study.name}-{study.preset}"
    seeds, arms = _int_list(ns.seeds), _name_list(ns.arms)
    if ns.experiment_command == "list":
        for a in arms or []:
            study.arm(a)
        print(describe_plan(build_plan(study, out, seeds, ns.stages_dir), seeds=seeds, arms=arms))
        return 0
    result = run_experiment(study, out, workers=ns.workers, seeds=seeds, arms=arms, launcher=ns.launcher,
                            stages_dir=ns.stages_dir)
    return 0 if result.ok else 1


def cmd_search(ns) -> int:
    if ns.search_command == "report":
        from reports.search import build_search_report

        dest = build_search_report(Path(ns.out), ns.dest, storage=ns.storage)
        print(f"search report: {dest / 'README.md'}")
        return 0
    if ns.search_command == "confirm":
        from harness.search.run import run_confirmation

        result = run_confirmation(Path(ns.out), ns.top, _int_list(ns.seeds), workers=ns.workers,
                                  launcher=ns.launcher)
        if ns.report:
            from reports.build import build_report

            print(f"report: {build_report(result.index_path.parent)}")
        return 0 if result.ok else 1
    from harness.search.file import load_search
    from harness.search.run import run_search

    search = load_search(ns.file, preset=ns.preset, sets=ns.set)
    out = Path(ns.out) if ns.out else Path("runs") / f"{search.name}-{search.preset}"
    try:
        result = run_search(search, out, n_trials=ns.n_trials, workers=ns.workers, launcher=ns.launcher,
                            stages_dir=ns.stages_dir, parallel_trials=ns.parallel_trials, storage=ns.storage)
    except RuntimeError as e:  # trials failing in a row: the message says why and how to continue
        print(f"regbench: error: {e}", file=sys.stderr)
        return 1
    if ns.report:
        from reports.search import build_search_report

        dest = build_search_report(out, storage=ns.storage)
        print(f"search report: {dest / 'README.md'}")
    return 0 if result.best else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="regbench",
        description="KL-regularizer benchmark for GRPO fine-tuning of VLMs on chest X-ray report generation.",
    )
    parser.add_argument("--debug", action="store_true",
                        help="on an error, print the full traceback (may also be given after the subcommand)")
    sub = parser.add_subparsers(dest="command", required=True)

    data = sub.add_parser("data", help="data sets").add_subparsers(dest="data_command", required=True)
    synth = data.add_parser("synth", help="write the synthetic chest X-ray set (R2Gen annotation.json + PNGs)")
    synth.add_argument("--n", type=int, default=1500, help="number of studies (default 1500)")
    synth.add_argument("--seed", type=int, default=0, help="random seed; same seed -> identical files")
    synth.add_argument("--out", required=True, help="output folder")
    synth.add_argument("--image-size", type=int, default=128, help="image side in pixels (default 128)")
    synth.set_defaults(func=cmd_data_synth)

    clf = sub.add_parser("classifier", help="the disease classifier").add_subparsers(dest="clf_command",
                                                                                     required=True)
    clf_train = clf.add_parser("train", help="train the 14-observation classifier and choose thresholds")
    _add_config_args(clf_train)
    clf_train.set_defaults(func=cmd_classifier_train)

    train = sub.add_parser("train", help="run a training stage")
    train.add_argument("stage", choices=["pretrain", "warmup", "sft", "rl"],
                       help="pretrain: stage 0 (tiny only); warmup: stage 1; sft: stage 2; rl: stage 3")
    _add_config_args(train)
    train.set_defaults(func=cmd_train)

    ev = sub.add_parser("eval", help="decode a split greedily and score it")
    ev.add_argument("--model", required=True, help="a stage's model folder (…/model) or a base-model folder")
    ev.add_argument("--split", default="test", help="train, val or test (default test)")
    ev.add_argument("--out", default=None, help="run folder to append evals.jsonl and predictions to")
    ev.add_argument("--per-label", action="store_true", help="also print the per-observation CE table (stderr)")
    _add_config_args(ev, restart=False)
    ev.set_defaults(func=cmd_eval)

    exp_model = sub.add_parser("export", help="write a stage's model as one merged transformers folder")
    exp_model.add_argument("model", help="a stage's model folder (RUN/model)")
    exp_model.add_argument("out", help="output folder")
    exp_model.add_argument("--base", default=None, help="the base model's folder, if not where spec.json says")
    exp_model.set_defaults(func=cmd_export)

    doctor = sub.add_parser("doctor", help="GPUs, package versions, weights present, presets that can run here")
    _add_config_args(doctor)
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(func=cmd_doctor)

    cfg_cmd = sub.add_parser("config", help="show the resolved config with each field's help") \
        .add_subparsers(dest="config_command", required=True)
    show = cfg_cmd.add_parser("show", help="print the resolved config as YAML, each field's help (meaning, range, "
                                           "source) as a comment above it; the output loads back as a CONFIG")
    show.add_argument("args", nargs="*", metavar="CONFIG | key=value",
                      help="optional YAML config file (or experiments/presets/*.yaml with --stage), then dotted "
                           "overrides such as train.epochs=2")
    show.add_argument("--stage", default=None, choices=["warmup", "classifier", "sft", "rl", "eval"],
                      help="the stage whose view of a preset / study to show (with --study: default the arm's "
                           "last stage)")
    show.add_argument("--study", default=None, metavar="FILE", help="a study YAML: show an arm's resolved config")
    show.add_argument("--arm", default=None, help="the arm of --study")
    show.add_argument("--seed", type=int, default=None, help="the seed (default the study's first)")
    show.add_argument("--preset", default=None, help="preset YAML replacing the study's base: preset")
    show.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="override a key of the merged study, e.g. common.rl.beta_max=0.2 (repeatable)")
    show.set_defaults(func=cmd_config_show)

    from reports.cli import add_subcommands

    add_subcommands(sub)

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
                                '--nproc_per_node 8" (data parallel over the GPUs; needs --workers 1)')
        p.set_defaults(func=cmd_experiment)

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
    p.add_argument("--no-report", dest="report", action="store_false", help="skip the report at the end")
    p.set_defaults(func=cmd_search)
    p = search_sub.add_parser("confirm", help="rerun the best trials and the preset's values over several seeds "
                                               "(OUT/confirm: an experiment with paired tests against the preset)")
    p.add_argument("out", help="the search's output folder")
    p.add_argument("--top", type=int, default=3, help="how many of the best complete trials (default 3)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    p.add_argument("--workers", type=int, default=2, help="parallel worker processes (default 2)")
    p.add_argument("--launcher", default=None, metavar="CMD", help="as for experiment run (needs --workers 1)")
    p.add_argument("--no-report", dest="report", action="store_false", help="skip the report at the end")
    p.set_defaults(func=cmd_search)
    p = search_sub.add_parser("report", help="trials table and Optuna plots of a search folder")
    p.add_argument("out", help="the search's output folder")
    p.add_argument("--dest", default=None, help="report folder (default OUT/search_report)")
    p.add_argument("--storage", default=None, metavar="URL", help="the search's Optuna storage (default: the "
                   "one OUT/search.json names)")
    p.set_defaults(func=cmd_search)
    return parser


def error_line(e: BaseException) -> str:
    """One line for any error: the message (which names the file/key/value and what to do), its first line if
    it has several; errors that are not ours also say their type."""
    text = " ".join(str(e).split("\n")[0].split()) or type(e).__name__
    if isinstance(e, ConfigError | FileNotFoundError | ValueError | RuntimeError) and not isinstance(
            e, UnicodeDecodeError):
        return text
    return f"{type(e).__name__}: {text}"


def main(argv: list[str] | None = None) -> int:
    from harness.experiments import die_with_parent_if_launched

    die_with_parent_if_launched()  # a rank of a launched stage: die with the launcher (harness/experiments/workers.py)
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # accepted anywhere on the line
    argv = [a for a in argv if a != "--debug"]
    # Options may sit between CONFIG/key=value arguments (`train rl cfg.yaml --no-progress a.b=1`): argparse
    # stops collecting a positional list at the first option, so collect the rest here.
    ns, extra = parser.parse_known_args(argv)
    if extra:
        if not hasattr(ns, "args") or any(e.startswith("-") for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        ns.args = list(ns.args) + extra
    try:
        return ns.func(ns)
    except KeyboardInterrupt:
        print("regbench: interrupted (rerun the same command to resume)", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - every error becomes one line; --debug shows the traceback
        if debug:
            import traceback

            traceback.print_exc()
        more = "" if debug else " (--debug shows the traceback)"
        print(f"regbench: error: {error_line(e)}{more}", file=sys.stderr)
        return 2
    finally:
        if "torch.distributed" in sys.modules:  # a torchrun / accelerate launch: leave the process group
            from harness.parallel.distributed import finalize

            finalize()


if __name__ == "__main__":
    sys.exit(main())
