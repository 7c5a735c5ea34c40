"""`doctor` (what this machine has) and `config show` (a resolved config with each field's help)."""

from __future__ import annotations

import argparse
import json

from harness.cli.args import add_config_args, split_config_args
from harness.config import ConfigError, load_config


def cmd_doctor(ns) -> int:
    from harness.doctor import doctor_configs, format_report, run_doctor

    config, overrides = split_config_args(ns.args)  # an experiments preset is resolved for each of its stages
    report = run_doctor(*doctor_configs(config, overrides))
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
        config, overrides = split_config_args(ns.args)
        cfg = load_config(config, overrides, stage=ns.stage)
        what = " ".join(ns.args) or "defaults"
        what += f", stage '{ns.stage}'" if ns.stage else ""
    print(commented_yaml(cfg, header=f"regbench resolved config ({what}); each field's help is the comment "
                                     "above it"), end="")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    doctor = sub.add_parser("doctor", help="GPUs, package versions, weights present, presets that can run here")
    add_config_args(doctor)
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
