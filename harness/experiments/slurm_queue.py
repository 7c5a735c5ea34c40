"""The Slurm queue as the runner of `--executor slurm` sees it (harness/experiments/slurm.py): job states, what the
runner does with each, and the cluster's commands (squeue, scontrol, scancel)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from harness.runs.preemption import REQUEUE_EXIT_CODE

# Job states (squeue %T) of a job that is still queued or running, and of one that ended interrupted: worth
# submitting again (the stage resumes from its checkpoint). Any other end without a result is a failure.
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED",
                           "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED",
                           "RESV_DEL_HOLD"})
INTERRUPTED_STATES = frozenset({"PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "TIMEOUT", "CANCELLED", "DEADLINE"})


@dataclass(frozen=True)
class JobState:
    state: str | None = None      # squeue's state; None: the queue no longer knows the job
    reason: str | None = None
    exit_code: str | None = None  # "status:signal", from scontrol, for ended jobs without a result

    def describe(self) -> str:
        text = self.state or "gone from the queue"
        return text + (f" (exit {self.exit_code})" if self.exit_code else "")


def outcome(job: JobState, has_result: bool) -> str:
    """What the runner does with a job: "active" (wait), "result" (record it), "resubmit" (it was interrupted:
    REQUEUE_EXIT_CODE, an interrupted state, a kill by a signal, or gone without a result), "failed"."""
    if job.state in ACTIVE_STATES:
        return "active"
    if has_result:
        return "result"
    if job.state is None or job.state in INTERRUPTED_STATES:
        return "resubmit"
    if job.state == "OUT_OF_MEMORY":  # the same job would run out again: ask for more (resources.<kind>.mem_gb)
        return "failed"
    status, _, sig = (job.exit_code or "").partition(":")
    status_n = int(status) if status.isdigit() else None
    if status_n == REQUEUE_EXIT_CODE or (status_n is not None and status_n > 128) or (sig.isdigit() and int(sig)):
        return "resubmit"  # srun reports a task killed by signal N as 128 + N
    return "failed"


class SlurmQueue:
    """The cluster's commands the runner needs: squeue, scontrol, scancel."""

    def _run(self, *cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, capture_output=True, text=True, check=False)

    def states(self, job_ids: list[str]) -> dict[str, JobState]:
        """Each known job's state and reason (ended jobs stay known for the cluster's MinJobAge)."""
        if not job_ids:
            return {}
        p = self._run("squeue", "-h", "-t", "all", "-j", ",".join(sorted(set(job_ids))), "-o", "%i|%T|%r")
        out = {}
        for line in p.stdout.splitlines():
            jid, _, rest = line.strip().partition("|")
            state, _, reason = rest.partition("|")
            out[jid] = JobState(state or None, reason or None)
        if p.returncode != 0 and "Invalid job id" not in p.stderr:
            raise RuntimeError(f"squeue failed: {p.stderr.strip()}")
        return out

    def ended_state(self, job_id: str) -> JobState | None:
        """A job squeue no longer lists, as scontrol still knows it (its state and exit code); None when it
        does not (sacct is not needed: scontrol knows a job for the cluster's MinJobAge)."""
        text = self._run("scontrol", "show", "job", "-o", job_id).stdout
        state = re.search(r"\bJobState=(\S+)", text)
        code = re.search(r"\bExitCode=(\d+:\d+)", text)
        return JobState(state.group(1), None, code.group(1) if code else None) if state else None

    def exit_code(self, job_id: str) -> str | None:
        m = re.search(r"\bExitCode=(\d+:\d+)", self._run("scontrol", "show", "job", "-o", job_id).stdout)
        return m.group(1) if m else None

    def set_dependency(self, job_id: str, after: list[str]) -> None:
        dep = "afterok:" + ":".join(after) if after else ""
        p = self._run("scontrol", "update", f"JobId={job_id}", f"Dependency={dep}")
        if p.returncode != 0:
            raise RuntimeError(f"scontrol update JobId={job_id} Dependency={dep} failed: {p.stderr.strip()}")

    def cancel(self, job_ids: list[str]) -> None:
        if job_ids:
            self._run("scancel", *job_ids)


def slurm_available() -> str | None:
    """None when sbatch, squeue and srun are here and the cluster answers; else why not."""
    missing = [c for c in ("sbatch", "squeue", "scontrol", "srun") if shutil.which(c) is None]
    if missing:
        return f"no {', '.join(missing)} on PATH (not on a Slurm cluster's login node?)"
    p = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, check=False)
    if p.returncode != 0:
        return f"sinfo failed: {p.stderr.strip() or p.stdout.strip()}"
    return None
