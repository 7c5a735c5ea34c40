"""The contract between a preempted stage run and whoever runs it (the experiment runner, the Slurm executor).

A stage that is asked to stop (SIGTERM / SIGUSR1 from a scheduler; `train.preempt_signals`) finishes its current
step, writes a checkpoint and exits with REQUEUE_EXIT_CODE; the runner then starts the same run again, which
resumes from that checkpoint. 75 is EX_TEMPFAIL in sysexits.h: "try again later", distinct from a failure (1) and a
usage error (2).

The pieces: `handling(signals)` installs handlers that only set a flag (a step is never cut in the middle);
the training loops ask `stop_agreed(dist)` between steps (every process of a launch takes part, so all ranks stop
after the same step, as they agree on skipping a step in harness/parallel/updater.py); a loop that stops writes
its checkpoint, `record`s the preemption in the run folder (preemptions.jsonl, one line each) and raises
`Preempted`, which the command line turns into exit status 75 and the experiment runner into a resubmission.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from harness.config.names import signal_numbers
from harness.runs.records import append_line_durable, dumps, read_jsonl
from harness.runs.schema import PREEMPTIONS_FILE

REQUEUE_EXIT_CODE = 75
DEFAULT_SIGNALS = ("SIGTERM", "SIGUSR1")

_received: list[str] = []  # the names of the signals received since the last clear(), in order


class Preempted(Exception):  # noqa: N818 - it is a request, not an error
    """A stage stopped on request after a step, with its checkpoint written: run it again to resume."""

    def __init__(self, what: str, step: int | None = None, signal_name: str | None = None,
                 kept: str = "checkpoint written"):
        self.step, self.signal_name = step, signal_name
        at = f" after step {step}" if step is not None else ""
        by = f" by {signal_name}" if signal_name else ""
        super().__init__(f"{what}: preempted{by}{at}, {kept}; rerun the same command to resume "
                         f"(exit status {REQUEUE_EXIT_CODE} asks the scheduler to requeue)")


def _handler(signum, _frame) -> None:
    name = signal.Signals(signum).name
    first = not _received
    _received.append(name)
    if first:
        print(f"[preempt] {name} received (pid {os.getpid()}): finishing the current step, then checkpoint and exit "
              f"{REQUEUE_EXIT_CODE}", flush=True)


@contextlib.contextmanager
def handling(names: Iterable[str] = DEFAULT_SIGNALS) -> Iterator[None]:
    """Within the block, the signals `names` set the stop flag instead of ending the process; the earlier
    handlers come back afterwards. Outside the main thread (where Python cannot install handlers) a no-op."""
    sigs = signal_numbers(names)
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, _handler) for s in sigs}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def install(names: Iterable[str] = DEFAULT_SIGNALS) -> None:
    """Handlers for the rest of the process's life (a worker process of the experiment runner)."""
    if threading.current_thread() is threading.main_thread():
        for s in signal_numbers(names):
            signal.signal(s, _handler)


def requested() -> str | None:
    """The name of the first stop signal received (since the last clear), or None."""
    return _received[0] if _received else None


def request(name: str = "SIGTERM") -> None:
    """Ask for a stop as a signal would (tests, and the runner passing its own stop on to an inline stage)."""
    _received.append(name)


def clear() -> None:
    _received.clear()


def check(what: str, kept: str = "nothing more to write", step: int | None = None) -> None:
    """A safe point between two units of work (images, decode batches, trials, stages): raise Preempted when a
    stop signal has come, so the caller starts nothing new. `kept` says what the rerun resumes from."""
    if requested() is not None:
        raise Preempted(what, step, requested(), kept)


def stop_agreed(dist=None) -> bool:
    """Whether to stop now: on one process, whether a stop signal came; under a launch, whether one came to any
    process (a sum over processes, called by all of them at the same point of the loop, so every rank stops after
    the same step)."""
    local = requested() is not None
    if dist is None or not getattr(dist, "active", False):
        return local
    # lazy: start-up cost (torch)
    import torch

    return float(dist.sum(torch.tensor([float(local)]))[0]) > 0


def record(run_dir: str | Path, stage: str, step: int | None, checkpoint: str | Path | None = None) -> int:
    """Append this preemption to the run folder's preemptions.jsonl (fsynced); how many it now lists."""
    path = Path(run_dir) / PREEMPTIONS_FILE
    row = {"stage": stage, "step": step, "signal": requested(), "pid": os.getpid(),
           "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "checkpoint": str(checkpoint) if checkpoint else None}
    append_line_durable(path, dumps(row) + "\n")
    return count(run_dir)


def count(run_dir: str | Path) -> int:
    """How often the run in `run_dir` was preempted (the lines of its preemptions.jsonl)."""
    return len(read_jsonl(Path(run_dir) / PREEMPTIONS_FILE))


def stop(run_dir: str | Path, stage: str, step: int | None, checkpoint: str | Path | None = None,
         main: bool = True) -> Preempted:
    """What a loop does once its checkpoint is written: record the preemption (rank 0) and return the exception
    to raise."""
    name = requested()
    if main:
        record(run_dir, stage, step, checkpoint)
    return Preempted(f"{stage} run {run_dir}", step, name)


def handled(fn: Callable) -> Callable:
    """`fn` run with the handlers of the default stop signals installed (a driver of many runs, such as a search:
    it has no config of its own to name them)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with handling():
            return fn(*args, **kwargs)

    return wrapper
