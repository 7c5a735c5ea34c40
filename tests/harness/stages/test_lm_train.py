"""The supervised loop resumes exactly: an interrupted run continued from its checkpoint ends where an
uninterrupted one does."""

from __future__ import annotations

import pytest
import torch

from harness.config import TrainConfig
from harness.models.tiny import build_tiny_model
from harness.models.trainable import set_trainable
from harness.runs.records import RunDir
from harness.stages.lm_train import LMData, train_lm
from harness.training.schedule import epoch_order
from tests.killed_runs import KilledAt


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

    part = _model(tiny_tokenizer)
    try:  # killed after the step-2 checkpoint, during step 3
        train_lm(part, tiny_processor, data, None, cfg, KilledAt(tmp_path / "part", 3), seed=3,
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


REPORTS_UNEQUAL = ["the heart size is normal . there is no pleural effusion or pneumothorax .", "mild cardiomegaly .",
                   "the lungs are clear . no acute osseous abnormality .", "small left pleural effusion ."]


def _grads(model, processor, images, micro, lora=False):
    from harness.parallel.distributed import Dist
    from harness.stages.lm_train import _accumulate

    data = LMData([[im] for im in images], ["write", "describe the film", "write", "report"], REPORTS_UNEQUAL)
    model.zero_grad(set_to_none=True)
    loss, n = _accumulate(model, processor, data, micro, 30, torch.device("cpu"), Dist(), "test")
    return float(loss), n, {k: p.grad.clone() for k, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("stage", ["warmup", "sft"])
def test_micro_batched_gradient_equals_the_one_batch_gradient(tiny_tokenizer, tiny_processor, xray_images, stage):
    """Reports of unequal length: an unweighted mean of micro-batch means would differ."""
    from harness.models.trainable import add_lora

    model = build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=1, vision_hidden=16, image_size=56)
    if stage == "sft":
        model = add_lora(model, r=4, alpha=8, dropout=0.0)
        with torch.no_grad():  # LoRA B starts at zero: give A a gradient too
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.02)
    set_trainable(model, stage)
    loss, n, one = _grads(model, tiny_processor, xray_images, micro=4)
    for micro in (1, 3):
        loss_m, n_m, grads = _grads(model, tiny_processor, xray_images, micro)
        assert n_m == n and loss_m == pytest.approx(loss, rel=1e-5)
        for k in one:
            torch.testing.assert_close(grads[k], one[k], rtol=1e-4, atol=1e-7, msg=k)
    assert any(float(g.abs().sum()) > 0 for g in one.values())


def test_train_lm_with_micro_batches_takes_the_same_steps(tiny_tokenizer, tiny_processor, xray_images, tmp_path):
    data = LMData([[im] for im in xray_images], ["write"] * 4, REPORTS_UNEQUAL)
    runs = {}
    for micro in (None, 1):
        model = _model(tiny_tokenizer)
        cfg = TrainConfig(epochs=2, batch_size=4, lr=1e-2, scheduler="constant", max_steps=2, micro_batch_size=micro)
        train_lm(model, tiny_processor, data, None, cfg, RunDir(tmp_path / str(micro)), seed=0, max_report_tokens=30,
                 progress=False)
        runs[micro] = (dict(model.named_parameters()), RunDir(tmp_path / str(micro)).steps())
    (a, steps_a), (b, steps_b) = runs[None], runs[1]
    assert [s["tokens"] for s in steps_a] == [s["tokens"] for s in steps_b]
    assert [s["loss"] for s in steps_b] == pytest.approx([s["loss"] for s in steps_a], rel=1e-5)
    # The accumulated gradient's norm (before clipping) tells a wrong micro-batch weighting apart; the
    # parameters less so (Adam's first steps are about lr x sign(g)), and float noise in near-zero gradient
    # entries moves a few of them by up to ~lr/100.
    assert [s["grad_norm"] for s in steps_b] == pytest.approx([s["grad_norm"] for s in steps_a], rel=1e-5)
    for n in a:
        torch.testing.assert_close(b[n], a[n], rtol=1e-4, atol=2e-4)


def test_training_forwards_keep_no_kv_cache(tiny_tokenizer, tiny_processor, xray_images):
    seen = []
    model = _model(tiny_tokenizer)
    model.register_forward_pre_hook(lambda mod, args, kwargs: seen.append(kwargs.get("use_cache")), with_kwargs=True)
    _grads(model, tiny_processor, xray_images, micro=2)
    assert seen == [False, False]


def test_gradient_checkpointing_gives_the_same_gradient(tiny_tokenizer, tiny_processor, xray_images):
    from harness.models.trainable import add_lora
    from harness.stages.loading import enable_gradient_checkpointing

    model = build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=2, vision_hidden=16, image_size=56)
    model = add_lora(model, r=4, alpha=8, dropout=0.0)
    set_trainable(model, "sft")
    model.train()
    _, _, plain = _grads(model, tiny_processor, xray_images, micro=4)
    enable_gradient_checkpointing(model)
    assert model.model.language_model.gradient_checkpointing
    _, _, checkpointed = _grads(model, tiny_processor, xray_images, micro=4)
    for k in plain:
        torch.testing.assert_close(checkpointed[k], plain[k], rtol=1e-5, atol=1e-8, msg=k)


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


def test_group_by_length_trains_on_the_grouped_batches_and_resumes(tiny_tokenizer, tiny_processor, xray_images,
                                                                   tmp_path):
    """train.group_by_length: each step's labelled tokens are those of harness.training.schedule.length_grouped_order's
    batch (16 samples, batches of 2: two mega-batches of 4 per epoch), not of the random order's; a run killed
    after its step-4 checkpoint and resumed ends where an uninterrupted one does."""
    from harness.stages.lm_batches import sample_lengths
    from harness.training.schedule import length_grouped_order

    words = "the heart size is normal and the lungs are clear without effusion or focal consolidation".split()
    reports = [" ".join(words[:2 + (7 * i) % 13]) + " ." for i in range(16)]
    data = LMData([[xray_images[i % 4]] for i in range(16)], ["write"] * 16, reports)
    cfg = TrainConfig(epochs=1, batch_size=2, lr=1e-2, scheduler="cosine", checkpoint_every=4, group_by_length=True)
    full = _model(tiny_tokenizer)
    train_lm(full, tiny_processor, data, None, cfg, RunDir(tmp_path / "full"), seed=3, max_report_tokens=30,
             progress=False)
    targets = [len(tiny_tokenizer(r, add_special_tokens=False)["input_ids"]) + 1 for r in reports]  # + <|im_end|>

    def tokens(order):
        return [targets[order[k]] + targets[order[k + 1]] for k in range(0, 16, 2)]

    grouped = length_grouped_order(sample_lengths(tiny_processor, data, 30), 2, 3, 0)
    logged = [r["tokens"] for r in RunDir(tmp_path / "full").steps()]
    assert logged == tokens(grouped) != tokens(epoch_order(16, 3, 0))

    with pytest.raises(KeyboardInterrupt):
        train_lm(_model(tiny_tokenizer), tiny_processor, data, None, cfg, KilledAt(tmp_path / "part", 6), seed=3,
                 max_report_tokens=30, progress=False)
    resumed = _model(tiny_tokenizer)
    train_lm(resumed, tiny_processor, data, None, cfg, RunDir(tmp_path / "part"), seed=3, max_report_tokens=30,
             progress=False)
    assert [r["tokens"] for r in RunDir(tmp_path / "part").steps()] == logged
    a, b = dict(full.named_parameters()), dict(resumed.named_parameters())
    assert all(torch.allclose(a[n], b[n], atol=1e-6) for n in a)
