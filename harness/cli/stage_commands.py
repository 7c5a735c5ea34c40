"""`data synth`, `classifier train`, `train {pretrain,warmup,sft,rl}`, `eval`, `export`: one stage run each."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.cli.args import add_config_args, stage_config
from harness.config import ConfigError
from harness.constants import MIN_IMAGE_SIZE
from harness.data.phantom import PhantomConfig, synthesize
from harness.runs import preemption
from harness.runs.records import RunDir
from harness.runs.state import check_out_dir
from harness.stages.eval_out import finished_evaluation, predictions_file
from harness.stages.paths import base_dir, uses_tiny_base


def cmd_data_synth(ns) -> int:
    # The options by their own names, then the folder: nothing is created before all of them pass.
    for option, value, low in (("--n", ns.n, 1), ("--seed", ns.seed, 0), ("--image-size", ns.image_size,
                                                                           MIN_IMAGE_SIZE)):
        if value < low:
            raise ConfigError(f"{option} = {value} must be >= {low}")
    check_out_dir(Path(ns.out), "--out")
    with preemption.handling():  # a stop signal: the images so far are kept, the rerun draws the rest (exit 75)
        cfg = PhantomConfig(n=ns.n, seed=ns.seed, image_size=ns.image_size, report_variation=ns.report_variation)
        path = synthesize(Path(ns.out), cfg)
    print(f"wrote {path}")
    return 0


def cmd_classifier_train(ns) -> int:
    # lazy: start-up cost (torch)
    from harness.stages.classifier import run_classifier_training

    out = run_classifier_training(stage_config(ns, "classifier"), progress=not ns.no_progress)
    print(f"classifier: {out}")
    return 0


def prepare_base(cfg, stage: str, progress: bool) -> None:
    """The one explicit stage-0 call of a stage command: a stage that starts from the tiny base (no init_from,
    no model.path) gets it built first (cached per machine; concurrent processes of a launch wait for one
    build). The cheap input checks run before, so a typo does not cost a stage 0."""
    # lazy: start-up cost (torch)
    from harness.checks.preflight import check_inputs, check_names, check_run_folder
    from harness.stages.pretrain import build_base

    if cfg.init_from or not uses_tiny_base(cfg):
        return
    check_names(cfg, stage)
    check_inputs(cfg, stage)
    check_run_folder(cfg, stage)
    if not (base_dir(cfg) / "DONE").is_file() and cfg.data.annotation:
        # A user's data set is read (and refused) in seconds, before minutes of stage 0.
        # lazy: start-up cost (torch)
        from harness.stages.common import load_splits, require_train
        from harness.stages.loading import probe_user_reward

        splits = require_train(load_splits(cfg, progress), cfg, stage)
        if stage == "rl":  # a user reward that fails on the data is refused before stage 0 too
            probe_user_reward(cfg.rl.reward, splits["train"])
    build_base(cfg, progress=progress)


def cmd_train(ns) -> int:
    cfg = stage_config(ns, "warmup" if ns.stage == "pretrain" else ns.stage)
    progress = not ns.no_progress
    # The handlers span stage 0 and the stage, so a signal between the two is honoured too.
    with preemption.handling(cfg.train.preempt_signals):
        if ns.stage != "pretrain":
            prepare_base(cfg, ns.stage, progress)
            # A signal in stage 0's last step let stage 0 complete (cached); the stage itself is not started.
            preemption.check(f"train {ns.stage} {cfg.out_dir}", "stage 0 is complete and cached")
        out = _run_stage(cfg, ns.stage, progress)
    print(f"{ns.stage}: {out}")
    return 0


def _run_stage(cfg, stage: str, progress: bool):
    if stage == "pretrain":
        # lazy: start-up cost (torch)
        from harness.stages.pretrain import build_base

        return build_base(cfg, progress=progress)
    if stage == "warmup":
        # lazy: start-up cost (torch)
        from harness.stages.warmup import run_warmup

        return run_warmup(cfg, progress=progress)
    if stage == "sft":
        # lazy: start-up cost (torch)
        from harness.stages.sft import run_sft

        return run_sft(cfg, progress=progress)
    if stage == "rl":
        # lazy: start-up cost (pandas, torch, transformers)
        from harness.stages.rl import run_rl

        return run_rl(cfg, progress=progress)
    raise ConfigError(f"unknown stage {stage}")  # pragma: no cover - argparse restricts choices


def cmd_eval(ns) -> int:
    # lazy: start-up cost (pandas, torch)
    from harness.checks.preflight import check_split
    from harness.stages.evaluate import evaluate_model

    check_split(ns.split, "--split")
    cfg = stage_config(ns, "eval")
    # lazy: start-up cost (torch)
    from harness.checks.preflight import check_device

    check_device(cfg.model)
    if ns.out:
        check_out_dir(Path(ns.out), "--out")
        done = finished_evaluation(ns.out, ns.model, ns.split)
        if done is not None:  # a rerun: nothing decoded, nothing written (issue 49)
            kept = predictions_file(ns.out, done.get("stage"), ns.split).name
            print(f"eval: --out {ns.out} already holds this evaluation ({done.get('split')} split, "
                  f"{done.get('stage')} model: evals.jsonl, {kept}); nothing written, the stored scores follow; "
                  "give another --out to evaluate again", file=sys.stderr)
            print(json.dumps({k: v for k, v in done.items() if k != "per_label"}, indent=2))
            return 0
    if not Path(ns.model).exists():  # a hub id only from the local cache: never a download, named as --model
        # lazy: start-up cost (torch)
        from harness.models.checkpoint import local_model_folder

        local_model_folder(ns.model, "--model")
    # The --out folder is opened once the scores exist: a failed evaluation leaves it as it was.
    run = (lambda: RunDir(ns.out)) if ns.out else None
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
    # lazy: start-up cost (torch)
    from harness.models.checkpoint import export_merged

    out = export_merged(ns.model, ns.out, base_path=ns.base)
    print(f"exported: {out} (Qwen2_5_VLForConditionalGeneration.from_pretrained and AutoProcessor load it)")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser("data", help="data sets").add_subparsers(dest="data_command", required=True)
    synth = data.add_parser("synth", help="write the synthetic chest X-ray set (R2Gen annotation.json + PNGs)")
    synth.add_argument("--n", type=int, default=1500, help="number of studies (default 1500)")
    synth.add_argument("--seed", type=int, default=0, help="random seed; same seed -> identical files")
    synth.add_argument("--out", required=True, help="output folder")
    synth.add_argument("--image-size", type=int, default=128, help="image side in pixels (default 128)")
    synth.add_argument("--report-variation", choices=("none", "low", "high"), default="none",
                       help="report language variation (data.report_variation; default none, the plain grammar)")
    synth.set_defaults(func=cmd_data_synth)

    clf = sub.add_parser("classifier", help="the disease classifier").add_subparsers(dest="clf_command",
                                                                                     required=True)
    clf_train = clf.add_parser("train", help="train the 14-observation classifier and choose thresholds")
    add_config_args(clf_train)
    clf_train.set_defaults(func=cmd_classifier_train)

    train = sub.add_parser("train", help="run a training stage")
    train.add_argument("stage", choices=["pretrain", "warmup", "sft", "rl"],
                       help="pretrain: stage 0 (tiny only); warmup: stage 1; sft: stage 2; rl: stage 3")
    add_config_args(train)
    train.set_defaults(func=cmd_train)

    ev = sub.add_parser("eval", help="decode a split greedily and score it")
    ev.add_argument("--model", required=True, help="a stage's model folder (…/model) or a base-model folder")
    ev.add_argument("--split", default="test", help="train, val or test (default test)")
    ev.add_argument("--out", default=None, help="run folder to append evals.jsonl and predictions to")
    ev.add_argument("--per-label", action="store_true", help="also print the per-observation CE table (stderr)")
    add_config_args(ev, restart=False)
    ev.set_defaults(func=cmd_eval)

    exp_model = sub.add_parser("export", help="write a stage's model as one merged transformers folder")
    exp_model.add_argument("model", help="a stage's model folder (RUN/model)")
    exp_model.add_argument("out", help="output folder")
    exp_model.add_argument("--base", default=None, help="the base model's folder, if not where spec.json says")
    exp_model.set_defaults(func=cmd_export)
