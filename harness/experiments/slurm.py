"""`--executor slurm`: every node of the plan (stage run, data set, stage 0, test evaluation, analysis) is one Slurm
job, submitted through submitit with the resources its preset asks for (`resources:`, harness/experiments/
resources.py), and with its inputs as Slurm dependencies (`afterok`), so the whole graph is queued at once.

The runner stays to watch the queue (squeue; sacct needs accounting, which many clusters and this project's test
cluster do without): a job that ends with a result is recorded as a local worker's would be; a job that was
interrupted (it exited with REQUEUE_EXIT_CODE after checkpointing, or was preempted, timed out, cancelled, killed by
a signal, or lost with its node) is submitted again, up to `max_resubmits` times, and resumes from the stage's last
checkpoint (a stage rerun on the same folder does); the jobs that waited on it are pointed at the new job
(`scontrol update ... Dependency=`). A job that fails for real fails its node, and its dependents leave the queue.

A warm-up / SFT / RL run with `resources.<stage>.nodes` N > 1 is one job over N nodes (one srun task each): task 0
runs the node as above, every task runs a torchrun agent (`--nnodes N --rdzv_backend c10d`, the rendezvous on the
job's first node, the job id as its id), and tasks > 0 log to the stage folder's launch.node<K>.log.

Job ids are kept in index.json (per stage run, and all of them under `slurm_jobs`); a runner started again on the
same folder adopts the jobs still queued instead of submitting them twice. `regbench experiment status DIR` shows
them with their queue state. Job logs: `<out>/slurm/<job id>/`.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.config import ConfigError
from harness.experiments import slurm_queue
from harness.experiments.graph_run import ExperimentRun
from harness.experiments.plan import Node
from harness.experiments.resources import Resources
from harness.experiments.slurm_job import multi_node_launcher, result_file, run_job
from harness.experiments.slurm_queue import ACTIVE_STATES, JobState, SlurmQueue, outcome
from harness.experiments.study import STAGES
from harness.experiments.workers import LAUNCHED_STAGES, release_lock
from harness.runs import preemption
from harness.runs.lock import HOST, LOCK_NAME, read_holders, write_holders
from harness.runs.records import read_json
from harness.runs.schema import INDEX_FILE, NOT_REQUESTED, IndexKey, RunKey, StageKey

SLURM_FOLDER = "slurm"


@dataclass
class SlurmOptions:
    """How the runner uses the cluster (the resources themselves come from the preset's `resources:`)."""

    sbatch: dict[str, str] = field(default_factory=dict)  # more sbatch flags, e.g. {"partition": "gpu", "qos": ..}
    max_resubmits: int = 3      # interrupted jobs of one node submitted again at most this many times
    poll_s: float = 10.0        # seconds between looks at the queue
    signal_s: int = 120         # SIGUSR1 this long before the time limit: the stage checkpoints and exits 75
    python: str = sys.executable  # the interpreter of the jobs (the runner's: same environment, same packages)


# ---------------------------------------------------------------------------------------------------------
# The runner


def _log_tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return f"(no log at {path})"


class SlurmJobs:
    """The backend that runs every node as a Slurm job (see the module docstring); the graph is the
    ExperimentRun's (harness/experiments/graph_run.py), whose `running` holds each node's current job id."""

    name = "slurm"

    def __init__(self, options: SlurmOptions):
        self.options = options
        self.queue = SlurmQueue()
        self.resubmits: dict[str, int] = {}

    def bind(self, run: ExperimentRun) -> None:
        self.run = run
        self.folder = run.plan.out / SLURM_FOLDER
        self._read_earlier_jobs()

    def where(self) -> str:
        return f"Slurm jobs (logs in {self.folder})"

    def _read_earlier_jobs(self) -> None:
        try:
            earlier = read_json(self.run.index_path).get(IndexKey.SLURM_JOBS) or {}
        except (ValueError, OSError):
            earlier = {}
        for nid, jobs in earlier.items():
            if nid in self.run.plan.nodes and isinstance(jobs, list):
                self.run.plan.nodes[nid].jobs = [str(j) for j in jobs]

    # -- the backend's steps (harness/experiments/graph_run.py)

    def open(self) -> None:
        why = slurm_queue.slurm_available()
        if why:
            raise ConfigError(f"--executor slurm: {why}")
        # lazy: start-up cost (submitit)
        import submitit

        self.folder.mkdir(parents=True, exist_ok=True)
        self.executor = submitit.SlurmExecutor(folder=self.folder / "%j", python=self.options.python)
        self._adopt()

    def close(self) -> None:
        if self.run.running:  # the runner stops (Ctrl-C, an error): the jobs go on; a rerun adopts them
            jobs = ", ".join(sorted(self.run.running.values()))
            self.run.say(f"{len(self.run.running)} job(s) left in the queue ({jobs}); "
                         f"`regbench experiment status {self.run.plan.out}` shows them, and running this command again "
                         "takes them over")

    def _adopt(self) -> None:
        """Nodes whose last job (an earlier runner's) is still queued or has a result: watched, not submitted."""
        last = {nid: self.run.plan.nodes[nid].jobs[-1] for nid in self.run.remaining if self.run.plan.nodes[nid].jobs}
        states = self.queue.states(list(last.values()))
        for nid, jid in last.items():
            queued = states.get(jid, JobState()).state in ACTIVE_STATES
            if queued or self._result_json(jid).is_file():
                node = self.run.plan.nodes[nid]
                self.run.remaining.remove(nid)
                node.status = "running"
                self.run.running[nid] = jid
                self.run.say(f"took over job {jid} of {node.kind} ({self.run.label(node)}) from an earlier runner")

    def loop(self) -> None:
        while self.run.remaining or self.run.running:
            if self._stop_requested():
                break
            changed = self.run._start_ready()
            changed = self._poll() or changed
            if changed:
                self.run._settle_runs()
                self.run.write_index()
            elif self.run.remaining and not self.run.running and not self.run.waiting:
                raise RuntimeError(f"experiment graph is stuck at {self.run.remaining[:3]}")  # pragma: no cover
            else:
                time.sleep(self.options.poll_s)

    def pass_on_stop(self) -> None:
        """Nothing: each stage job handles its own signals (see `_stop_requested`)."""

    def _stop_requested(self) -> bool:
        """A stop signal to the runner: it submits nothing more and stops watching; the queued jobs are the
        cluster's and go on (each stage job handles its own signals), and the rerun takes them over."""
        if not preemption.requested():
            return False
        self.run.stopping = True
        self.run.say(f"{preemption.requested()} received: no new job is submitted; the queued ones go on")
        return True

    # -- submitting

    def ready(self, node: Node) -> bool:
        """Submitted as soon as its inputs are complete or queued (they become afterok dependencies)."""
        return all(self.run.plan.nodes[d].status == "complete" or d in self.run.running for d in node.deps)

    def start(self, nid: str, node: Node) -> None:
        """Submit a claimed node's job."""
        if node.kind in STAGES:
            release_lock(node.run_dir)  # the stage in the job locks its folder itself
        self._submit(nid, node)

    def _launcher(self, kind: str, res: Resources) -> str | None:
        """Inside a job: torchrun over the nodes when it has several (resources.<kind>.nodes), else the user's
        --launcher, else torchrun over the job's GPUs when it has several."""
        if kind not in LAUNCHED_STAGES:
            return None
        if res.nodes > 1:  # the user's --launcher is for one node; across nodes: torchrun with a rendezvous
            return multi_node_launcher(self.options.python, res.nodes, res.gpus)
        if self.run.launcher:
            return self.run.launcher
        if res.gpus > 1:
            return f"{shlex.quote(self.options.python)} -m torch.distributed.run --standalone " \
                   f"--nproc_per_node {res.gpus}"
        return None

    def _parameters(self, node: Node, res: Resources, after: list[str]) -> dict:
        root = Path(__file__).resolve().parents[2]  # the folder holding harness/ (and tests/ in a checkout)
        extra = {"signal": f"USR1@{self.options.signal_s}", **self.options.sbatch}
        if after:
            extra["dependency"] = "afterok:" + ":".join(after)
        return {
            "job_name": f"regbench-{node.kind}-{node.key}", "time": res.time_min, "cpus_per_task": res.cpus,
            "mem": f"{max(1, round(res.mem_gb * 1024))}M", "gpus_per_node": res.gpus or None, "nodes": res.nodes,
            "ntasks_per_node": 1,
            "stderr_to_stdout": True, "additional_parameters": extra,
            # The job's shell may not be the runner's (another user, a login profile): same code, same folder.
            "setup": [f"export PYTHONPATH={shlex.quote(str(root))}${{PYTHONPATH:+:$PYTHONPATH}}",
                      f"cd {shlex.quote(os.getcwd())}"],
        }

    def _submit(self, nid: str, node: Node) -> None:
        after = [self.run.running[d] for d in node.deps if d in self.run.running]
        res = (node.resources or self.run.study.resources).get(node.kind) or Resources()  # an upstream run: its own
        self.executor.update_parameters(**self._parameters(node, res, after))
        job = self.executor.submit(run_job, node.kind, self.run.fns[node.kind], node.config, node.model_dir,
                                   self._launcher(node.kind, res))
        node.jobs.append(str(job.job_id))
        node.status = "running"
        self.run.running[nid] = str(job.job_id)
        self.run.say(f"submitted {node.kind} ({self.run.label(node)}) as job {job.job_id}: {res.describe()}"
                     + (f", afterok {', '.join(after)}" if after else "")
                     + (f"; over {res.nodes} nodes it runs torchrun with a rendezvous, not --launcher"
                        if self.run.launcher and res.nodes > 1 and node.kind in LAUNCHED_STAGES else ""))
        # Jobs already queued that wait on this node (on a job of its that ended interrupted, or one an earlier
        # runner submitted) wait on the new job instead.
        for dep_id in list(self.run.running):
            if nid in self.run.plan.nodes[dep_id].deps:
                self._retarget(dep_id)

    def _retarget(self, nid: str) -> None:
        """Point a queued job's afterok dependencies at the current jobs of its node's inputs."""
        node, job_id = self.run.plan.nodes[nid], self.run.running[nid]
        waits = [self.run.running[d] for d in node.deps if d in self.run.running]
        self.queue.set_dependency(job_id, waits)
        self.run.say(f"job {job_id} of {node.kind} ({self.run.label(node)}) now waits on "
                     f"{', '.join(waits) or 'nothing'}")

    # -- watching

    def _result_json(self, job_id: str) -> Path:
        # lazy: start-up cost (submitit)
        from submitit.core.utils import JobPaths

        return result_file(JobPaths(self.folder / "%j", job_id=job_id, task_id=0).result_pickle)

    def _job_log(self, job_id: str) -> Path:
        # lazy: start-up cost (submitit)
        from submitit.core.utils import JobPaths

        return JobPaths(self.folder / "%j", job_id=job_id, task_id=0).stdout

    def _poll(self) -> bool:
        """Look at the queue once: record the jobs that ended, resubmit the interrupted ones."""
        if not self.run.running:
            return False
        states = self.queue.states(list(self.run.running.values()))
        changed = False
        for nid, jid in list(self.run.running.items()):
            job = states.get(jid, JobState())
            if job.state in ACTIVE_STATES:
                if job.reason == "DependencyNeverSatisfied" and all(
                        self.run.plan.nodes[d].status == "complete" for d in self.run.plan.nodes[nid].deps):
                    self._retarget(nid)  # its inputs are complete now (an earlier runner's jobs): let it start
                continue
            result = self._result_json(jid)
            if not result.is_file() and job.state is not None:
                job = JobState(job.state, job.reason, self.queue.exit_code(jid))
            verdict = outcome(job, result.is_file())
            del self.run.running[nid]
            changed = True
            if verdict == "result":
                self.run._record(nid, self._read_result(jid, result))
            elif verdict == "resubmit" and self.resubmits.get(nid, 0) < self.options.max_resubmits:
                self._resubmit(nid, jid, job)
                continue
            else:
                tries = self.resubmits.get(nid, 0)
                why = (f"job {jid} ended {job.describe()} without a result" +
                       (f", interrupted {tries + 1} times" if verdict == "resubmit" else ""))
                log = self._job_log(jid)
                self.run._record(nid, {"ok": False, "error": why, "elapsed_s": None,
                                   "traceback": f"{why}; the end of {log}:\n{_log_tail(log)}"})
            if self.run.plan.nodes[nid].status != "complete":
                self.drop_dependents(nid)
        return changed

    def _read_result(self, job_id: str, path: Path) -> dict:
        """The node's result as its job wrote it (JSON only: nothing in a run folder is unpickled)."""
        try:
            res = read_json(path)
        except (ValueError, OSError) as e:
            return {"ok": False, "error": f"job {job_id}: unreadable result {path} ({e})", "elapsed_s": None}
        if not isinstance(res, dict) or not isinstance(res.get("ok"), bool):
            return {"ok": False, "error": f"job {job_id}: {path} holds no node result", "elapsed_s": None}
        return res

    def _resubmit(self, nid: str, job_id: str, job: JobState) -> None:
        node = self.run.plan.nodes[nid]
        self.resubmits[nid] = self.resubmits.get(nid, 0) + 1
        self.run.say(f"job {job_id} of {node.kind} ({self.run.label(node)}) ended {job.describe()}: interrupted, "
                     f"submitting it again ({self.resubmits[nid]}/{self.options.max_resubmits}); it resumes from its "
                     "last checkpoint")
        if node.kind in STAGES:
            _drop_other_hosts(node.run_dir)
        self._submit(nid, node)

    def drop_dependents(self, nid: str) -> None:
        """The queued jobs that need a node that did not finish leave the queue, skipped (as the local runner
        skips them)."""
        bad = self.run.plan.nodes[nid]
        for dep_id, dep_job in list(self.run.running.items()):
            dep_node = self.run.plan.nodes[dep_id]
            if nid in dep_node.deps:
                self.queue.cancel([dep_job])
                del self.run.running[dep_id]
                dep_node.status = "skipped"
                dep_node.error = f"needs {bad.kind} run {bad.key}, which did not finish"
                self.run.say(f"cancelled job {dep_job} of {dep_node.kind} ({self.run.label(dep_node)}): "
                             f"{dep_node.error}")
                self.drop_dependents(dep_id)


def SlurmExperimentRun(plan, selected, fns, log, argv, launcher, workers, wait_for_locks,
                       options: SlurmOptions) -> ExperimentRun:
    """The experiment run as Slurm jobs (the name the CLI and the tests use)."""
    objects = sorted(k for k, f in fns.items() if not isinstance(f, str))
    if objects:
        raise ConfigError(f"--executor slurm runs nodes in jobs, which import their functions: give "
                          f"'module:function' names, not function objects (nodes {', '.join(objects)}; a "
                          "search's pruning callback runs in-process only)")
    return ExperimentRun(plan, selected, fns, log, argv, launcher, workers, wait_for_locks, SlurmJobs(options))


def _drop_other_hosts(run_dir: Path) -> None:
    """A stage run's lock lines of other hosts, left by a job that no longer runs (the runner saw it end): the
    lock trusts a holder it cannot check, so the resubmitted job, maybe on another node, would be refused."""
    lock = run_dir / LOCK_NAME
    holders = read_holders(lock)
    keep = [h for h in holders if h.host == HOST]
    if len(keep) != len(holders):
        write_holders(lock, keep)


# ---------------------------------------------------------------------------------------------------------
# `regbench experiment status DIR`


def experiment_status(out: str | Path) -> str:
    """The runs of an experiment folder with each stage's status and, for Slurm jobs, their queue state."""
    out = Path(out)
    index_path = out / INDEX_FILE
    if not index_path.is_file():
        raise ConfigError(f"{out}: no {INDEX_FILE} (not an experiment folder, or its runner has not started)")
    index = read_json(index_path)
    rows: list[tuple[str, str, str, str, str]] = []  # run, stage, status, job, queue state
    for r in index.get(IndexKey.RUNS, []):
        run = f"{r[RunKey.ARM]} seed {r[RunKey.SEED]}"
        # a run no runner call was asked for (a subset run, `--arms`) is "not requested", apart from "pending"
        waiting = NOT_REQUESTED if r.get(RunKey.STATUS) == NOT_REQUESTED else "pending"
        for stage, s in (r.get(RunKey.STAGES) or {}).items():
            status = s.get(StageKey.STATUS, "?")
            rows.append((run, stage, waiting if status == "pending" else status,
                         (s.get(StageKey.SLURM_JOBS) or [""])[-1], ""))
        ev = r.get(RunKey.STATUS) if r.get(RunKey.STATUS) in ("complete", "failed", NOT_REQUESTED) else "pending"
        rows.append((run, "eval", ev, (r.get(RunKey.EVAL_SLURM_JOBS) or [""])[-1], ""))
    support = {nid: jobs[-1] for nid, jobs in (index.get(IndexKey.SLURM_JOBS) or {}).items()
               if nid.split(":")[0] in ("data", "pretrain") and jobs}
    for nid, jid in sorted(support.items()):
        rows.append(("(shared)", nid, "", jid, ""))
    job_ids = [row[3] for row in rows if row[3]]
    states: dict[str, JobState] = {}
    note = ""
    if job_ids:
        if slurm_queue.slurm_available() is None:
            queue = SlurmQueue()
            states = queue.states(job_ids)
            for jid in sorted(set(job_ids) - set(states)):  # gone from squeue: the state scontrol still knows
                ended = queue.ended_state(jid)
                if ended is not None:
                    states[jid] = ended
        else:
            note = f"\n(queue not reachable: {slurm_queue.slurm_available()})"
    lines = [f"{index.get(IndexKey.STUDY)} ({index.get(IndexKey.EXECUTOR, 'local')} executor): "
             + ", ".join(f"{n} {k}" for k, n in (index.get(IndexKey.SUMMARY) or {}).items() if n)
             + f"; updated {index.get(IndexKey.UPDATED)}",
             "", f"{'run':<24} {'stage':<16} {'status':<13} {'job':<10} queue"]
    counts: dict[str, int] = {}
    for jid in sorted(set(job_ids)):
        st = states.get(jid)
        if st and st.state in ACTIVE_STATES:
            counts[st.state] = counts.get(st.state, 0) + 1
    for run, stage, status, jid, _ in rows:
        st = states.get(jid)
        queue = "" if not jid else (f"{st.state}" + (f" ({st.reason})" if st.reason and st.reason != "None" else "")
                                    + (f" (exit {st.exit_code})" if st.exit_code else "")
                                    if st else "not in the queue")
        if status in ("pending", "running") and st and st.state and st.state not in ACTIVE_STATES:
            status = st.state  # the job ended (e.g. CANCELLED) and no runner recorded it: as Slurm reports it
        lines.append(f"{run:<24} {stage:<16} {status:<13} {jid:<10} {queue}".rstrip())
    if counts:
        lines.append("")
        lines.append("jobs in the queue: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return "\n".join(lines) + note
