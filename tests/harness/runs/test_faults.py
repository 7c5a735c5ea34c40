"""Fault injection (issue 26): preemption at random points of every training loop (mid-step, mid-validation,
mid-checkpoint, before the first step), through the experiment runner too; torn checkpoint files; a full disk
at checkpoint time (a write hook, and a real 1 MB tmpfs where the tests run as root).

Every preempted run is resumed in a fresh trainer (nothing but the run folder carries over) and must end with
the parameters and records of an uninterrupted run, bit for bit (timings aside)."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from harness.config.names import signal_numbers
from harness.runs import checkpoint_io, preemption
from harness.runs.checkpoint_io import CheckpointError, resume_folder, save_state
from harness.runs.durable import DiskFullError
from harness.runs.records import RunDir, read_jsonl

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def prompt_set(xray_images):
    from harness.prompting.samples import PromptSet

    refs = ["the heart size is normal .", "mild cardiomegaly . small left pleural effusion ."]
    return PromptSet([f"s{i}" for i in range(4)], [[xray_images[i]] for i in range(4)], ["write"] * 4,
                     [refs[i % 2] for i in range(4)])


@pytest.fixture(autouse=True)
def _no_stop_left():
    preemption.clear()
    yield
    preemption.clear()


def _without_times(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if "time" not in k} for r in rows]


def _signal_self(name: str = "SIGTERM") -> None:
    os.kill(os.getpid(), getattr(signal, name))


# ---------------------------------------------------------------------------------------------------------
# The signal handling


def test_a_stop_signal_only_sets_the_flag_and_the_earlier_handler_comes_back():
    before = signal.getsignal(signal.SIGUSR1)
    with preemption.handling(["SIGUSR1"]):
        _signal_self("SIGUSR1")
        assert preemption.requested() == "SIGUSR1"
        assert preemption.stop_agreed() is True
    assert signal.getsignal(signal.SIGUSR1) == before


def test_signal_names_are_checked():
    assert [s.name for s in signal_numbers(["TERM", "SIGUSR1", "12"])] == ["SIGTERM", "SIGUSR1", "SIGUSR2"]
    with pytest.raises(ValueError, match=r"train.preempt_signals: 'SIGFOO' is not a signal name"):
        signal_numbers(["SIGFOO"])
    with pytest.raises(ValueError, match="SIGKILL cannot ask a run to stop"):
        signal_numbers(["SIGKILL"])


def _agree_worker(rank: int, world: int, port: int, out: str) -> None:
    from tests.harness.parallel.test_distributed import _env

    _env(rank, world, port)
    from harness.parallel.distributed import finalize, init_distributed

    dist = init_distributed(60.0, 60.0)
    stopped = None
    for step in range(6):
        if rank == 1 and step == 2:
            preemption.request("SIGTERM")  # only rank 1 is signalled
        if preemption.stop_agreed(dist):
            stopped = step
            break
    Path(out, f"stop{rank}").write_text(str(stopped))
    finalize()


def test_every_rank_stops_after_the_same_step_when_one_is_signalled(tmp_path):
    from tests.harness.parallel.test_distributed import _launch

    _launch(_agree_worker, 2, str(tmp_path))
    assert [(tmp_path / f"stop{r}").read_text() for r in (0, 1)] == ["2", "2"]


# ---------------------------------------------------------------------------------------------------------
# RL: preempted at random points, resumed in a fresh trainer


def _rl_trainer(tiny_tokenizer, tiny_processor, run_dir, prompts, scores):
    from harness.models.tiny import build_tiny_model
    from tests.harness.grpo.test_trainer import _trainer

    model = build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=1, vision_hidden=16,
                             vision_depth=1, image_size=56)
    return _trainer(model, tiny_processor, run_dir, prompts, scores=list(scores), regularizer="rer",
                    reference="vapr", reset_every_epochs=1, epochs=2, val_every_steps=1)


SCORES = [0.1, 0.3, 0.2, 0.4, 0.35, 0.5, 0.45, 0.6]
# The RL run: 4 steps (2 epochs), a validation before the first step and after every step, a checkpoint after
# every validation but the first. Points drawn at random among those a step follows (a signal during the last
# step, validation or checkpoint lets the run finish instead: nothing is left to stop).
_rng = random.Random(26)
RL_POINTS = [("step", _rng.randint(1, 3)), ("validation", _rng.randint(2, 4)), ("checkpoint", _rng.randint(1, 3)),
             ("validation", 1)]  # the validation before the first step


def _rl_state(tr) -> dict:
    return {"params": [p.detach().clone() for p in tr.store.parameters()], "steps": _without_times(tr.run.steps()),
            "evals": tr.run.evals(), "best": tr.best.state_dict()}


def _inject(tr, monkeypatch, where: str, k: int) -> None:
    """Send SIGTERM to this process during the k-th optimizer step / validation / checkpoint write."""
    from harness.training import checkpoints  # the training loops' checkpoint protocol writes the file

    seen = {"n": 0}

    def hit():
        seen["n"] += 1
        if seen["n"] == k:
            _signal_self()

    if where == "step":
        real = tr.updater.update
        tr.updater.update = lambda *a, **kw: (hit(), real(*a, **kw))[1]
    elif where == "validation":
        real_v = tr.validate_fn
        tr.validate_fn = lambda m: (hit(), real_v(m))[1]
    else:
        real_w = checkpoints.write_state
        monkeypatch.setattr(checkpoints, "write_state", lambda *a: (hit(), real_w(*a))[1])


@pytest.mark.parametrize(("where", "k"), RL_POINTS, ids=[f"{w}{k}" for w, k in RL_POINTS])
def test_rl_preempted_mid_way_resumes_to_the_uninterrupted_run(where, k, tiny_tokenizer, tiny_processor, tmp_path,
                                                               prompt_set, monkeypatch):
    whole = _rl_trainer(tiny_tokenizer, tiny_processor, tmp_path / "whole", prompt_set, SCORES)
    whole.train()
    want = _rl_state(whole)

    first = _rl_trainer(tiny_tokenizer, tiny_processor, tmp_path / "cut", prompt_set, SCORES)
    _inject(first, monkeypatch, where, k)
    with preemption.handling(), pytest.raises(preemption.Preempted, match="preempted by SIGTERM") as stop:
        first.train()
    monkeypatch.undo()
    done = len(first.run.evals())  # validations done (each consumed one score)
    assert stop.value.step == first.step
    preemption.clear()
    resumed = _rl_trainer(tiny_tokenizer, tiny_processor, tmp_path / "cut", prompt_set, SCORES[done:])
    resumed.train()
    got = _rl_state(resumed)
    assert all(torch.equal(a, b) for a, b in zip(got["params"], want["params"], strict=True))
    assert (got["steps"], got["evals"], got["best"]) == (want["steps"], want["evals"], want["best"])
    rows = read_jsonl(tmp_path / "cut" / preemption.PREEMPTIONS_FILE)
    assert [(r["stage"], r["step"], r["signal"]) for r in rows] == [("rl", stop.value.step, "SIGTERM")]


# ---------------------------------------------------------------------------------------------------------
# Supervised stages (warm-up, SFT, stage 0 share the loop) and the classifier


def _lm_setup(tiny_tokenizer, xray_images):
    from harness.config import TrainConfig
    from harness.models.tiny import build_tiny_model
    from harness.models.trainable import set_trainable
    from harness.stages.lm_train import LMData

    model = build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=1, vision_hidden=16,
                             vision_depth=1, image_size=56)
    set_trainable(model, "pretrain")
    data = LMData([[im] for im in xray_images], ["write"] * 4, ["the heart is normal .", "mild cardiomegaly .",
                                                                "the lungs are clear .", "no effusion ."])
    cfg = TrainConfig(epochs=3, batch_size=2, lr=1e-3, scheduler="cosine", checkpoint_every=0)
    return model, data, cfg


@pytest.mark.parametrize("where", ["step", "validation"])
def test_supervised_loop_preempted_resumes_to_the_uninterrupted_run(where, tiny_tokenizer, tiny_processor,
                                                                    xray_images, tmp_path, monkeypatch):
    from harness.stages import lm_train

    def run(folder, inject: bool):
        model, data, cfg = _lm_setup(tiny_tokenizer, xray_images)
        run_dir = RunDir(folder)
        if inject:
            seen = {"n": 0}
            target = "_backward" if where == "step" else "eval_loss"
            real = getattr(lm_train, target)

            def hooked(*a, **kw):
                seen["n"] += 1
                if seen["n"] == 3 - (where == "validation"):
                    _signal_self()
                return real(*a, **kw)

            monkeypatch.setattr(lm_train, target, hooked)
        lm_train.train_lm(model, tiny_processor, data, data, cfg, run_dir, seed=3, max_report_tokens=10,
                          progress=False)
        monkeypatch.undo()
        return model, run_dir

    whole, whole_run = run(tmp_path / "whole", False)
    with preemption.handling(), pytest.raises(preemption.Preempted):
        run(tmp_path / "cut", True)
    monkeypatch.undo()
    preemption.clear()
    resumed, cut_run = run(tmp_path / "cut", False)
    for (n, a), (_, b) in zip(whole.named_parameters(), resumed.named_parameters(), strict=True):
        assert torch.equal(a, b), n
    assert _without_times(cut_run.steps()) == _without_times(whole_run.steps())
    assert cut_run.evals() == whole_run.evals()
    assert preemption.count(tmp_path / "cut") == 1


def _classifier_data():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(22, 3, 32, 32, generator=g)
    y = (torch.rand(22, 14, generator=g) > 0.7).float()
    return x[:16], y[:16], x[16:], y[16:]


@pytest.mark.parametrize("stop_after", [2, 3, 7])  # mid-epoch 1, at the end of epoch 1, mid-epoch 3 (3 per epoch)
def test_classifier_preempted_resumes_to_the_uninterrupted_run(stop_after, tmp_path):
    from harness.models.classifier import ClassifierConfig, build_classifier, train_classifier

    cfg = ClassifierConfig(arch="tiny_cnn", img_size=32, epochs=3, batch_size=6, lr=1e-3, seed=5)
    data = _classifier_data()

    def fresh():
        torch.manual_seed(0)
        return build_classifier(cfg)

    torch.manual_seed(1)
    whole = fresh()
    want = train_classifier(whole, *data, cfg, progress=False)

    calls = {"n": 0}

    def stop() -> bool:
        calls["n"] += 1
        return calls["n"] >= stop_after

    ckpt = tmp_path / "checkpoint"
    torch.manual_seed(1)
    with pytest.raises(preemption.Preempted):
        train_classifier(fresh(), *data, cfg, progress=False, checkpoint_dir=ckpt, should_stop=stop)
    torch.manual_seed(123)  # another process: the global RNG comes from the checkpoint
    resumed_from = []
    resumed = fresh()
    got = train_classifier(resumed, *data, cfg, progress=False, checkpoint_dir=ckpt, on_resume=resumed_from.append)
    assert resumed_from and got == want
    for k, v in whole.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k]), k


# ---------------------------------------------------------------------------------------------------------
# Torn checkpoints


def _two_generations(folder: Path) -> None:
    save_state({"w": torch.arange(1000.0), "step": 1}, folder / "state.pt")
    save_state({"w": torch.arange(1000.0) * 2, "step": 2}, folder / "state.pt")


@pytest.mark.parametrize("tear", ["truncated", "flipped_byte", "empty", "missing_sums"])
def test_a_torn_latest_checkpoint_is_skipped_for_the_previous_one(tear, tmp_path):
    folder = tmp_path / "checkpoint"
    _two_generations(folder)
    latest = folder / "state.pt"
    data = bytearray(latest.read_bytes())
    if tear == "truncated":
        latest.write_bytes(data[: len(data) // 2])
    elif tear == "flipped_byte":
        data[len(data) // 2] ^= 0xFF
        latest.write_bytes(bytes(data))
    elif tear == "empty":  # renamed but never written: what a crash without fsync leaves
        latest.write_bytes(b"")
    else:
        (folder / checkpoint_io.SUMS_FILE).write_text("{")
    said = []
    found = resume_folder(folder, "state.pt", log=said.append)
    assert found == tmp_path / "checkpoint.prev"
    assert checkpoint_io.load_state(found / "state.pt")["step"] == 1
    assert len(said) == 1 and "skipped" in said[0] and "state.pt (step 1)" in said[0]


def test_a_generation_left_between_the_two_renames_is_resumed(tmp_path):
    folder = tmp_path / "checkpoint"
    _two_generations(folder)
    save_state({"w": torch.zeros(3), "step": 3}, tmp_path / "other" / "state.pt")
    (tmp_path / "other").rename(tmp_path / "checkpoint.new")  # sealed, not yet rotated in
    assert resume_folder(folder, "state.pt", log=None) == tmp_path / "checkpoint.new"
    # and an unsealed one (no SUMS.json: the crash came while writing it) is skipped
    (tmp_path / "checkpoint.new" / checkpoint_io.SUMS_FILE).unlink()
    assert resume_folder(folder, "state.pt", log=None) == folder


def test_every_generation_torn_is_a_clear_error(tmp_path):
    folder = tmp_path / "checkpoint"
    _two_generations(folder)
    for gen in (folder, tmp_path / "checkpoint.prev"):
        (gen / "state.pt").write_bytes(b"x")
    with pytest.raises(CheckpointError, match=r"no usable checkpoint: .*state\.pt: 1 bytes.*--restart"):
        resume_folder(folder, "state.pt")


def test_rl_resumes_past_a_torn_checkpoint_to_the_uninterrupted_run(tiny_tokenizer, tiny_processor, tmp_path,
                                                                    prompt_set, capsys):
    whole = _rl_trainer(tiny_tokenizer, tiny_processor, tmp_path / "whole", prompt_set, SCORES)
    whole.train()
    cut = _rl_trainer(tiny_tokenizer, tiny_processor, tmp_path / "cut", prompt_set, SCORES)
    cut.tcfg.max_steps = cut.total_steps = 3
    cut.train()
    latest = cut.ckpt_path
    latest.write_bytes(latest.read_bytes()[:1_000_000 // 1000])  # torn: the machine crashed while writing it
    capsys.readouterr()
    done = len([e for e in cut.run.evals() if e["step"] <= 2])  # the previous checkpoint is step 2's
    resumed = _rl_trainer(tiny_tokenizer, tiny_processor, tmp_path / "cut", prompt_set, SCORES[done:])
    resumed.train()
    assert "skipped" in capsys.readouterr().out
    want = _rl_state(whole)
    got = _rl_state(resumed)
    assert all(torch.equal(a, b) for a, b in zip(got["params"], want["params"], strict=True))
    assert got["steps"] == want["steps"]


# ---------------------------------------------------------------------------------------------------------
# A full disk


ENFORCE = "[enforce fail at inline_container.cc:664] . unexpected pos 1048576 vs 1048512"


def test_a_full_disk_at_the_rl_checkpoint_names_the_file_and_keeps_the_last_one(tiny_tokenizer, tiny_processor,
                                                                                 tmp_path, prompt_set, monkeypatch):
    """What torch says on a full disk (before: the message below, and a 1 MB rl_state.tmp left behind)."""
    from harness.runs import durable

    tr = _rl_trainer(tiny_tokenizer, tiny_processor, tmp_path / "run", prompt_set, SCORES)
    tr.tcfg.max_steps = tr.total_steps = 2
    real = checkpoint_io.torch.save
    calls = {"n": 0}

    def full_disk(obj, path):
        calls["n"] += 1
        if calls["n"] < 2:  # step 1's checkpoint is written; the disk is full at step 2's
            return real(obj, path)
        Path(path).write_bytes(b"\0" * 1_048_576)  # what torch had written when the disk filled up
        monkeypatch.setattr(durable, "free_bytes", lambda folder: 0)
        raise RuntimeError(ENFORCE)

    monkeypatch.setattr(checkpoint_io.torch, "save", full_disk)
    with pytest.raises(DiskFullError) as err:
        tr.train()
    msg = str(err.value)
    assert "rl_state.pt: no space left on the device writing the checkpoint; it needs about" in msg
    assert "MB" in msg and "rerun the same command" in msg
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith((".tmp", ".new"))]
    assert checkpoint_io.load_state(tr.ckpt_path)["step"] == 1  # the last complete checkpoint is untouched


def test_a_full_disk_during_data_synth_names_the_file(tmp_path, monkeypatch):
    """Before: `OSError: [Errno 28] No space left on device` without a path."""
    from harness.data.phantom import PhantomConfig, synthesize
    from harness.runs import records

    real_fdopen = os.fdopen
    written = {"n": 0}

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            written["n"] += 1
            if written["n"] > 5:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

    monkeypatch.setattr(records.os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    with pytest.raises(DiskFullError, match=r"images/\S+\.png: no space left on the device writing a file; it needs "
                                            r"about \d+ bytes"):
        synthesize(tmp_path / "synth", PhantomConfig(n=12, seed=0, image_size=32))
    assert not list((tmp_path / "synth").rglob("*.tmp"))


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 1 MB tmpfs (needs root and mount rights; skipped elsewhere)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_real_full_disk_at_checkpoint_time_and_during_data_synth(small_tmpfs):
    folder = small_tmpfs / "run" / "checkpoint"
    save_state({"w": torch.zeros(1000), "step": 1}, folder / "state.pt")
    with pytest.raises(DiskFullError, match=r"state\.pt: no space left .* it needs about 2\.0 MB"):
        save_state({"w": torch.zeros(500_000), "step": 2}, folder / "state.pt")
    assert sorted(p.name for p in small_tmpfs.rglob("*")) == ["SUMS.json", "checkpoint", "run", "state.pt"]
    assert resume_folder(folder, "state.pt") == folder
    from harness.data.phantom import PhantomConfig, synthesize

    with pytest.raises(DiskFullError, match=r"synth/\S+: no space left"):
        synthesize(small_tmpfs / "synth", PhantomConfig(n=400, seed=0, image_size=64))
    assert not [p for p in small_tmpfs.rglob("*") if p.name.endswith(".tmp")]


# ---------------------------------------------------------------------------------------------------------
# The command line and the experiment runner


def test_the_cli_exits_75_when_a_stage_is_preempted(monkeypatch, capsys):
    from harness.cli import main
    from harness.stages import warmup

    def preempted(cfg, progress=True):
        raise preemption.Preempted(f"warmup run {cfg.out_dir}", 4, "SIGTERM")

    monkeypatch.setattr(warmup, "run_warmup", preempted)
    monkeypatch.setattr("harness.cli.stage_commands.prepare_base", lambda *a, **k: None)
    rc = main(["train", "warmup", "out_dir=/nonexistent/x"])
    assert rc == preemption.REQUEUE_EXIT_CODE == 75
    assert "preempted by SIGTERM after step 4" in capsys.readouterr().err


STEPS = 8


def resumable_stage(stage: str):
    """A fake stage that is resumable and preemptible the way the real ones are: one row per step, a checkpoint
    after each, a stop signal honoured between steps; its numbers depend on the config only."""
    from tests.harness.test_experiments import _record

    def run(cfg, progress=False):
        _record(stage, cfg)
        with preemption.handling(cfg.train.preempt_signals):
            out = Path(cfg.out_dir)
            out.mkdir(parents=True, exist_ok=True)
            (out / "pid").write_text(str(os.getpid()))
            ckpt, log = out / "ckpt.json", out / "steps.jsonl"
            start = json.loads(ckpt.read_text())["step"] if ckpt.is_file() else 0
            rows = [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []
            log.write_text("".join(json.dumps(r) + "\n" for r in rows if r["step"] <= start))
            value = 1.0 + 0.01 * cfg.seed + {"none": 1, "constant": 2, "adaptive": 3, "rer": 4}[cfg.rl.regularizer]
            for step in range(start + 1, STEPS + 1):
                if preemption.stop_agreed():
                    raise preemption.stop(out, stage, step - 1)
                if os.environ.get("FAKE_SIGNAL_AT") == f"{stage}:{step}":  # a stop signal during this step
                    _signal_self()
                time.sleep(float(os.environ.get("FAKE_STEP_S", "0.05")))
                with open(log, "a") as f:
                    f.write(json.dumps({"step": step, "loss": value / step}) + "\n")
                ckpt.write_text(json.dumps({"step": step}))
            sub = out / ("classifier" if stage == "classifier" else "model")
            sub.mkdir(exist_ok=True)
            (out / "metrics.json").write_text(json.dumps({"stage": stage, "selected_score": value}))
            return sub

    return run


p_warmup, p_classifier, p_sft, p_rl = (resumable_stage(s) for s in ("warmup", "classifier", "sft", "rl"))


def _functions():
    from tests.harness.test_experiments import FAKES

    return {**FAKES, **{s: f"tests.harness.runs.test_faults:p_{s}" for s in ("warmup", "classifier", "sft", "rl")}}


def _records(out: Path) -> dict:
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.glob("stages/*/*"))
            if p.name in ("steps.jsonl", "metrics.json")}


def _study(tmp_path):
    from tests.harness.test_experiments import ARMS, write_study

    return write_study(tmp_path, ARMS, seeds="[0]")


def test_runner_resubmits_a_preempted_stage_and_ends_as_an_uninterrupted_run(tmp_path, calls, monkeypatch):
    """SIGTERM to a worker at 3 points of its stages (the runner itself is not signalled): each stage run stops
    with its checkpoint, is resubmitted and resumed; the records equal an uninterrupted run's."""
    from harness.experiments import load_study, run_experiment

    study = _study(tmp_path)
    ref = tmp_path / "ref"
    assert run_experiment(load_study(study), ref, workers=1, functions=_functions(), log=lambda s: None).ok
    monkeypatch.setenv("FAKE_STEP_S", "0.4")
    out = tmp_path / "out"
    import threading

    sent = []

    def signaller():  # SIGTERM to whichever worker runs a stage, three times, a few steps in
        deadline = time.monotonic() + 240
        while len(sent) < 3 and time.monotonic() < deadline:
            time.sleep(1.0)
            for pid_file in sorted(out.glob("stages/*/pid")):
                run_dir = pid_file.parent
                steps = read_jsonl(run_dir / "steps.jsonl")
                if run_dir in [s for s, _ in sent] or (run_dir / "metrics.json").exists() or len(steps) < 2:
                    continue
                pid = int(pid_file.read_text())
                try:
                    os.kill(pid, signal.SIGTERM)
                    sent.append((run_dir, len(steps)))
                except ProcessLookupError:
                    pass
                break

    thread = threading.Thread(target=signaller, daemon=True)
    thread.start()
    logs = []
    result = run_experiment(load_study(study), out, workers=2, functions=_functions(), log=logs.append)
    thread.join()
    assert len(sent) == 3 and result.ok and not result.preempted
    assert sum("resubmitted" in line for line in logs) == 3
    assert _records(out) == _records(ref)
    for run_dir, _ in sent:
        assert preemption.count(run_dir) == 1


def test_a_stage_preempted_more_often_than_allowed_fails_with_a_message(tmp_path, calls, monkeypatch):
    from harness.experiments import load_study, run_experiment

    monkeypatch.setenv("REGBENCH_FAKE_ALWAYS_STOP", "1")
    logs = []
    result = run_experiment(load_study(_study(tmp_path)), tmp_path / "out", workers=1,
                            functions={**_functions(), "warmup": "tests.harness.runs.test_faults:always_preempted"},
                            log=logs.append, max_requeues=2)
    assert not result.ok
    errors = {r["stages"]["warmup"].get("error") for r in result.index["runs"]}
    assert any(e and "preempted 3 times (more than --max-requeues 2)" in e for e in errors)
    assert sum("resubmitted" in line for line in logs) == 2


def always_preempted(cfg, progress=False):
    raise preemption.stop(Path(cfg.out_dir), "warmup", 0)


DRIVER = """import sys
from harness import experiments
from tests.harness.runs.test_faults import _functions
experiments.DEFAULT_FUNCTIONS.update(_functions())
from harness.cli import main
if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow  # 44 s on 2 loaded cores (2026-12-02): make test-slow
def test_a_stop_signal_to_the_runner_ends_it_with_75_and_the_rerun_completes(tmp_path, calls):
    """SIGTERM to `regbench experiment run` itself (a scheduler stopping the job): it passes the signal to its
    workers, they checkpoint, it exits 75; the same command then finishes with the uninterrupted records."""
    from harness.experiments import load_study, run_experiment

    study = _study(tmp_path)
    ref = tmp_path / "ref"
    assert run_experiment(load_study(study), ref, workers=1, functions=_functions(), log=lambda s: None).ok
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "out"
    args = [sys.executable, str(driver), "experiment", "run", str(study), "--workers", "2", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_STEP_S": "0.4"}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while not any(len(read_jsonl(p)) >= 2 for p in out.glob("stages/*/steps.jsonl")):
        assert proc.poll() is None and time.monotonic() < deadline, "the stages did not start"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    text, _ = proc.communicate(timeout=240)
    assert proc.returncode == 75, text
    assert "no new stage starts" in text and "rerun the same command to resume" in text
    assert sum(preemption.count(p) for p in out.glob("stages/*")) >= 1
    env["FAKE_STEP_S"] = "0.01"
    res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert _records(out) == _records(ref)


# ---------------------------------------------------------------------------------------------------------
# A real tiny study: its RL stage preempted at three points (mid-step, mid-validation, mid-checkpoint), each
# time in its worker process only; the runner resubmits it and the result equals the uninterrupted RL run.

RL_FAULTS = [("step", 2), ("validation", 2), ("checkpoint", 1)]  # the k-th of each on the 1st, 2nd, 3rd try


def rl_with_faults(cfg, progress=False):
    """harness.stages.rl.run_rl with SIGTERM sent to this (worker) process at RL_FAULTS[i] on try i."""
    from harness.parallel.updater import Updater
    from harness.stages import rl
    from harness.training import checkpoints  # the one checkpoint protocol every training loop writes through

    tries = preemption.count(cfg.out_dir)
    where, k = RL_FAULTS[tries] if tries < len(RL_FAULTS) else (None, 0)
    seen = {"n": 0}

    def hit():
        seen["n"] += 1
        if seen["n"] == k:
            _signal_self()

    saved = (Updater.update, rl.make_validator, checkpoints.write_state)
    if where == "step":
        Updater.update = lambda self, *a, **kw: (hit(), saved[0](self, *a, **kw))[1]
    elif where == "validation":
        def make_validator(*a, **kw):
            fn = saved[1](*a, **kw)
            return lambda model: (hit(), fn(model))[1]
        rl.make_validator = make_validator
    elif where == "checkpoint":
        checkpoints.write_state = lambda *a: (hit(), saved[2](*a))[1]
    try:
        return rl.run_rl(cfg, progress=progress)
    finally:
        Updater.update, rl.make_validator, checkpoints.write_state = saved


@pytest.mark.slow  # a whole tiny study (stage 0 to the test evaluation), then its RL stage four times: minutes
def test_a_real_rl_stage_preempted_at_three_points_through_the_runner_equals_the_uninterrupted_one(tmp_path):
    from harness.cli import main
    from harness.experiments import DEFAULT_FUNCTIONS, load_study, run_experiment
    from harness.runs.records import read_json
    from tests.harness.test_experiments import write_study
    from tests.tiny_sizes import TINY

    path = write_study(tmp_path, "  - name: a\n    overrides: {rl: [rl.regularizer=rer, rl.reference=vapr]}\n",
                       seeds="[0]", name="faults")
    sets = [f"common.{x}" for x in TINY] + [
        f"common.cache_dir={tmp_path / 'cache'}",
        "stages.warmup.train.max_steps=1", "stages.warmup.train.batch_size=4",
        "stages.classifier.classifier.epochs=1", "stages.classifier.classifier.batch_size=8",
        "stages.classifier.classifier.img_size=32",
        "stages.sft.train.max_steps=1", "stages.sft.train.batch_size=4", "stages.sft.model.lora_r=4",
        "stages.sft.model.lora_alpha=8",
        "stages.rl.train.max_steps=6", "stages.rl.rl.prompts_per_step=2", "stages.rl.rl.group_size=2",
        "stages.rl.rl.max_new_tokens=6", "stages.rl.rl.min_new_tokens=2", "stages.rl.rl.val_max_samples=2",
        "stages.rl.rl.val_every_steps=1", "stages.rl.rl.reset_every_epochs=1",
    ]
    out = tmp_path / "out"
    argv = ["experiment", "run", str(path), "--workers", "1", "--out", str(out)]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0  # the uninterrupted study
    index = read_json(out / "index.json")
    rl_dir = out / index["runs"][0]["stages"]["rl"]["dir"]
    eval_dir = out / index["runs"][0]["eval_dir"]
    want = {name: (rl_dir / name).read_bytes() for name in ("model/adapter_model.safetensors",)}
    want_logs = (_without_times(read_jsonl(rl_dir / "steps.jsonl")), read_jsonl(rl_dir / "evals.jsonl"))
    want_eval = read_json(eval_dir / "metrics.json")
    rl_dir.rename(tmp_path / "rl_uninterrupted")  # the RL run and its evaluation run again, with faults
    (eval_dir / "metrics.json").unlink()

    study = load_study(path, sets=sets)
    logs = []
    result = run_experiment(study, out, workers=2, log=logs.append,
                            functions={**DEFAULT_FUNCTIONS, "rl": "tests.harness.runs.test_faults:rl_with_faults"})
    assert result.ok, logs
    assert sum("resubmitted" in line for line in logs) == 3
    rows = read_jsonl(rl_dir / preemption.PREEMPTIONS_FILE)
    assert [(r["stage"], r["signal"]) for r in rows] == [("rl", "SIGTERM")] * 3
    assert read_json(rl_dir / "manifest.json")["preemptions"] == 3
    assert {name: (rl_dir / name).read_bytes() for name in want} == want
    assert (_without_times(read_jsonl(rl_dir / "steps.jsonl")), read_jsonl(rl_dir / "evals.jsonl")) == want_logs
    got_eval = read_json(eval_dir / "metrics.json")
    assert {k: v for k, v in got_eval.items() if "time" not in k} == {k: v for k, v in want_eval.items()
                                                                      if "time" not in k}
