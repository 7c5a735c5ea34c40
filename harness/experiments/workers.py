"""Executing plan nodes: stage-run locks, worker processes (one torch thread, a GPU slot each, dying with the
runner), the in-process executor for `workers = 1`, and launched multi-process stages.

Preemption (harness/runs/preemption.py): a stage asked to stop ends with `Preempted` after its checkpoint;
`execute_node` returns that as a `preempted` result (a launched stage: exit status 75, or a new line in its
preemptions.jsonl), which the runner resubmits. A worker process handles the stop signals from its start, so a
signal between two stages does not kill it; its stop flag is cleared after each node."""

from __future__ import annotations

import ctypes
import importlib
import multiprocessing
import os
import shlex
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import yaml

from harness.config import RunConfig, from_dict, to_dict
from harness.errors import RunPruned
from harness.parallel.allocator import keep_freed_memory
from harness.runs import preemption
from harness.runs.lock import RunLocked, acquire, release, scope
from harness.runs.records import atomic_write_text


def acquire_lock(run_dir: Path) -> str | None:
    """Mark a stage run as being executed by this runner (harness/runs/lock.py); None, or why another live process
    holds it. The stage itself, in a worker or under a launcher, joins the lock as a co-holder."""
    try:
        acquire(run_dir)
    except RunLocked as e:
        return str(e)
    return None


def release_lock(run_dir: Path) -> None:
    release(run_dir)


def resolve_function(spec: str | Callable) -> Callable:
    if callable(spec):  # a function object (in-process runs only: workers = 1, e.g. a search's pruning RL stage)
        return spec
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


# Seconds between looks at a stage run another runner holds (wait_for_locks).
LOCK_POLL_S = 2.0
# Torch threads of every stage run the runner executes (worker processes and workers = 1 alike).
WORKER_THREADS = 1


def gpu_slots(workers: int) -> list[str | None]:
    """The GPU each worker process gets: round robin over the visible GPUs (CUDA_VISIBLE_DEVICES, else all),
    so that `--workers 8` on an 8-GPU machine runs eight stage runs side by side, one per GPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip() and v.strip() != "-1"]
    else:
        # lazy: start-up cost (torch)
        import torch

        ids = [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    return [ids[i % len(ids)] for i in range(workers)] if ids else [None] * workers


def die_with_parent() -> None:
    """Linux: the kernel sends this process SIGKILL when its parent dies (kill -9 of the runner included), so no
    orphaned worker goes on writing a run folder that a restarted runner then takes over."""
    setter = death_signal_setter()
    if setter is None:
        return
    setter()
    if os.getppid() == 1:  # the parent died before the call above
        os._exit(1)


def death_signal_setter() -> Callable[[], None] | None:
    """A function that asks the kernel for SIGKILL when the calling process's parent dies (Linux; else None).
    Resolved here, in the parent, so that a child can call it between fork and exec without loading anything."""
    if not sys.platform.startswith("linux"):
        return None

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


# Set in a launched stage's environment: its processes (the launcher's ranks, running `harness.cli`) then die
# with their parent as well, so the whole launched tree goes when the runner does.
DIE_WITH_PARENT_ENV = "REGBENCH_DIE_WITH_PARENT"


def die_with_parent_if_launched() -> None:
    if os.environ.get(DIE_WITH_PARENT_ENV) == "1":
        die_with_parent()


_IN_WORKER = [False]  # set in a worker process of the pool (its stop flag is its own, cleared after each node)


def _init_worker(slots=None) -> None:
    die_with_parent()
    keep_freed_memory()  # a spawned worker starts with glibc's defaults (harness/parallel/allocator.py)
    _IN_WORKER[0] = True
    preemption.install()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    gpu = slots.get() if slots is not None else None
    if gpu is not None:  # before torch touches CUDA: this worker then sees one GPU, as cuda:0
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    # lazy: start-up cost (torch)
    import torch

    torch.set_num_threads(WORKER_THREADS)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


# Stages a launcher (`--launcher "torchrun --nproc_per_node 8"`) runs across processes; the classifier, the
# evaluation, stage 0 and the data set stay in the runner's worker.
LAUNCHED_STAGES = ("warmup", "sft", "rl")


class LaunchFailed(RuntimeError):
    """A launched stage exited with a non-zero status (`returncode`; REQUEUE_EXIT_CODE: preempted, resumable)."""

    def __init__(self, message: str, returncode: int):
        super().__init__(message)
        self.returncode = returncode


def launch_stage(kind: str, cfg: RunConfig, launcher: str, log_name: str = "launch.log") -> Path:
    """Run a model stage as `<launcher> -m harness.cli train <stage> <out_dir>/launch_config.yaml`, e.g. under
    torchrun over the machine's GPUs (harness/parallel/distributed.py); its output goes to <out_dir>/launch.log.

    The launcher dies with this process (parent-death signal), and its ranks with the launcher (they run
    harness.cli, which sets the same signal when DIE_WITH_PARENT_ENV is set): kill -9 of the runner leaves no
    rank writing the run folder."""
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config_path = out / "launch_config.yaml"
    atomic_write_text(config_path, yaml.safe_dump(to_dict(cfg), sort_keys=False))
    cmd = [*shlex.split(launcher), "-m", "harness.cli", "train", kind, str(config_path), "--no-progress"]

    log_path = out / log_name
    before = preemption.count(out)
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, DIE_WITH_PARENT_ENV: "1"},
                                preexec_fn=death_signal_setter())  # noqa: PLW1509 - no allocation in it
        passed_on = False
        while True:
            try:
                rc = proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                # This process was asked to stop: pass it on to the launcher (torchrun passes it to its ranks).
                if preemption.requested() and not passed_on:
                    proc.send_signal(signal.SIGTERM)
                    passed_on = True
    if rc == preemption.REQUEUE_EXIT_CODE or (rc != 0 and preemption.count(out) > before):
        # (torchrun reports its ranks' status 75 as a failure of its own; the run folder says what happened)
        raise preemption.Preempted(f"launched {kind} run {out}", signal_name=preemption.requested())
    if rc != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
        raise LaunchFailed(f"`{shlex.join(cmd)}` exited with status {rc}; the end of {log_path}:\n{tail}", rc)
    return out / "model"


def execute_node(kind: str, function: str, config: dict, model_dir: str | None,
                 launcher: str | None = None) -> dict:
    """Run one node; never raises an Exception (the error and traceback come back in the result, with the exit
    status of a launched stage as `returncode`)."""
    t0 = time.time()
    try:
        with scope():  # the run folders the stage locked are given back when it ends (workers run many)
            return _execute_node(kind, function, config, model_dir, launcher, t0)
    except preemption.Preempted as e:  # stopped on request with a checkpoint: the runner resubmits it
        # (`returncode`: what a Slurm job running this node exits with, harness/experiments/slurm.py: run_job)
        return {"ok": False, "preempted": str(e), "error": None, "elapsed_s": time.time() - t0,
                "returncode": preemption.REQUEUE_EXIT_CODE}
    except RunPruned as e:  # stopped on purpose by a validation callback: recorded as pruned, not failed
        return {"ok": False, "pruned": e.reason, "error": None, "elapsed_s": time.time() - t0}
    except Exception as e:  # noqa: BLE001 - recorded in the index; other arms go on
        return {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(),
                "elapsed_s": time.time() - t0, "returncode": getattr(e, "returncode", None)}
    finally:
        if _IN_WORKER[0]:  # a worker's stop signal was for the node it ran (the runner's flag is its own)
            preemption.clear()


def _execute_node(kind: str, function: str, config: dict, model_dir: str | None, launcher: str | None,
                  t0: float) -> dict:
    cfg = from_dict(RunConfig, config) if kind != "analysis" else None
    if launcher and kind in LAUNCHED_STAGES:
        result = str(launch_stage(kind, cfg, launcher))
    elif kind == "eval":
        result = resolve_function(function)(cfg, model_dir, progress=False)
    elif kind == "analysis":  # `config` holds the analysis settings, `model_dir` the RL run directory
        result = [str(p) for p in resolve_function(function)(model_dir, **config, progress=False)]
    else:
        result = str(resolve_function(function)(cfg, progress=False))
    return {"ok": True, "result": result, "elapsed_s": time.time() - t0}


class _InlineExecutor:
    """The executor interface, running each task at once in this process (workers = 1), on WORKER_THREADS torch
    threads like the worker processes: a stage run's numbers depend on the thread count, and stage runs are
    shared by key, so they must not depend on `--workers`."""

    def submit(self, fn, *args) -> Future:
        # lazy: start-up cost (torch)
        import torch

        f: Future = Future()
        before = torch.get_num_threads()
        torch.set_num_threads(WORKER_THREADS)
        try:
            f.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001
            f.set_exception(e)
        finally:
            torch.set_num_threads(before)
        return f

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


def worker_pids(executor) -> list[int]:
    """The live worker processes of a pool (none for the in-process executor)."""
    procs = getattr(executor, "_processes", None) or {}
    return [p.pid for p in list(procs.values()) if p.pid is not None and p.is_alive()]


def make_executor(workers: int):
    if workers <= 1:
        return _InlineExecutor()
    context = multiprocessing.get_context("spawn")
    slots = context.Queue()
    for gpu in gpu_slots(workers):
        slots.put(gpu)
    return ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker,
                               initargs=(slots,))
