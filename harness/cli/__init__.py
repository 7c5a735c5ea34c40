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
  regbench experiment run FILE --executor slurm [--sbatch partition=gpu] [--max-resubmits 3] [...]
  regbench experiment list FILE [--out DIR] [--preset P] [--set k=v]
  regbench experiment status DIR
  regbench compare FIRST_DIR OTHER_DIR [--seeds 0,1 --other-seeds 2,3] [--delta gold_f1=0.02] [--json F]
  regbench search run FILE [--n-trials N] [--out DIR] [--workers 1] [--preset P] [--set k=v] [--storage URL]
  regbench search report OUT [--dest DIR]
  regbench search confirm OUT [--top 3] [--seeds 0,1,2] [--workers 2]

CONFIG is a YAML file over the defaults of harness/config/ (see experiments/); `key.sub=value` overrides
any field (value parsed as YAML), e.g. `train.epochs=2 out_dir=runs/x`. `regbench config show` prints every
field with its help and source.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from harness.cli import report_commands, search_commands, stage_commands, study_commands, tool_commands
from harness.config import ConfigError
from harness.experiments import die_with_parent_if_launched
from harness.parallel.allocator import keep_freed_memory
from harness.runs.durable import DiskFullError, disk_full_line, is_disk_full
from harness.runs.preemption import REQUEUE_EXIT_CODE, Preempted
from harness.runs.worker_errors import original_message

COMMAND_GROUPS = (stage_commands, tool_commands, report_commands, study_commands, search_commands)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="regbench",
        description="KL-regularizer benchmark for GRPO fine-tuning of VLMs on chest X-ray report generation.",
    )
    parser.add_argument("--debug", action="store_true",
                        help="on an error, print the full traceback (may also be given after the subcommand)")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in COMMAND_GROUPS:  # each module registers its commands, every one with set_defaults(func=...)
        group.add_parsers(sub)
    return parser


def error_line(e: BaseException) -> str:
    """One line for any error: the message (which names the file/key/value and what to do), its first line if
    it has several; errors that are not ours also say their type."""
    message = str(e)
    inner = original_message(message)  # a DataLoader worker's error: its own message, not torch's wrapper
    text = " ".join((message if inner is None else inner).split("\n")[0].split()) or type(e).__name__
    if isinstance(e, DiskFullError):
        return " ".join(e.strerror.split()) if e.strerror else text
    if is_disk_full(e):  # a full disk no writer named: the path the OS gave, and what to do
        return disk_full_line(e)
    if isinstance(e, ConfigError | FileNotFoundError | ValueError | RuntimeError) and not isinstance(
            e, UnicodeDecodeError):
        return text
    return f"{type(e).__name__}: {text}"


def main(argv: list[str] | None = None) -> int:
    die_with_parent_if_launched()  # a rank of a launched stage: die with the launcher (harness/experiments/workers.py)
    keep_freed_memory()  # fewer page faults in every step (harness/parallel/allocator.py)
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
    except Preempted as e:  # a stop signal: the stage wrote its checkpoint; the scheduler may requeue the command
        print(f"regbench: {e}", file=sys.stderr)
        return REQUEUE_EXIT_CODE
    except KeyboardInterrupt:
        print("regbench: interrupted (rerun the same command to resume)", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - every error becomes one line; --debug shows the traceback
        if debug:
            traceback.print_exc()
        more = "" if debug else " (--debug shows the traceback)"
        print(f"regbench: error: {error_line(e)}{more}", file=sys.stderr)
        return 2
    finally:
        if "torch.distributed" in sys.modules:  # a torchrun / accelerate launch: leave the process group
            # lazy: start-up cost (torch)
            from harness.parallel.distributed import finalize

            finalize()
