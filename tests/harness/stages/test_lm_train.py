"""The supervised loop resumes exactly: an interrupted run continued from its checkpoint ends where an
uninterrupted one does."""

from __future__ import annotations

import torch

from harness.config import TrainConfig
from harness.models.tiny import build_tiny_model
from harness.models.trainable import set_trainable
from harness.records import RunDir
from harness.stages.lm_train import LMData, epoch_order, train_lm


def _data(images):
    reports = ["the heart size is normal .", "mild cardiomegaly .", "the lungs are clear .",
               "small left pleural effusion ."]
    return LMData([[im] for im in images], ["write"] * 4, reports)


def _model(tokenizer):
    model = build_tiny_model(tokenizer, seed=0, text_hidden=32, text_layers=1, vision_hidden=16, image_size=56)
    set_trainable(model, "warmup")
    return model


def test_resume_equals_uninterrupted(tiny_tokenizer, tiny_processor, xray_images, tmp_path):
    data = _data(xray_images)
    full = _model(tiny_tokenizer)
    cfg = TrainConfig(epochs=2, batch_size=2, lr=1e-2, scheduler="cosine", max_steps=4, checkpoint_every=2)
    train_lm(full, tiny_processor, data, None, cfg, RunDir(tmp_path / "full"), seed=3, max_report_tokens=10,
             progress=False)

    class Interrupted(RunDir):
        def log_step(self, row):
            if row["step"] == 3:  # killed after the step-2 checkpoint, during step 3
                raise KeyboardInterrupt
            super().log_step(row)

    part = _model(tiny_tokenizer)
    try:
        train_lm(part, tiny_processor, data, None, cfg, Interrupted(tmp_path / "part"), seed=3,
                 max_report_tokens=10, progress=False)
    except KeyboardInterrupt:
        pass
    run = RunDir(tmp_path / "part")
    resumed = _model(tiny_tokenizer)  # a fresh process: nothing but the run directory carries over
    train_lm(resumed, tiny_processor, data, None, cfg, run, seed=3, max_report_tokens=10, progress=False)
    assert [r["step"] for r in run.steps()] == [1, 2, 3, 4]
    a = dict(full.named_parameters())
    b = dict(resumed.named_parameters())
    assert all(torch.allclose(a[n], b[n], atol=1e-6) for n in a)


def test_epoch_order_is_a_seeded_permutation():
    assert sorted(epoch_order(10, 0, 1)) == list(range(10))
    assert epoch_order(10, 0, 1) == epoch_order(10, 0, 1)
    assert epoch_order(10, 0, 1) != epoch_order(10, 0, 2)


def test_a_kill_at_an_epoch_end_keeps_that_epochs_validation_row(tiny_tokenizer, tiny_processor, xray_images,
                                                                  tmp_path):
    """Killed while validating at an epoch end that is also a checkpoint step: the resumed run still has the
    epoch's row (the checkpoint comes after it), and every step and epoch appears once."""
    data = _data(xray_images)
    cfg = TrainConfig(epochs=2, batch_size=2, lr=1e-2, scheduler="constant", checkpoint_every=2)

    class KilledInValidation(RunDir):
        def log_eval(self, row):
            if row["step"] == 2:
                raise KeyboardInterrupt
            super().log_eval(row)

    try:
        train_lm(_model(tiny_tokenizer), tiny_processor, data, data, cfg, KilledInValidation(tmp_path), seed=3,
                 max_report_tokens=10, progress=False)
    except KeyboardInterrupt:
        pass
    run = RunDir(tmp_path)
    train_lm(_model(tiny_tokenizer), tiny_processor, data, data, cfg, run, seed=3, max_report_tokens=10,
             progress=False)
    assert [r["step"] for r in run.steps()] == [1, 2, 3, 4]
    assert [(r["step"], r["epoch"]) for r in run.evals()] == [(2, 1), (4, 2)]


def test_a_restart_without_checkpoint_keeps_no_rows_of_the_earlier_try(tiny_tokenizer, tiny_processor,
                                                                      xray_images, tmp_path):
    data = _data(xray_images)
    cfg = TrainConfig(epochs=1, batch_size=2, lr=1e-2, scheduler="constant", checkpoint_every=0)
    run = RunDir(tmp_path)
    run.log_step({"step": 1, "loss": 9.25})  # an interrupted try that never reached a checkpoint
    run.log_eval({"step": 1, "split": "val"})
    train_lm(_model(tiny_tokenizer), tiny_processor, data, None, cfg, run, seed=3, max_report_tokens=10,
             progress=False)
    assert [r["step"] for r in run.steps()] == [1, 2]
    assert run.steps()[0]["loss"] != 9.25
    assert [r["step"] for r in run.evals()] == [2]
