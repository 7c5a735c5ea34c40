"""An experiment's plan run as one graph, whatever runs its nodes (run_experiment in harness/experiments/run.py
builds the plan and hands it here): `ExperimentRun` keeps the graph's state (what remains, what runs, each node's
status, the runs it settles, index.json) and takes a backend object that runs the nodes: `LocalWorkers`
(harness/experiments/local.py, this machine's worker processes) or `SlurmJobs` (harness/experiments/slurm.py, one
Slurm job per node). The backend owns its executor and how it waits (futures, or looks at the queue); the run
owns the rest. A backend has `name`, and the steps `bind(run)`, `where()`, `open()`, `loop()`, `close()`,
`ready(node)`, `start(nid, node)`, `pass_on_stop()` and `drop_dependents(nid)`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.experiments import eval_cache
from harness.experiments.index import build_index, created_at, recorded_requests, run_status
from harness.experiments.plan import NODE_ORDER, Node, Plan, link_stages, node_done
from harness.experiments.plan_text import node_label
from harness.experiments.study import STAGES
from harness.experiments.tracker_labels import write_tracker_labels
from harness.experiments.workers import acquire_lock, release_lock
from harness.runs import preemption
from harness.runs.records import atomic_write_json, read_json
from harness.runs.schema import (
    EVAL_FINAL_STAGE,
    EVAL_KEY,
    EVAL_MODEL_DIR,
    INDEX_FILE,
    METRICS_FILE,
    PRUNED,
    IndexKey,
    RunKey,
)


@dataclass
class ExperimentResult:
    index_path: Path
    index: dict
    failed: list[tuple[str, int]]
    ran: list[tuple[str, int]]
    preempted: bool = False  # stopped by a signal to the runner; rerun the same command to resume

    @property
    def ok(self) -> bool:
        return not self.failed

    def stop_if_preempted(self, what: str) -> None:
        """For a caller that goes on after the experiment (a look of --until-decided, the demo's table): a stop
        signal left runs unfinished, so stop here too (Preempted: exit 75; the rerun resumes them)."""
        if self.preempted:
            raise preemption.Preempted(what, signal_name=preemption.requested(),
                                       kept=f"its running stage runs checkpointed (index {self.index_path})")


def needed_order(plan: Plan, selected: list[tuple[str, int]]) -> list[str]:
    """The nodes the selected, incomplete runs need, in the order to start them (kind, then seed)."""
    needed: set[str] = set()
    stack = [plan.runs[k].eval_node for k in selected if plan.nodes[plan.runs[k].eval_node].status != "complete"]
    stack += [plan.runs[k].analysis_node for k in selected if plan.runs[k].analysis_node]
    stack += [nid for nid in plan.stage_evals.values() if plan.nodes[nid].users[0] in selected]
    while stack:
        nid = stack.pop()
        if nid in needed or plan.nodes[nid].status == "complete":
            continue
        needed.add(nid)
        stack.extend(plan.nodes[nid].deps)
    return sorted(needed, key=lambda i: (NODE_ORDER.index(plan.nodes[i].kind),
                                         min(s for _, s in plan.nodes[i].users), i))


class ExperimentRun:
    """One call of run_experiment: the graph's state while it runs; `backend` runs the nodes (module docstring)."""

    def __init__(self, plan: Plan, selected: list[tuple[str, int]], fns: dict[str, str],
                 log: Callable[[str], None], argv: list[str] | None, launcher: str | None, workers: int,
                 wait_for_locks: bool, backend: Any, max_requeues: int = 3):
        self.plan, self.study, self.selected, self.fns = plan, plan.study, selected, fns
        self.selected_set = set(selected)
        self.log, self.argv, self.launcher, self.workers = log, argv, launcher, workers
        self.wait_for_locks = wait_for_locks
        self.index_path = plan.out / INDEX_FILE
        self.created = created_at(self.index_path)
        # every run asked of a runner call so far (this one's and the earlier calls'): the others are `not requested`
        self.requested = set(selected) | (recorded_requests(self.index_path) or set())
        link_stages(plan)
        for n in plan.nodes.values():
            if n.kind == "eval" and not node_done(n) and set(n.users) & self.selected_set \
                    and eval_cache.adopt(plan, n, plan.runs[n.users[0]].final_stage):
                self.log(f"[experiment {self.study.name}] eval ({node_label(n, self.selected_set)}): the same "
                         f"model's evaluation is kept in {eval_cache.cache_dir(plan, n)}: reused")
            if node_done(n):
                n.status = "complete"
        self.order = needed_order(plan, selected)
        write_tracker_labels(plan, self.order)  # W&B group/name/tags and TensorBoard folder of the runs to run
        self.run_info: dict[tuple[str, int], dict] = {}
        self.t0 = time.time()
        self.pending_runs = {k for k in selected if plan.nodes[plan.runs[k].eval_node].status != "complete"}
        self.done_count = len(selected) - len(self.pending_runs)
        self.stage_time: dict[tuple[str, int], float] = {}
        self.remaining = list(self.order)
        # node id -> its handle in the backend (a local worker's Future, a Slurm job id)
        self.running: dict[str, Any] = {}
        self.waiting: set[str] = set()  # stage runs another runner holds (wait_for_locks)
        self.max_requeues = max_requeues
        self.requeues: dict[str, int] = {}  # node id -> resubmissions after a preemption
        self.stopping = False  # a stop signal reached the runner: start nothing new
        self.backend = backend
        backend.bind(self)

    def say(self, text: str) -> None:
        self.log(f"[experiment {self.study.name}] {text}")

    def label(self, node: Node) -> str:
        """The selected runs that need `node`, for progress lines (not the plan's other runs that share it)."""
        return node_label(node, self.selected_set)

    def write_index(self) -> dict:
        index = build_index(self.plan, self.run_info, self.created, self.argv, self.backend.name, self.requested)
        atomic_write_json(self.index_path, index)
        return index

    def run(self) -> ExperimentResult:
        plan, selected = self.plan, self.selected
        for k in selected:
            if k not in self.pending_runs:
                self.say(f"{k[0]} seed {k[1]}: already complete, skipped")
        self.say(f"preset {self.study.preset}: {len(self.pending_runs)} of {len(selected)} runs to do, "
                 f"{len(self.order)} stage runs, {self.backend.where()}; index {self.index_path}")
        self.write_index()
        self.backend.open()
        try:
            with preemption.handling():
                self.backend.loop()
        finally:
            self.backend.close()
            index = self.write_index()
        failed = [(r[RunKey.ARM], r[RunKey.SEED]) for r in index[IndexKey.RUNS] if r[RunKey.STATUS] == "failed"
                  and (r[RunKey.ARM], r[RunKey.SEED]) in selected]
        ran = [k for k in selected if k in self.run_info]
        n_ok = sum(1 for k in selected if run_status(plan, plan.runs[k])[0] == "complete")
        # A stop signal that came during the last stage run's last step left nothing to resume: not preempted.
        preempted = self.stopping and bool(self.pending_runs)
        if preempted:
            self.say(f"stopped by {preemption.requested()} after {time.time() - self.t0:.0f}s: {n_ok} complete, "
                     f"{len(failed)} failed, the running stages checkpointed; rerun the same command to resume "
                     f"(exit status {preemption.REQUEUE_EXIT_CODE}); index {self.index_path}")
        else:
            self.say(f"done in {time.time() - self.t0:.0f}s: {n_ok} complete, {len(failed)} failed; "
                     f"index {self.index_path}")
        return ExperimentResult(self.index_path, index, failed, ran, preempted=preempted)

    def _check_stop(self) -> None:
        """A stop signal to the runner: pass it on to the running nodes once (the backend), start nothing new."""
        if self.stopping or not preemption.requested():
            return
        self.stopping = True
        self.say(f"{preemption.requested()} received: no new stage starts; waiting for the {len(self.running)} "
                 "running one(s) to checkpoint")
        self.backend.pass_on_stop()

    def _start_ready(self) -> bool:
        """Skip the nodes whose inputs failed, start those that are ready (the backend's `ready`); whether anything
        changed."""
        progressed = False
        for nid in list(self.remaining):
            node = self.plan.nodes[nid]
            if self._skip_if_inputs_failed(nid, node):
                progressed = True
            elif self.backend.ready(node) and self._start(nid, node):
                progressed = True
        return progressed

    def _skip_if_inputs_failed(self, nid: str, node: Node) -> bool:
        """Mark a waiting node skipped when one of its inputs failed, was skipped or pruned; whether it was."""
        bad = next((self.plan.nodes[d] for d in node.deps
                    if self.plan.nodes[d].status in ("failed", "skipped", PRUNED)), None)
        if bad is None:
            return False
        node.status, node.error = "skipped", f"needs {bad.kind} run {bad.key}, which did not finish"
        self.remaining.remove(nid)
        self.backend.drop_dependents(nid)  # what the backend queued that needs it goes too
        return True

    def _claim(self, nid: str, node: Node) -> bool | None:
        """`_lock` (below); a node settled unfinished takes what the backend queued that needs it along."""
        claimed = self._lock(nid, node)
        if claimed is None and node.status != "complete":
            self.backend.drop_dependents(nid)
        return claimed

    def _lock(self, nid: str, node: Node) -> bool | None:
        """Before a node starts: its folder, and the stage run's lock. True: start it (this runner holds the
        lock); False: not now (another runner holds it and wait_for_locks); None: settled without running (locked
        by another runner, so failed; or finished by one meanwhile, so complete)."""
        if node.kind in STAGES or node.kind == "eval":
            node.run_dir.mkdir(parents=True, exist_ok=True)
        if node.kind not in STAGES:
            self.remaining.remove(nid)
            return True
        held = acquire_lock(node.run_dir)
        if held and self.wait_for_locks:
            if nid not in self.waiting:
                self.waiting.add(nid)
                self.say(f"waiting for {node.kind} ({self.label(node)}): {held}")
            return False
        self.waiting.discard(nid)
        self.remaining.remove(nid)
        if held:
            node.status, node.error = "failed", held
            self.say(f"FAILED {node.kind} ({self.label(node)}): {held}")
            return None
        if node_done(node):  # another runner finished it while this one planned or waited
            release_lock(node.run_dir)
            node.status = "complete"
            self.say(f"{node.kind} ({self.label(node)}) was finished by another runner: reused")
            return None
        return True

    def _start(self, nid: str, node: Node) -> bool:
        """Start one ready node, unless another runner holds its stage run; whether anything changed."""
        if preemption.requested():  # a stop signal since the loop last looked (e.g. in an in-process stage)
            return False
        claimed = self._claim(nid, node)
        if claimed is not True:
            return claimed is None
        self.backend.start(nid, node)
        return True


    def _record(self, nid: str, res: dict) -> None:
        """Record one node's result (execute_node's dict): the eval's metrics.json, times, status, its lock."""
        node = self.plan.nodes[nid]
        node.elapsed_s = None if res.get("elapsed_s") is None else round(res["elapsed_s"], 2)
        for user in node.users:
            self.stage_time[user] = self.stage_time.get(user, 0.0) + (res.get("elapsed_s") or 0.0)
        if res["ok"] and node.kind == "eval":
            scores = dict(res["result"])
            scores.update({EVAL_KEY: node.key, EVAL_FINAL_STAGE: self.plan.runs[node.users[0]].final_stage,
                           EVAL_MODEL_DIR: node.model_dir})
            atomic_write_json(node.run_dir / METRICS_FILE, scores)
            eval_cache.keep(self.plan, node)
        if node.kind in STAGES:
            release_lock(node.run_dir)
        if not res.get("preempted"):
            self.say(f"{'finished' if res['ok'] else 'FAILED'} {node.kind} ({self.label(node)}) in "
                     f"{res.get('elapsed_s') or 0:.0f}s")
        if res.get("preempted"):
            self._preempted(nid, node, res["preempted"])
        elif res["ok"]:
            node.status = "complete"
        elif res.get(PRUNED):
            node.status, node.error = PRUNED, res[PRUNED]
        else:
            node.status, node.error, node.traceback = "failed", res["error"], res.get("traceback")

    def _preempted(self, nid: str, node: Node, message: str) -> None:
        """A stage stopped with its checkpoint: resubmit it (bounded), or leave it pending when the runner stops."""
        self._check_stop()
        if self.stopping:
            node.status = "pending"
            self.say(f"preempted {node.kind} ({self.label(node)}): checkpoint written; it resumes when the "
                     "experiment is run again")
            return
        n = self.requeues.get(nid, 0) + 1
        self.requeues[nid] = n
        if n > self.max_requeues:
            node.status = "failed"
            node.error = (f"preempted {n} times (more than --max-requeues {self.max_requeues}); its checkpoint is "
                          f"kept: rerun the experiment to resume it ({message})")
            self.say(f"FAILED {node.kind} ({self.label(node)}): {node.error}")
            return
        node.status = "pending"
        self.remaining.insert(0, nid)
        self.say(f"preempted {node.kind} ({self.label(node)}): resubmitted ({n} of at most {self.max_requeues}); "
                 "it resumes from its checkpoint")

    def _settle_runs(self) -> None:
        """Log each pending run that is now complete or failed (failed ones get error.txt with the tracebacks)."""
        plan = self.plan
        for k in sorted(self.pending_runs):
            rp = plan.runs[k]
            status, error, _ = run_status(plan, rp)
            if status not in ("complete", "failed", PRUNED):
                continue
            self.pending_runs.discard(k)
            self.done_count += 1
            wall = time.time() - self.t0
            self.run_info[k] = {"elapsed_s": round(wall, 2)}
            own = self.stage_time.get(k, 0.0)
            if status == "complete":
                scores = read_json(plan.nodes[rp.eval_node].run_dir / METRICS_FILE)
                tail = "; test " + ", ".join(f"{m} {scores[m]:.4f}" for m in ("BLEU_4", "ROUGE_L", "ce_micro_f1")
                                             if isinstance(scores.get(m), int | float))
            elif status == PRUNED:  # stopped on purpose: no error.txt
                tail = f"; {error}"
            else:
                tail = f"; {error}"
                tb = "\n\n".join(plan.nodes[i].traceback for i in (*rp.stages.values(), rp.eval_node)
                                 if plan.nodes[i].traceback)
                (rp.dir / "error.txt").write_text((error or "") + "\n\n" + tb)
            self.say(f"{self.done_count}/{len(self.selected)} {k[0]} seed {k[1]}: {status} "
                     f"(stages {own:.0f}s, elapsed {wall:.0f}s){tail}")
