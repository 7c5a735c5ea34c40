"""The local executor: the backend that runs an experiment's nodes on this machine's worker processes
(harness/experiments/graph_run.py's ExperimentRun keeps the graph; run_experiment in harness/experiments/run.py
builds the plan and hands it over). A node is a Future of the pool; the loop waits for the first to finish."""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool

from harness.experiments.graph_run import ExperimentRun
from harness.experiments.plan import Node, Plan
from harness.experiments.study import STAGES
from harness.experiments.workers import LOCK_POLL_S, execute_node, make_executor, release_lock, worker_pids

_POOL_DIED = "worker process died (killed, e.g. out of memory?)"


class LocalWorkers:
    """`workers` processes (one in-process executor for 1), each running one node at a time."""

    name = "local"

    def __init__(self, workers: int):
        self.workers, self.limit = workers, max(1, workers)

    def bind(self, run: ExperimentRun) -> None:
        self.run = run

    def where(self) -> str:
        return f"{self.workers} worker(s)"

    def open(self) -> None:
        self.executor = make_executor(self.workers)

    def close(self) -> None:
        r = self.run
        self.executor.shutdown(wait=True, cancel_futures=True)
        for nid in r.running:
            r.plan.nodes[nid].status = "pending"
            if r.plan.nodes[nid].kind in STAGES:
                release_lock(r.plan.nodes[nid].run_dir)

    def pass_on_stop(self) -> None:
        """The runner's stop signal, passed on to the worker processes once."""
        for pid in worker_pids(self.executor):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def drop_dependents(self, nid: str) -> None:
        """Nothing waits in a queue here: a node starts only when its inputs are complete."""

    def loop(self) -> None:
        r = self.run
        while r.remaining or r.running:
            r._check_stop()
            if r.stopping and not r.running:
                break
            progressed = r._start_ready() if not r.stopping else False
            if progressed:
                r._settle_runs()
                r.write_index()
            if not r.running:
                if r.remaining and not progressed:
                    if r.waiting:
                        time.sleep(LOCK_POLL_S)
                        continue
                    raise RuntimeError(f"experiment graph is stuck at {r.remaining[:3]}")  # pragma: no cover
                continue
            # (a timeout, so that a stop signal is seen while the stages run)
            finished, _ = wait(list(r.running.values()), timeout=LOCK_POLL_S, return_when=FIRST_COMPLETED)
            if not finished:
                continue
            broken = False
            for fut in finished:
                broken = self._collect(fut) or broken
            if broken:
                self._replace_broken_pool()
            r._settle_runs()
            r.write_index()

    def ready(self, node: Node) -> bool:
        """Whether a node may start now: its inputs are complete and a worker is free."""
        r = self.run
        return all(r.plan.nodes[d].status == "complete" for d in node.deps) and len(r.running) < self.limit

    def start(self, nid: str, node: Node) -> None:
        """Hand a claimed node to a worker."""
        r = self.run
        node.status = "running"
        fut = self.executor.submit(execute_node, node.kind, r.fns[node.kind], node.config, node.model_dir,
                                   r.launcher)
        r.running[nid] = fut
        r.say(f"started {node.kind} ({r.label(node)})")

    def _collect(self, fut: Future) -> bool:
        """Record one finished node (the eval's metrics.json, times, status); whether the worker pool broke."""
        r = self.run
        nid = next(n for n, f in r.running.items() if f is fut)
        del r.running[nid]
        broken = False
        try:
            res = fut.result()
        except BrokenProcessPool:
            res = {"ok": False, "error": _POOL_DIED, "traceback": traceback.format_exc(), "elapsed_s": None}
            broken = True
            r._check_stop()
            if r.stopping:  # killed by the stop signal before its handlers were in place: pending, not failed
                res = {"ok": False, "preempted": _POOL_DIED, "error": None, "elapsed_s": None}
        r._record(nid, res)
        return broken

    def _replace_broken_pool(self) -> None:
        """A worker died: what the pool still ran fails with it, and a fresh pool takes over."""
        r = self.run
        for nid in list(r.running):
            if r.stopping:  # a worker the stop signal reached before it could handle it: run it again later
                r.plan.nodes[nid].status = "pending"
                del r.running[nid]
                continue
            r.plan.nodes[nid].status = "failed"
            r.plan.nodes[nid].error = _POOL_DIED
            del r.running[nid]
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.executor = make_executor(self.workers)


def LocalExperimentRun(plan: Plan, selected: list[tuple[str, int]], fns: dict[str, str],
                       log: Callable[[str], None], argv: list[str] | None, launcher: str | None, workers: int,
                       wait_for_locks: bool, max_requeues: int = 3) -> ExperimentRun:
    """The experiment run on local workers (the name the CLI, the search and the tests use)."""
    return ExperimentRun(plan, selected, fns, log, argv, launcher, workers, wait_for_locks, LocalWorkers(workers),
                         max_requeues)
