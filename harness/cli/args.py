"""Arguments every command group shares: CONFIG + key=value overrides, --restart, comma lists."""

from __future__ import annotations

import argparse

from harness.config import ConfigError, load_config
from harness.experiments.slurm import SlurmOptions
from harness.runs.state import request_restart


def split_config_args(items: list[str]) -> tuple[str | None, list[str]]:
    """`[CONFIG] key=value ...` -> (CONFIG or None, overrides)."""
    config, overrides = None, []
    for item in items:
        if "=" in item:
            overrides.append(item)
        elif config is None:
            config = item
        else:
            raise ConfigError(f"unexpected argument '{item}': give one CONFIG file, then key=value overrides")
    return config, overrides


def add_config_args(p: argparse.ArgumentParser, restart: bool = True) -> None:
    p.add_argument("args", nargs="*", metavar="CONFIG | key=value",
                   help="optional YAML config file, then dotted overrides such as train.epochs=2 (every field "
                        "with its help: regbench config show)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    if restart:
        p.add_argument("--restart", action="store_true",
                       help="discard what out_dir holds (records, checkpoint, model) and run the stage from the start;"
                            " without it, a folder of another stage or config is refused")


def stage_config(ns, stage: str | None = None):
    """The resolved, checked config of a stage command (names checked before anything heavy is built)."""
    # lazy: start-up cost (torch)
    from harness.checks.preflight import check_names, check_scorers

    config, overrides = split_config_args(ns.args)
    cfg = load_config(config, overrides, stage=stage)
    check_names(cfg, stage)  # unknown reward / metric names fail here, before any model or data set is built
    check_scorers(cfg, stage)  # and missing CheXbert / RadGraph weights, before stage 0, a decode or a write
    request_restart(bool(getattr(ns, "restart", False)))
    return cfg


def int_list(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise ConfigError(f"--seeds must be comma-separated integers, got '{text}'") from e


def name_list(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def add_executor_args(p: argparse.ArgumentParser) -> None:
    """--executor local|slurm and its options (experiment run, search run, search confirm)."""
    p.add_argument("--executor", choices=("local", "slurm"), default="local",
                   help="local: worker processes on this machine (default); slurm: every stage run one Slurm job "
                        "with the preset's resources, inputs as afterok dependencies, interrupted jobs "
                        "resubmitted (docs/running.md, 'On a Slurm cluster')")
    p.add_argument("--sbatch", action="append", default=[], metavar="KEY=VALUE",
                   help="with --executor slurm: one more sbatch option for every job, e.g. partition=gpu, "
                        "account=..., qos=... (repeatable)")
    p.add_argument("--max-resubmits", type=int, default=3, metavar="N",
                   help="with --executor slurm: submit an interrupted (preempted, timed out, killed) job again at "
                        "most N times (default 3)")


def slurm_options(ns):
    """--executor slurm's options from the command line (None for the local executor)."""
    if ns.executor != "slurm":
        if ns.sbatch:
            raise ConfigError("--sbatch goes with --executor slurm")
        return None

    sbatch = {}
    for item in ns.sbatch:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--sbatch '{item}' must look like KEY=VALUE, e.g. partition=gpu or qos=high")
        sbatch[key.strip().lstrip("-")] = value
    if ns.max_resubmits < 0:
        raise ConfigError(f"--max-resubmits must be >= 0, got {ns.max_resubmits}")
    return SlurmOptions(sbatch=sbatch, max_resubmits=ns.max_resubmits)
