"""`--executor slurm` (harness/experiments/slurm.py) and the presets' `resources:` (harness/experiments/resources.py).

The first tests need no cluster. The last one runs a real tiny study on the Slurm cluster that .ci/slurm/start.sh
starts on the CI machine (it skips, saying why, where `sinfo` does not answer): every node a job, inputs as afterok
dependencies, one RL job killed after its first checkpoint (SIGKILL) and another sent SIGTERM by Slurm (as before a
preemption: it checkpoints and exits 75), both submitted again, and the study's table identical to the same study
run by the local executor.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from harness.cli import main
from harness.config import ConfigError
from harness.experiments import load_study, run_experiment
from harness.experiments.resources import Resources, check_resources
from harness.experiments.slurm import SlurmOptions
from harness.experiments.slurm_queue import JobState, outcome
from harness.runs.preemption import REQUEUE_EXIT_CODE
from harness.runs.records import read_json, read_jsonl
from tests.harness.test_experiments import TINY_PRESET, write_study
from tests.tiny_sizes import TINY

# ---------------------------------------------------------------------------------------------------------
# Without a cluster


@pytest.mark.parametrize(("state", "exit_code", "has_result", "expected"), [
    ("PENDING", None, False, "active"),
    ("RUNNING", None, False, "active"),
    ("COMPLETED", "0:0", True, "result"),
    ("FAILED", "1:0", True, "result"),                       # the node failed: its failure file is the result
    ("FAILED", f"{REQUEUE_EXIT_CODE}:0", False, "resubmit"),  # the stage checkpointed and asked to be run again
    ("FAILED", "137:0", False, "resubmit"),                  # srun: the task was killed by SIGKILL
    ("FAILED", "0:9", False, "resubmit"),                    # killed by a signal, as sbatch reports it
    ("PREEMPTED", "0:15", False, "resubmit"),
    ("NODE_FAIL", None, False, "resubmit"),
    ("TIMEOUT", "0:15", False, "resubmit"),
    ("CANCELLED", "143:0", False, "resubmit"),
    (None, None, False, "resubmit"),                         # gone from the queue without a result
    ("FAILED", "1:0", False, "failed"),                      # e.g. the job's python could not start
    ("OUT_OF_MEMORY", "0:125", False, "failed"),
])
def test_what_the_runner_does_with_an_ended_job(state, exit_code, has_result, expected):
    assert outcome(JobState(state, None, exit_code), has_result) == expected


def test_resources_default_then_kind_key_by_key():
    res = check_resources({"default": {"cpus": 8, "mem_gb": 64}, "rl": {"gpus": 8, "time_min": 2880}}, "p.yaml")
    assert res["warmup"] == Resources(gpus=0, cpus=8, mem_gb=64, time_min=60)
    assert res["rl"] == Resources(gpus=8, cpus=8, mem_gb=64, time_min=2880)
    assert check_resources(None, "p.yaml")["eval"] == Resources()


@pytest.mark.parametrize(("value", "message"), [
    ({"rll": {"gpus": 1}}, r"p.yaml: unknown kind 'rll' under 'resources'"),
    ({"rl": {"gpu": 1}}, r"resources.rl: unknown key 'gpu'; valid: gpus, cpus, mem_gb, time_min"),
    ({"rl": {"gpus": -1}}, r"resources.rl.gpus must be an integer >= 0, got -1"),
    ({"sft": {"cpus": 0}}, r"resources.sft.cpus must be an integer >= 1, got 0"),
    ({"eval": {"mem_gb": "lots"}}, r"resources.eval.mem_gb must be a number > 0, got 'lots'"),
    ([1], r"'resources' must map node kinds"),
])
def test_bad_resources_name_the_key(value, message):
    with pytest.raises(ConfigError, match=message):
        check_resources(value, "p.yaml")


def test_every_preset_asks_for_resources_and_a_study_can_override_them(tmp_path):
    presets = sorted((TINY_PRESET.parent).glob("*.yaml"))
    for preset in presets:
        study = load_study(write_study(tmp_path, "  - name: a\n"), preset=preset)
        assert all(isinstance(r, Resources) for r in study.resources.values()), preset.name
    big = load_study(write_study(tmp_path, "  - name: a\n"), preset=TINY_PRESET.parent / "mimic-qwen2.5vl-7b.yaml")
    assert big.resources["rl"].gpus >= 2 and big.resources["classifier"].gpus == 1
    study = load_study(write_study(tmp_path, "  - name: a\n"), sets=["resources.rl.gpus=2"])
    assert study.resources["rl"].gpus == 2 and study.resources["sft"].gpus == 0


def test_a_7b_rl_job_asks_for_8_gpus_and_runs_its_stage_under_torchrun(tmp_path):
    """The sbatch parameters of one node, as the runner builds them (no cluster needed)."""
    from harness.experiments import build_plan
    from harness.experiments.graph_run import needed_order
    from harness.experiments.slurm import SlurmExperimentRun

    study = load_study(write_study(tmp_path, "  - name: a\n", seeds="[0]"),
                       preset=TINY_PRESET.parent / "mimic-qwen2.5vl-7b.yaml",
                       sets=["common.data.annotation=/data/a.json", "common.data.image_dir=/data/images"])
    plan = build_plan(study, tmp_path / "out")
    selected = list(plan.runs)
    assert needed_order(plan, selected)
    run = SlurmExperimentRun(plan, selected, {"rl": "harness.stages.rl:run_rl"}, lambda s: None, [], None, 1,
                             False, SlurmOptions(sbatch={"partition": "gpu", "account": "lab"}))
    rl = next(n for n in plan.nodes.values() if n.kind == "rl")
    res = study.resources["rl"]
    params = run.backend._parameters(rl, res, ["41", "42"])
    assert (params["gpus_per_node"], params["cpus_per_task"], params["mem"], params["time"]) == \
           (8, 64, "524288M", 2880)
    assert params["additional_parameters"] == {"signal": "USR1@120", "partition": "gpu", "account": "lab",
                                               "dependency": "afterok:41:42"}
    assert run.backend._launcher("rl", res).endswith("-m torch.distributed.run --standalone --nproc_per_node 8")
    assert run.backend._launcher("classifier", study.resources["classifier"]) is None
    assert run.backend._launcher("eval", study.resources["eval"]) is None
    clf = next(n for n in plan.nodes.values() if n.kind == "classifier")
    assert run.backend._parameters(clf, study.resources["classifier"], [])["gpus_per_node"] == 1


def test_a_stage_over_two_nodes_runs_one_torchrun_agent_per_node_with_a_c10d_rendezvous(tmp_path, monkeypatch):
    """resources.rl.nodes = 2: sbatch --nodes 2, one task per node, each task torchrun with --nnodes 2 meeting on
    the first node (no cluster needed: the parameters and the launcher as the job fills it in)."""
    from harness.experiments import build_plan, slurm_job
    from harness.experiments.slurm import SlurmExperimentRun
    from harness.experiments.slurm_job import rendezvous_launcher

    study = load_study(write_study(tmp_path, "  - name: a\n", seeds="[0]"), preset=TINY_PRESET.parent /
                       "mimic-qwen2.5vl-7b.yaml", sets=["common.data.annotation=/data/a.json",
                                                       "common.data.image_dir=/data/images",
                                                       "resources.rl.nodes=2"])
    assert study.resources["rl"].nodes == 2 and study.resources["sft"].nodes == 1
    plan = build_plan(study, tmp_path / "out")
    run = SlurmExperimentRun(plan, list(plan.runs), {}, lambda s: None, [], "torchrun --nproc_per_node 8", 1,
                             False, SlurmOptions(python="/venv/bin/python"))
    rl = next(n for n in plan.nodes.values() if n.kind == "rl")
    params = run.backend._parameters(rl, study.resources["rl"], [])
    assert (params["nodes"], params["ntasks_per_node"], params["gpus_per_node"]) == (2, 1, 8)
    launcher = run.backend._launcher("rl", study.resources["rl"])  # across nodes, not the one-node --launcher
    assert launcher == ("/venv/bin/python -m torch.distributed.run --nnodes 2 --nproc_per_node 8 "
                        "--rdzv_backend c10d --rdzv_endpoint {rdzv_host}:{rdzv_port} --rdzv_id {rdzv_id}")
    assert run.backend._launcher("sft", study.resources["sft"]) == "torchrun --nproc_per_node 8"

    def scontrol(cmd, **kwargs):
        assert cmd == ["scontrol", "show", "hostnames", "gpu[07-08]"]
        return subprocess.CompletedProcess(cmd, 0, stdout="gpu07\ngpu08\n")

    monkeypatch.setattr(slurm_job.subprocess, "run", scontrol)
    filled = rendezvous_launcher(launcher, {"SLURM_JOB_ID": "123456", "SLURM_JOB_NODELIST": "gpu[07-08]"})
    assert filled.endswith("--rdzv_endpoint gpu07:29856 --rdzv_id 123456")


def test_a_stage_over_two_nodes_says_that_it_does_not_use_the_one_node_launcher(tmp_path):
    """--launcher is for one node: a stage spanning nodes runs torchrun with a rendezvous instead, and the runner's
    submission line says so (before, the user's --launcher was dropped for that stage without a word)."""
    from harness.experiments import build_plan
    from harness.experiments.slurm import SlurmExperimentRun

    study = load_study(write_study(tmp_path, "  - name: a\n", seeds="[0]"), preset=TINY_PRESET.parent /
                       "mimic-qwen2.5vl-7b.yaml", sets=["common.data.annotation=/data/a.json",
                                                       "common.data.image_dir=/data/images",
                                                       "resources.rl.nodes=2"])
    plan = build_plan(study, tmp_path / "out")
    lines: list[str] = []
    run = SlurmExperimentRun(plan, list(plan.runs), {"rl": "m:f", "sft": "m:f"}, lines.append, [],
                             "torchrun --nproc_per_node 8", 1, False, SlurmOptions(python="/venv/bin/python"))

    class Queue:  # stands in for submitit's executor: takes the parameters, hands out job ids
        def update_parameters(self, **kwargs):
            pass

        def submit(self, *args):
            return type("Job", (), {"job_id": 100 + len(lines)})()

    run.backend.executor = Queue()
    rl = next(nid for nid, n in plan.nodes.items() if n.kind == "rl")
    sft = next(nid for nid, n in plan.nodes.items() if n.kind == "sft")
    run.backend._submit(sft, plan.nodes[sft])
    run.backend._submit(rl, plan.nodes[rl])
    assert "not --launcher" not in lines[0]
    assert lines[1].endswith("; over 2 nodes it runs torchrun with a rendezvous, not --launcher")


@pytest.mark.parametrize("kind", ["default", "eval", "classifier"])
def test_only_launched_stages_span_nodes(kind):
    with pytest.raises(ConfigError, match=rf"p.yaml: resources.{kind}.nodes must be 1, got 2: only warmup, sft, rl"):
        check_resources({kind: {"nodes": 2}}, "p.yaml")
    with pytest.raises(ConfigError, match=r"resources.rl.nodes must be an integer >= 1, got 0"):
        check_resources({"rl": {"nodes": 0}}, "p.yaml")


def test_slurm_options_from_the_command_line_are_checked(tmp_path, capsys):
    path = write_study(tmp_path, "  - name: a\n", seeds="[0]")
    out = str(tmp_path / "out")
    assert main(["experiment", "run", str(path), "--out", out, "--executor", "slurm", "--sbatch", "partition"]) != 0
    assert "--sbatch 'partition' must look like KEY=VALUE" in capsys.readouterr().err
    assert main(["experiment", "run", str(path), "--out", out, "--sbatch", "partition=gpu"]) != 0
    assert "--sbatch goes with --executor slurm" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_function_objects_cannot_travel_to_jobs(tmp_path, monkeypatch):
    from harness.experiments import slurm_queue

    # A cluster that answers, on any machine: before, the runner read its own copy of the name, so on a machine whose
    # Slurm did not answer this test met "sinfo failed" instead (the suite was green only beside a controller).
    monkeypatch.setattr(slurm_queue, "slurm_available", lambda: None)
    study = load_study(write_study(tmp_path, "  - name: a\n", seeds="[0]"))
    with pytest.raises(ConfigError, match="give 'module:function' names, not function objects"):
        run_experiment(study, tmp_path / "out", functions={"rl": lambda cfg, progress=False: None},
                       executor="slurm", log=lambda s: None)


def test_status_of_a_local_experiment_lists_its_stage_runs(tmp_path, capsys):
    from tests.harness.test_experiments import FAKES

    os.environ["REGBENCH_TEST_CALLS"] = str(tmp_path / "calls.jsonl")
    try:
        study = load_study(write_study(tmp_path, "  - name: a\n    pipeline: [warmup, rl]\n", seeds="[0]"))
        assert run_experiment(study, tmp_path / "out", workers=1, functions=FAKES, log=lambda s: None).ok
    finally:
        del os.environ["REGBENCH_TEST_CALLS"]
    assert main(["experiment", "status", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "toy (local executor): 1 complete" in text
    assert "a seed 0" in text and "warmup" in text and "rl" in text


def signalled_before_its_stage(cfg, progress=False):
    """A node whose job gets SIGTERM before its stage installs its own handlers (while it imports and loads)."""
    from tests.harness.runs.test_faults import p_warmup

    os.kill(os.getpid(), signal.SIGTERM)
    return p_warmup(cfg, progress)


_JOB = """
import json, sys
from harness.experiments.slurm_job import run_job
run_job("warmup", "tests.harness.test_slurm:signalled_before_its_stage", json.loads(sys.argv[1]), None, None)
"""


def test_a_job_signalled_before_its_stage_starts_checkpoints_and_exits_75(tmp_path):
    """What a job runs (run_job) handles the stop signals from its start: a SIGTERM during the imports, before the
    stage's own handlers, is honoured by the stage at its first step (before: the job died of it)."""
    import sys

    from harness.config import RunConfig, to_dict
    from harness.runs import preemption

    cfg = RunConfig()
    cfg.out_dir = str(tmp_path / "warmup")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
           "REGBENCH_TEST_CALLS": str(tmp_path / "calls.jsonl")}
    p = subprocess.run([sys.executable, "-c", _JOB, json.dumps(to_dict(cfg))], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == REQUEUE_EXIT_CODE, p.stdout[-2000:] + p.stderr[-2000:]
    rows = read_jsonl(tmp_path / "warmup" / preemption.PREEMPTIONS_FILE)
    assert [(r["stage"], r["step"], r["signal"]) for r in rows] == [("warmup", 0, "SIGTERM")]


class _FakeSubmitit:
    """submitit.SlurmExecutor without a cluster: job ids 1, 2, ..."""

    submitted: list[str] = []

    def __init__(self, folder, python):
        pass

    def update_parameters(self, **kwargs):
        pass

    def submit(self, fn, kind, *args):
        from types import SimpleNamespace

        self.submitted.append(kind)
        return SimpleNamespace(job_id=str(len(self.submitted)))


def test_the_slurm_runner_stops_watching_on_a_stop_signal_and_leaves_its_jobs_queued(tmp_path, monkeypatch):
    """SIGTERM to the runner while its jobs run: it submits nothing more, stops watching, keeps the jobs queued
    (a rerun takes them over) and ends preempted (exit 75); before, it watched on."""
    import submitit

    from harness.experiments import slurm_queue
    from harness.runs import preemption
    from tests.harness.test_experiments import FAKES

    looks, cancelled = {"n": 0}, []

    def states(self, job_ids):
        if not job_ids:
            return {}
        looks["n"] += 1
        if looks["n"] == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # the scheduler stops the runner's own job
        assert looks["n"] < 5, "the runner kept watching the queue after its stop signal"
        return {j: JobState("RUNNING") for j in job_ids}

    monkeypatch.setattr(slurm_queue, "slurm_available", lambda: None)
    monkeypatch.setattr(submitit, "SlurmExecutor", _FakeSubmitit)
    monkeypatch.setattr(_FakeSubmitit, "submitted", [])
    monkeypatch.setattr(slurm_queue.SlurmQueue, "states", states)
    monkeypatch.setattr(slurm_queue.SlurmQueue, "cancel", lambda self, ids: cancelled.extend(ids))
    study = load_study(write_study(tmp_path, "  - name: a\n", seeds="[0]", extra="pipeline: [rl]\n"))
    lines: list[str] = []
    caught: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, _frame: caught.append(signum))  # (if not handled)
    try:
        res = run_experiment(study, tmp_path / "out", functions=FAKES, log=lines.append, executor="slurm",
                             slurm=SlurmOptions(poll_s=0.01))
    finally:
        signal.signal(signal.SIGTERM, before)
        preemption.clear()
    assert res.preempted
    assert _FakeSubmitit.submitted == ["data", "pretrain", "rl", "eval"] and cancelled == []
    text = "\n".join(lines)
    assert "SIGTERM received: no new job is submitted; the queued ones go on" in text, text
    assert "4 job(s) left in the queue" in text
    jobs = read_json(tmp_path / "out" / "index.json")["slurm_jobs"]  # kept: the rerun adopts them
    assert sorted(j for v in jobs.values() for j in v) == ["1", "2", "3", "4"]


# ---------------------------------------------------------------------------------------------------------
# On a real cluster


def _cluster_answers() -> str | None:
    if shutil.which("sinfo") is None:
        return "no sinfo: no Slurm here (.ci/slurm/start.sh starts a one-node cluster as root on Debian)"
    p = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, check=False, timeout=30)
    if p.returncode != 0 or not any(s.strip() in ("idle", "mixed", "allocated") for s in p.stdout.split()):
        return f"the Slurm cluster does not answer (sinfo: {(p.stderr or p.stdout).strip() or 'no idle node'})"
    return None


def rl_killed_after_its_first_checkpoint(cfg, progress=False):
    """The RL stage; in the job of the `rer` arm's first try, SIGKILL of its own process as soon as its first
    checkpoint is on disk (what an OOM killer or a node's reboot does, mid-run)."""
    from harness.runs.checkpoint_io import checkpoint_step
    from harness.stages.rl import run_rl

    marker = Path(os.environ["REGBENCH_TEST_KILL_DIR"]) / f"{Path(cfg.out_dir).name}.killed"
    if marker.exists():  # the resubmitted job: the checkpoint it resumes from
        step = checkpoint_step(Path(cfg.out_dir) / "checkpoint" / "rl_state.pt")
        marker.with_suffix(".resumed").write_text(f"{step}\n")
    elif cfg.rl.regularizer == "rer":
        marker.write_text(f"{os.environ.get('SLURM_JOB_ID')}\n")
        checkpoint = Path(cfg.out_dir) / "checkpoint" / "rl_state.pt"

        def kill_at_checkpoint():
            while not checkpoint.exists():
                time.sleep(0.002)
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=kill_at_checkpoint, daemon=True).start()
    elif cfg.rl.regularizer == "constant":
        marker.write_text(f"{os.environ.get('SLURM_JOB_ID')}\n")
        _term_by_slurm_after_the_first_checkpoint()
    return run_rl(cfg, progress=progress)


def _term_by_slurm_after_the_first_checkpoint() -> None:
    """Once the first RL checkpoint is committed, ask Slurm to send SIGTERM to this job's steps (`scancel
    --signal=TERM`, what a preemption sends first) and wait until it has reached this process's handler: the stage
    then stops at its next step boundary, i.e. after step 1 of 3 (a signal in the last step would let it finish)."""
    from harness.runs import preemption
    from harness.training import checkpoints  # the one checkpoint protocol: its commit seals a generation

    commit = checkpoints.commit

    def commit_then_signal(*args, **kwargs):
        out = commit(*args, **kwargs)
        if preemption.requested() is None:
            # scancel runs inside this job step, so the SIGTERM it asks for reaches it too (linuxproc tracks the
            # step's process tree): it ignores the signal, else it may die before it returns (issue 46).
            subprocess.run(["scancel", "--signal=TERM", os.environ["SLURM_JOB_ID"]], check=True,
                           preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
            deadline = time.monotonic() + 120
            while preemption.requested() is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("SIGTERM from scancel did not reach the stage within 120 s")
                time.sleep(0.05)
        return out

    checkpoints.commit = commit_then_signal


def _table(out: Path) -> str:
    from reports.experiment import load_experiment
    from reports.tables.frame import results_frame
    from reports.tables.wide import to_csv

    return to_csv(results_frame(load_experiment(out)))


def _without(d: dict, *keys: str) -> dict:
    return {k: v for k, v in d.items() if k not in keys}


def _steps(run: Path) -> list[dict]:
    """steps.jsonl without its timings."""
    return [_without(json.loads(x), "step_time") for x in (run / "steps.jsonl").read_text().splitlines()]


def _weights(run: Path) -> dict[str, list]:
    from safetensors.torch import load_file

    return {k: v.tolist() for k, v in load_file(run / "model" / "adapter_model.safetensors").items()}


@pytest.mark.slow  # 180 s on 2 loaded cores (2026-12-02): make test-slow
@pytest.mark.slurm
def test_a_tiny_study_on_slurm_equals_the_local_run_with_a_killed_and_a_preempted_job_resubmitted(tmp_path,
                                                                                                 monkeypatch):
    why = _cluster_answers()
    if why:
        pytest.skip(why)
    arms = """  - name: a
    overrides: {rl: [rl.regularizer=rer, rl.reference=static]}
  - name: b
    overrides: {rl: [rl.regularizer=constant, rl.reference=static]}
"""
    sizes = ", ".join(t.replace("=", ": ") for t in TINY)
    extra = (f"pipeline: [rl]\ncommon: {{{sizes}, cache_dir: {tmp_path / 'cache'}}}\n"
             "resources: {default: {cpus: 1, mem_gb: 2, time_min: 20}}\n"
             "stages: {rl: {train: {max_steps: 3, checkpoint_every: 1}, rl: {prompts_per_step: 2, group_size: 2, "
             "max_new_tokens: 8, min_new_tokens: 2, val_max_samples: 4}}}\n")
    study = load_study(write_study(tmp_path, arms, seeds="[0]", name="slurm_e2e", extra=extra))
    local = run_experiment(study, tmp_path / "local", workers=1, log=lambda s: None)
    assert local.ok, local.index["runs"]

    kill_dir = tmp_path / "kills"
    kill_dir.mkdir()
    monkeypatch.setenv("REGBENCH_TEST_KILL_DIR", str(kill_dir))
    lines: list[str] = []

    def log(text: str) -> None:
        lines.append(text)
        print(text, flush=True)

    fns = {"rl": "tests.harness.test_slurm:rl_killed_after_its_first_checkpoint"}
    res = run_experiment(study, tmp_path / "slurm", functions=fns, log=log, executor="slurm",
                         slurm=SlurmOptions(poll_s=1.0, max_resubmits=2))
    assert res.ok, res.index["runs"]
    text = "\n".join(lines)
    # Every node a job, submitted at once with its inputs as afterok dependencies (stage 0 is the local run's,
    # in the shared cache: complete, so no job).
    # data, 2 x RL, 2 x eval, and both RL jobs again
    assert text.count("submitted ") == 5 + 2, text
    assert "submitted rl (a seed 0) as job" in text and ", afterok " in text
    # Both interrupted jobs: seen ended (killed by a signal; exit 75 after the SIGTERM), submitted again, and their
    # evaluations pointed at the new jobs.
    assert len(list(kill_dir.glob("*.killed"))) == 2
    assert text.count("interrupted, submitting it again (1/2); it resumes from its last checkpoint") == 2, text
    assert f"(exit {REQUEUE_EXIT_CODE}:0): interrupted" in text, text
    assert text.count("now waits on") >= 2
    runs = {r["arm"]: r for r in res.index["runs"]}
    for arm in ("a", "b"):
        first, second = runs[arm]["stages"]["rl"]["slurm_jobs"]
        assert first != second
    assert res.index["executor"] == "slurm" and len(res.index["slurm_jobs"]) == 5
    # The resubmitted jobs found the interrupted ones' checkpoints and resumed from them: the killed one from step
    # 1 or later, the preempted one from the step it stopped after (1), which its preemptions.jsonl records.
    resumed = {p.stem: p.read_text().strip() for p in kill_dir.glob("*.resumed")}
    rl_a, rl_b = (Path(runs[arm]["stages"]["rl"]["dir"]).name for arm in ("a", "b"))
    assert resumed[rl_a].isdigit() and 1 <= int(resumed[rl_a]) < 3, resumed
    assert resumed[rl_b] == "1", resumed
    stops = read_jsonl(tmp_path / "slurm" / runs["b"]["stages"]["rl"]["dir"] / "preemptions.jsonl")
    assert [(r["stage"], r["step"], r["signal"]) for r in stops] == [("rl", 1, "SIGTERM")]
    assert not (tmp_path / "slurm" / runs["a"]["stages"]["rl"]["dir"] / "preemptions.jsonl").exists()
    # ... and ended where the uninterrupted local run did: the same table, steps, weights and test reports.
    assert _table(tmp_path / "slurm") == _table(tmp_path / "local")
    for arm in ("a", "b"):
        ours, theirs = (tmp_path / "slurm" / runs[arm]["dir"], tmp_path / "local" / runs[arm]["dir"])
        assert _without(read_json(ours / "eval" / "metrics.json"), "model_dir") == \
               _without(read_json(theirs / "eval" / "metrics.json"), "model_dir")
        assert _steps(ours / "rl") == _steps(theirs / "rl") and len(_steps(ours / "rl")) == 3
        assert _weights(ours / "rl") == _weights(theirs / "rl")
        assert (ours / "eval" / "predictions_final_test.jsonl").read_text() == \
               (theirs / "eval" / "predictions_final_test.jsonl").read_text()
    # `regbench experiment status` lists the jobs with their queue state.
    from harness.experiments.slurm import experiment_status

    status = experiment_status(tmp_path / "slurm")
    print(status)
    assert f"{second:<10} COMPLETED" in status and "slurm_e2e (slurm executor): 2 complete" in status


@pytest.mark.slow  # ~2-4 min on 2 loaded cores (2026-12-04)
@pytest.mark.slurm
def test_a_warmup_over_two_nodes_runs_as_two_slurm_tasks_meeting_through_a_c10d_rendezvous(tmp_path, monkeypatch):
    """resources.warmup.nodes = 2 on the one-node test cluster: the job's two tasks stand for two nodes (the
    sbatch shape is changed to 1 node x 2 tasks, the launcher is the multi-node one), each a torchrun agent with
    one CPU rank (gloo); the 2-step warm-up trains on 2 processes and task 1 logs to launch.node1.log."""
    why = _cluster_answers()
    if why:
        pytest.skip(why)
    from harness.experiments.slurm import SlurmJobs

    parameters = SlurmJobs._parameters

    def two_tasks_on_one_node(self, node, res, after):
        params = parameters(self, node, res, after)
        if res.nodes > 1:
            params.update(nodes=1, ntasks_per_node=res.nodes)
        return params

    monkeypatch.setattr(SlurmJobs, "_parameters", two_tasks_on_one_node)
    sizes = ", ".join(t.replace("=", ": ") for t in TINY)
    extra = (f"pipeline: [warmup]\ncommon: {{{sizes}, cache_dir: {tmp_path / 'cache'}}}\n"
             "resources: {default: {cpus: 1, mem_gb: 2, time_min: 20}, warmup: {nodes: 2, mem_gb: 4}}\n"
             "stages: {warmup: {train: {max_steps: 2, batch_size: 4}}}\n")
    study = load_study(write_study(tmp_path, "  - name: a\n", seeds="[0]", name="two_nodes", extra=extra))
    lines: list[str] = []

    def log(text: str) -> None:
        lines.append(text)
        print(text, flush=True)

    res = run_experiment(study, tmp_path / "out", log=log, executor="slurm", slurm=SlurmOptions(poll_s=1.0))
    run = res.index["runs"][0]
    stage_dir = tmp_path / "out" / run["stages"]["warmup"]["dir"]
    for name in ("launch.log", "launch.node1.log"):
        if (stage_dir / name).is_file():
            print(f"==> {name}\n{(stage_dir / name).read_text()}")
    assert res.ok, run
    assert "submitted warmup (a seed 0) as job" in "\n".join(lines) and "x 2 nodes" in "\n".join(lines)
    assert read_json(stage_dir / "metrics.json")["processes"] == 2
    assert len(read_jsonl(stage_dir / "steps.jsonl")) >= 1
    for name in ("launch.log", "launch.node1.log"):
        text = (stage_dir / name).read_text()
        assert "--nnodes 2 --nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint vm:" in text, name


def test_a_pruned_search_stays_on_the_local_executor(tmp_path):
    from harness.search.file import load_search
    from harness.search.run import run_search

    search = load_search(Path(__file__).resolve().parents[2] / "experiments" / "searches" / "rer_bounds.yaml",
                         sets=["pruner={name: median, n_startup_trials: 2}"])
    with pytest.raises(ConfigError, match="the local executor"):
        run_search(search, tmp_path / "out", executor="slurm", log=lambda s: None)
    assert not (tmp_path / "out").exists()


@pytest.mark.slurm
def test_a_failing_stage_job_fails_its_arm_and_its_evaluation_leaves_the_queue(tmp_path, monkeypatch):
    """Fake stages (tests/harness/test_experiments.py) in real jobs: arm b's RL raises; its job fails with the
    stage's error recorded, the evaluation waiting on it is cancelled, arm a completes."""
    why = _cluster_answers()
    if why:
        pytest.skip(why)
    from tests.harness.test_experiments import FAKES

    monkeypatch.setenv("REGBENCH_TEST_CALLS", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("REGBENCH_TEST_FAIL_REG", "constant")
    arms = ("  - name: a\n    overrides: {rl: [rl.regularizer=rer]}\n"
            "  - name: b\n    overrides: {rl: [rl.regularizer=constant]}\n")
    study = load_study(write_study(tmp_path, arms, seeds="[0]", extra="pipeline: [rl]\n"))
    lines: list[str] = []
    res = run_experiment(study, tmp_path / "out", functions=FAKES, log=lines.append, executor="slurm",
                         slurm=SlurmOptions(poll_s=1.0))
    runs = {r["arm"]: r for r in res.index["runs"]}
    assert res.failed == [("b", 0)] and runs["a"]["status"] == "complete"
    assert runs["b"]["failed_stage"] == "rl" and "fake RL blew up" in runs["b"]["error"]
    assert "fake RL blew up" in (tmp_path / "out" / "b" / "seed0" / "error.txt").read_text()
    text = "\n".join(lines)
    assert f"cancelled job {runs['b']['eval_slurm_jobs'][0]} of eval (b seed 0)" in text, text
    assert "submitting it again" not in text  # a real failure is not an interruption


_RUNNER = """
import sys
from harness.experiments import load_study, run_experiment
from harness.experiments.slurm import SlurmOptions
from tests.harness.test_experiments import FAKES
run_experiment(load_study(sys.argv[1]), sys.argv[2], functions=FAKES, executor="slurm",
               slurm=SlurmOptions(poll_s=1.0, sbatch={"begin": "now+20"}))  # none starts before the kill
"""


@pytest.mark.slow  # 52 s on 2 loaded cores (2026-12-02): make test-slow
@pytest.mark.slurm
def test_a_killed_runner_leaves_its_jobs_queued_and_the_next_one_takes_them_over(tmp_path, monkeypatch):
    why = _cluster_answers()
    if why:
        pytest.skip(why)
    import sys

    monkeypatch.setenv("REGBENCH_TEST_CALLS", str(tmp_path / "calls.jsonl"))
    path = write_study(tmp_path, "  - name: a\n", seeds="[0]", extra="pipeline: [rl]\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    runner = subprocess.Popen([sys.executable, "-c", _RUNNER, str(path), str(out)], env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until its jobs (data, stage 0, RL, eval; one pass) are in the index
            try:
                if "eval:a:0" in read_json(out / "index.json").get("slurm_jobs", {}):
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        else:
            pytest.fail("the runner did not submit its jobs within 120 s")
    finally:
        runner.kill()
        runner.wait()
    from tests.harness.test_experiments import FAKES

    jobs = read_json(out / "index.json")["slurm_jobs"]
    (data_node,) = [n for n in jobs if n.startswith("data:")]
    subprocess.run(["scancel", jobs[data_node][-1]], check=True)  # and the data set's job goes too
    lines: list[str] = []
    res = run_experiment(load_study(path), out, functions=FAKES, log=lines.append, executor="slurm",
                         slurm=SlurmOptions(poll_s=1.0))
    assert res.ok, res.index["runs"]
    text = "\n".join(lines)
    # The jobs still queued (RL, eval, and stage 0's where no earlier test of the session cached a base) are taken
    # over, not submitted twice; the data set's job is submitted again and the two jobs that waited on the
    # cancelled one wait on the new one.
    assert text.count("took over job ") == len(jobs) - 1 and text.count("submitted ") == 1, text
    assert "submitted data (a seed 0)" in text and text.count("now waits on") == 2
    after = read_json(out / "index.json")["slurm_jobs"]
    assert len(after[data_node]) == 2 and {k: v for k, v in after.items() if k != data_node} == \
        {k: v for k, v in jobs.items() if k != data_node}
