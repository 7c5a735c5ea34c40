"""What a Slurm job of `--executor slurm` runs (harness/experiments/slurm.py submits it): the node's function as a
local worker would run it, and for a job over several nodes the torchrun agent of each node."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from harness.config import RunConfig, from_dict
from harness.experiments.workers import WORKER_THREADS, execute_node, launch_stage
from harness.parallel.allocator import keep_freed_memory
from harness.runs import preemption
from harness.runs.preemption import REQUEUE_EXIT_CODE
from harness.runs.records import atomic_write_json


class NodeFailed(RuntimeError):
    """The node's function failed; its result (error, traceback) is in the job's failure file."""


def result_file(result_pickle: Path) -> Path:
    """Where a job writes its node's result as JSON, beside submitit's result pickle. The runner reads only this
    file: a pickle in a run folder is code that unpickling would run (issue 49), and a folder may come from anyone."""
    return result_pickle.with_name(result_pickle.name.replace("_result.pkl", "_node_result.json"))


def run_job(kind: str, function: str, config: dict, model_dir: str | None, launcher: str | None) -> dict:
    """What a job runs: execute_node as a local worker would (one torch thread: a stage run's numbers do not
    depend on where it ran). A failed node fails the job (so `afterok` holds its dependents back) with its result
    in the failure file; a preempted stage (REQUEUE_EXIT_CODE, also from a launched one) exits with that status."""
    # lazy: start-up cost (submitit, torch)
    import submitit
    import torch


    # submitit's handlers (SIGTERM ignored, SIGUSR2 requeues by itself) are replaced by ours from the job's start:
    # a stop signal during the imports and loading before the stage's loop is not lost, the stage honours it.
    signal.signal(signal.SIGUSR2, signal.SIG_DFL)
    preemption.install()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    keep_freed_memory()  # harness/parallel/allocator.py
    torch.set_num_threads(WORKER_THREADS)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    if launcher and RDZV_HOST in launcher:  # a job over several nodes (resources.<kind>.nodes > 1)
        launcher = rendezvous_launcher(launcher, os.environ)
        rank = int(os.environ.get("SLURM_PROCID", "0"))
        if rank > 0:  # another node's task: its torchrun agent joins the stage; task 0 keeps the books
            _join_stage(kind, config, launcher, rank)
            return {"ok": True, "task": rank}
    res = execute_node(kind, function, config, model_dir, launcher)
    if not res["ok"] and res.get("returncode") == REQUEUE_EXIT_CODE:
        sys.exit(REQUEUE_EXIT_CODE)
    atomic_write_json(result_file(submitit.JobEnvironment().paths.result_pickle), res)
    if res["ok"]:
        return res
    raise NodeFailed(res.get("error") or "the node failed")


# Placeholders of a multi-node launcher, filled in inside the job (the nodes are known only then).
RDZV_HOST, RDZV_PORT, RDZV_ID = "{rdzv_host}", "{rdzv_port}", "{rdzv_id}"
RDZV_BASE_PORT = 29400  # torchrun's default c10d port; plus the job id modulo 1000, so jobs sharing a node differ


def multi_node_launcher(python: str, nodes: int, gpus: int) -> str:
    """torchrun as one agent per node (srun runs one task per node), its ranks meeting through a c10d rendezvous
    on the job's first node: the multi-node pattern of torchrun's docs ("torchrun (Elastic Launch)")."""
    return (f"{shlex.quote(python)} -m torch.distributed.run --nnodes {nodes} --nproc_per_node {max(gpus, 1)} "
            f"--rdzv_backend c10d --rdzv_endpoint {RDZV_HOST}:{RDZV_PORT} --rdzv_id {RDZV_ID}")


def rendezvous_launcher(launcher: str, env) -> str:
    """The launcher with the job's first host (`scontrol show hostnames $SLURM_JOB_NODELIST`), a port and the job
    id as the rendezvous id."""
    job_id = env["SLURM_JOB_ID"]
    hosts = subprocess.run(["scontrol", "show", "hostnames", env["SLURM_JOB_NODELIST"]], capture_output=True,
                           text=True, check=True).stdout.split()
    port = RDZV_BASE_PORT + int(re.sub(r"\D", "", job_id) or 0) % 1000
    return launcher.replace(RDZV_HOST, hosts[0]).replace(RDZV_PORT, str(port)).replace(RDZV_ID, job_id)


def _join_stage(kind: str, config: dict, launcher: str, rank: int) -> None:
    """Task `rank` > 0 of a multi-node job: the stage's torchrun agent of this node, its output in
    launch.node<rank>.log; a stop signal is passed on to it as task 0's is."""
    try:
        launch_stage(kind, from_dict(RunConfig, config), launcher, log_name=f"launch.node{rank}.log")
    except preemption.Preempted:
        sys.exit(REQUEUE_EXIT_CODE)
