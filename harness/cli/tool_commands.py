"""`doctor` (what this machine has) and `config show` (a resolved config with each field's help)."""

from __future__ import annotations

import argparse
import json

from harness.cli.args import add_config_args, split_config_args
from harness.cli.doctor import doctor_configs, format_plans, format_report, preset_plans, run_doctor
from harness.config import ConfigError, load_config
from harness.config.describe import commented_yaml
from harness.config.loading import load_yaml
from harness.experiments import load_study, resolve_config


def cmd_doctor(ns) -> int:
    for flag, value in (("--world-size", ns.world_size), ("--gpu-mem-gib", ns.gpu_mem_gib)):
        if value is not None and value <= 0:
            raise ConfigError(f"doctor {flag} must be > 0, got {value:g}")
    config, overrides = split_config_args(ns.args)
    doc = load_yaml(config) if config else {}
    experiment = isinstance(doc, dict) and any(k in doc for k in ("common", "stages"))
    # An experiments preset is resolved for each of its stages (what each needs, its memory plan); the general
    # checks read its RL stage's view.
    cfg, stages = doctor_configs(config, overrides)
    report = run_doctor(cfg, stages)
    plans = preset_plans(config, overrides, doc, ns.world_size, ns.gpu_mem_gib, report.gpus) if experiment else None
    if ns.json:
        print(json.dumps({**report.as_dict(), **({"memory_plan": plans} if plans else {})}, indent=2))
    else:
        print(format_report(report) + ("\n" + format_plans(plans) if plans else ""))
    return 0 if not plans or all(p["fits"] for p in plans["stages"].values()) else 1


def cmd_config_show(ns) -> int:
    if ns.study:
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
    doctor = sub.add_parser("doctor", help="GPUs, package versions, weights present, presets that can run here; "
                                           "with an experiments preset, its per-GPU memory plan for each stage "
                                           "(exit status 1 when a stage does not fit)")
    add_config_args(doctor)
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument("--gpu-mem-gib", type=float, default=None,
                        help="GPU memory the memory plan of an experiments preset is checked against (default: the "
                             "smallest GPU here, else 79.1 GiB: an 80 GB A100/H100 as torch reports it)")
    doctor.add_argument("--world-size", type=int, default=None,
                        help="processes of warm-up / SFT / RL in the memory plan (default: the preset's "
                             "resources.<stage>.gpus x nodes)")
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
