"""Issue 49, "refused means untouched": the fault suite's remaining cases. A worker's error named by its own
message, a full disk named with its path (and a report built aside, so a full disk leaves none half-written), a
refused resume that leaves the run folder byte for byte, a killed try's leftovers cleaned, `eval --out` of a
finished evaluation a no-op, W&B checked with an offline hint, leaks by content. The count of refused commands
that change their folder: tests/harness/runs/test_refusal_count.py."""

from __future__ import annotations

import errno
import hashlib
import json
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from harness.cli import error_line, main


def tree_digest(root: Path) -> dict[str, str]:
    """Every path under `root` with its kind and, for a file, the sha256 of its bytes."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + str(p.readlink())
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# ---------------------------------------------------------------------------------------------------------
# 1. DataLoader worker errors: the worker's own message


class _Broken(Dataset):
    def __init__(self, error: Exception):
        self.error = error

    def __len__(self):
        return 2

    def __getitem__(self, i):
        raise self.error


@pytest.mark.parametrize("error", [ValueError("/data/images/x.png: not a readable image (cannot identify image "
                                              "file)"),
                                   IndexError("/cache/preds.u8: 3 rows, index 7 asked (a truncated cache)"),
                                   KeyError("'Cardiomegaly' missing in /data/labels.json")],
                         ids=["value", "index", "key"])
def test_a_worker_error_is_shown_by_its_own_message(error):
    """Before: 'Caught ValueError in DataLoader worker process 0.' (the file never named)."""
    loader = DataLoader(_Broken(error), batch_size=1, num_workers=1)
    with pytest.raises(type(error)) as caught:
        next(iter(loader))
    assert "DataLoader worker process" in str(caught.value)  # what torch re-raises
    line = error_line(caught.value)
    assert "DataLoader worker" not in line and "Caught" not in line, line
    assert ("x.png" if isinstance(error, ValueError) else "preds.u8" if isinstance(error, IndexError)
            else "labels.json") in line
    assert len(line.splitlines()) == 1


def test_a_worker_error_of_several_lines_and_other_text_are_read_right():
    from harness.runs.worker_errors import original_message

    text = ("Caught ConfigError in DataLoader worker process 3.\nOriginal Traceback (most recent call last):\n"
            '  File "/x/y.py", line 4, in f\n    raise ConfigError("a")\n    ^^^^^\n'
            "harness.errors.ConfigError: 'data.image_dir' = '/d': bad\nsecond line")
    assert original_message(text) == "'data.image_dir' = '/d': bad\nsecond line"
    assert original_message("plain message") is None
    assert original_message("Caught ValueError in DataLoader worker process 0.") is None  # no traceback to read


# ---------------------------------------------------------------------------------------------------------
# 2. A full disk: one line naming the path and what to do; the report built aside


def test_a_bare_full_disk_error_names_the_path_and_the_fix(tmp_path):
    """Before: 'OSError: [Errno 28] No space left on device' (or a bare '[Errno 28]')."""
    e = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "report" / "index.html"))
    line = error_line(e)
    assert str(tmp_path / "report" / "index.html") in line and "no space left" in line
    assert "free space" in line and "run the command again" in line
    wrapped = RuntimeError("write failed")
    wrapped.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded", "/q/steps.jsonl")
    assert "/q/steps.jsonl: no space left" in error_line(wrapped)


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    from tests.reports.conftest import write_experiment

    return write_experiment(tmp_path_factory.mktemp("experiment"))


def _full_disk_at_the_page(monkeypatch):
    import reports.build

    def full(path, *a, **kw):
        Path(path).write_bytes(b"<html>half")  # what was written when the disk filled up
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(reports.build, "write_page", full)


@pytest.mark.parametrize("earlier", [False, True], ids=["no_report", "earlier_report"])
def test_a_full_disk_during_report_leaves_no_partial_report(earlier, experiment, tmp_path, capsys, monkeypatch):
    """Before: tables and figures written, a torn index.html, and a bare '[Errno 28]'."""
    out = tmp_path / "rep"
    if earlier:
        assert main(["report", str(experiment), "--out", str(out), "--bootstrap", "50"]) == 0
        capsys.readouterr()
    before = tree_digest(tmp_path)
    _full_disk_at_the_page(monkeypatch)
    assert main(["report", str(experiment), "--out", str(out), "--bootstrap", "50"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(out) in err and "no space left" in err, err
    assert tree_digest(tmp_path) == before  # absent, or the earlier report byte for byte


def test_report_space_is_checked_before_writing(experiment, tmp_path, capsys, monkeypatch):
    from harness.runs import staged

    monkeypatch.setattr(staged, "free_bytes", lambda folder: 1000)
    assert main(["report", str(experiment), "--out", str(tmp_path / "rep"), "--bootstrap", "50"]) == 2
    err = capsys.readouterr().err
    assert "not enough space for the report" in err and "nothing was written" in err and "rep" in err
    assert list(tmp_path.iterdir()) == []


def test_a_report_replaces_the_earlier_one_and_keeps_other_files(experiment, tmp_path, capsys):
    out = tmp_path / "rep"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "index.html").write_text("old page")
    assert main(["report", str(experiment), "--out", str(out), "--bootstrap", "50"]) == 0
    assert f"report: {out / 'index.html'}" in capsys.readouterr().out
    assert (out / "notes.txt").read_text() == "mine" and (out / "index.html").read_text() != "old page"
    assert (out / "tables").is_dir() and not [p for p in tmp_path.iterdir() if "staging" in p.name]


# ---------------------------------------------------------------------------------------------------------
# 6. A refused resume leaves the run folder, its manifest included, byte for byte


REPORT = "The heart size is normal. The lungs are clear. No pleural effusion or pneumothorax is seen."


def _data(root: Path) -> Path:
    from PIL import Image

    splits = {s: [{"id": f"{s}{i}", "report": REPORT, "image_path": [f"{s}{i}.png"]} for i in range(2)]
              for s in ("train", "val", "test")}
    (root / "images").mkdir(parents=True)
    for k, item in enumerate(i for items in splits.values() for i in items):
        Image.new("L", (32, 32), 60 + 10 * k).save(root / "images" / item["image_path"][0])
    (root / "annotation.json").write_text(json.dumps(splits))
    return root / "annotation.json"


class NotATensor:  # a checkpoint that holds it would unpickle code (refused by weights_only)
    pass


def resumable_run(tmp: Path, stage: str, damage: str, extra: tuple[str, ...] = ()) -> list[str]:
    """A run folder of `stage` with a manifest of the command's own config (a resume, not another run) whose
    checkpoint is damaged; returns the command line."""
    from harness.config import to_dict
    from harness.config.loading import load_config
    from harness.runs import checkpoint_io

    ann = _data(tmp / "data")
    overrides = ["data.dataset=mimic_cxr", f"data.annotation={ann}", f"out_dir={tmp}/out", f"cache_dir={tmp}/cache",
                 f"data.synth_dir={tmp}/phantom", *extra]
    cfg = load_config(None, overrides, stage=stage)
    out = tmp / "out"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"stage": stage, "seed": cfg.seed, "config": to_dict(cfg),
                                                   "created": "2026-12-01T00:00:00"}))
    (out / "steps.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    ckpt = out / "checkpoint" / {"rl": "rl_state.pt", "classifier": "classifier_state.pt"}.get(stage, "state.pt")
    if damage == "pickled":
        checkpoint_io.save_state({"step": 1, "payload": NotATensor()}, ckpt)
    else:
        checkpoint_io.save_state({"step": 1, "w": torch.zeros(50)}, ckpt)
        checkpoint_io.save_state({"step": 2, "w": torch.ones(50)}, ckpt)
        for gen in (ckpt.parent, checkpoint_io.previous_dir(ckpt.parent)):
            (gen / ckpt.name).write_bytes(b"torn")
    return [*(["classifier", "train"] if stage == "classifier" else ["train", stage]), *overrides, "--no-progress"]


RESUMES = [("warmup", "torn"), ("rl", "torn"), ("classifier", "torn"), ("warmup", "pickled"), ("sft", "pickled"),
           ("rl", "pickled")]


@pytest.mark.parametrize(("stage", "damage"), RESUMES, ids=[f"{s}_{d}" for s, d in RESUMES])
def test_a_refused_resume_leaves_the_folder_byte_for_byte(stage, damage, tmp_path, capsys, monkeypatch):
    """Before: manifest.json rewritten (a new 'created', argv, versions) before the checkpoint was found
    unusable (after a model load, and for the tiny base a stage 0)."""
    monkeypatch.chdir(tmp_path)
    extra = ()
    if stage == "sft":
        from tests.harness.test_checks_before_writing import _classifier

        extra = (f"classifier.dir={_classifier(tmp_path / 'clf')}",)
    argv = resumable_run(tmp_path, stage, damage, extra)
    before = tree_digest(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "checkpoint" in err and ("--restart" in err or "delete" in err), err
    assert ("no usable checkpoint" if damage == "torn" else "refused to load") in err, err
    assert tree_digest(tmp_path) == before


# ---------------------------------------------------------------------------------------------------------
# 5. Leftovers of a killed try: cleaned when the folder is opened again and when the run ends


def test_a_killed_tries_leftovers_are_removed_at_resume_and_at_the_end(tmp_path):
    from harness.config import RunConfig
    from harness.runs import checkpoint_io
    from harness.stages.common import start_run

    cfg = RunConfig()
    cfg.out_dir = str(tmp_path / "run")
    run = start_run(cfg, "warmup")
    ckpt = run.path / "checkpoint" / "state.pt"
    checkpoint_io.save_state({"step": 1, "w": torch.zeros(4)}, ckpt)
    (run.path / "pixels-a1b2c3").mkdir()  # a kill -9 skips the pixel cache's cleanup
    (run.path / "pixels-a1b2c3" / "pixels-56-0123.u8").write_bytes(b"\0" * 64)
    (run.path / ".steps.jsonl.x7.tmp").write_text("half")  # an atomic write cut short
    torn = checkpoint_io.staging_dir(ckpt.parent)
    torn.mkdir()
    (torn / "state.pt").write_bytes(b"half")  # no SUMS.json: never resumed from
    (run.path / "wandb").mkdir()
    (run.path / "wandb" / ".w.tmp").write_text("W&B's own")  # the trackers' files are theirs
    from harness.runs import lock

    lock.release(run.path)
    run = start_run(cfg, "warmup")  # the resume
    names = sorted(p.name for p in run.path.iterdir())
    assert "pixels-a1b2c3" not in names and ".steps.jsonl.x7.tmp" not in names and "checkpoint.new" not in names
    assert (ckpt.parent / "state.pt").is_file() and (run.path / "wandb" / ".w.tmp").is_file()

    (run.path / "pixels-live").mkdir()  # the stage's own cache at the end: the stage removes it
    checkpoint_io.begin(ckpt.parent)  # a sealed-or-not generation a finished run never resumes
    (torn / "state.pt").write_bytes(b"x")
    run.write_metrics({"done": 1})
    assert not torn.exists() and (run.path / "pixels-live").is_dir() and ckpt.is_file()
    lock.release(run.path)


# ---------------------------------------------------------------------------------------------------------
# 7. eval --out of a finished evaluation: a no-op that says so


def test_eval_out_of_a_finished_evaluation_writes_nothing(tmp_path, capsys, monkeypatch):
    """Before: the split decoded again and a second identical row appended to evals.jsonl."""
    import harness.stages.evaluate

    def no_decode(*a, **kw):
        raise AssertionError("the finished evaluation was run again")

    monkeypatch.setattr(harness.stages.evaluate, "evaluate_model", no_decode)
    model = tmp_path / "rl" / "model"
    model.mkdir(parents=True)
    (model / "spec.json").write_text(json.dumps({"stage": "rl", "base": str(tmp_path / "base")}))
    out = tmp_path / "ev"
    out.mkdir()
    row = {"split": "test", "stage": "rl", "n": 2, "bleu4": 0.25, "decoding": {"greedy": True}}
    (out / "evals.jsonl").write_text(json.dumps(row) + "\n")
    (out / "predictions_rl_test.jsonl").write_text('{"id": "t0"}\n')
    before = tree_digest(tmp_path)
    assert main(["eval", "--model", str(model), "--out", str(out), "--no-progress",
                 f"data.synth_dir={tmp_path}/phantom"]) == 0
    captured = capsys.readouterr()
    assert "already holds this evaluation" in captured.err and "nothing written" in captured.err
    assert json.loads(captured.out)["bleu4"] == 0.25
    assert tree_digest(tmp_path) == before


def test_eval_out_of_another_split_or_stage_is_not_taken_for_done(tmp_path):
    from harness.stages.eval_out import finished_evaluation

    out = tmp_path / "ev"
    out.mkdir()
    (out / "evals.jsonl").write_text(json.dumps({"split": "test", "stage": "rl"}) + "\n")
    model = tmp_path / "m"
    model.mkdir()
    (model / "spec.json").write_text(json.dumps({"stage": "rl"}))
    assert finished_evaluation(out, model, "test") is None  # no predictions file: not finished
    (out / "predictions_rl_test.jsonl").write_text("{}\n")
    assert finished_evaluation(out, model, "test")["stage"] == "rl"
    assert finished_evaluation(out, model, "val") is None
    (model / "spec.json").write_text(json.dumps({"stage": "sft"}))
    assert finished_evaluation(out, model, "test") is None


# ---------------------------------------------------------------------------------------------------------
# 3. W&B: offline is never refused; online needs a key and the server


def test_wandb_offline_or_not_requested_is_never_checked(monkeypatch, tmp_path):
    from harness.runs.tracker_check import check_wandb

    def no_network(url):
        raise AssertionError("connected")

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    for mode in ("offline", "disabled", "dryrun"):
        monkeypatch.setenv("WANDB_MODE", mode)
        check_wandb("wandb", connect=no_network)
    monkeypatch.setenv("WANDB_MODE", "online")
    check_wandb("tensorboard", connect=no_network)
    check_wandb("none", connect=no_network)
    monkeypatch.delenv("WANDB_MODE")  # `wandb offline` saved the mode in ./wandb/settings
    monkeypatch.chdir(tmp_path)
    (tmp_path / "wandb").mkdir()
    (tmp_path / "wandb" / "settings").write_text("[default]\nmode = offline\n")
    check_wandb(["tensorboard", "wandb"], connect=no_network)


def test_wandb_online_with_a_key_and_a_server_passes(monkeypatch, tmp_path):
    from harness.config import ConfigError
    from harness.runs.tracker_check import check_wandb

    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    asked = []
    check_wandb("wandb", connect=lambda url: asked.append(url))
    assert asked == ["https://api.wandb.ai"]
    with pytest.raises(ConfigError, match="context deadline exceeded.*WANDB_MODE=offline"):
        check_wandb("wandb", connect=lambda url: "CommError: context deadline exceeded")


# ---------------------------------------------------------------------------------------------------------
# 4. Leaks by content


def test_content_leaks_need_two_splits_and_the_same_bytes(tmp_path):
    from harness.data.datasets import Sample
    from harness.data.leaks import first_content_leak

    def img(name, data):
        (tmp_path / name).write_bytes(data)
        return tmp_path / name

    a, a_copy, b = img("a.png", b"A" * 5000), img("a_copy.png", b"A" * 5000), img("b.png", b"A" * 4999 + b"B")
    same_head = img("c.png", b"A" * 4999 + b"C")  # same size and first 4 KB as b, other bytes
    splits = {"train": [Sample("t0", "r", [a, a_copy]), Sample("t1", "r", [b])],  # a copy within a split: no leak
              "test": [Sample("x0", "r", [same_head]), Sample("x1", "r", [tmp_path / "missing.png"])]}
    assert first_content_leak(splits) is None
    splits["test"].append(Sample("x2", "r", [img("renamed.png", b"A" * 5000)]))
    found = first_content_leak(splits)
    assert found == (("train", "t0", a), ("test", "x2", tmp_path / "renamed.png"))


def test_leak_check_path_only_accepts_a_copy(tmp_path):
    from harness.data.datasets import load_annotation

    ann = _data(tmp_path / "d")
    images = ann.parent / "images"
    (images / "train1.png").write_bytes((images / "test0.png").read_bytes())
    with pytest.raises(ValueError, match="same bytes"):
        load_annotation(ann, "mimic_cxr")
    assert len(load_annotation(ann, "mimic_cxr", leak_check="path")["train"]) == 2
