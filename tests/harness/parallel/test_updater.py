"""harness/parallel/updater.py in one process: fp16 loss scaling with torch's GradScaler on the CPU, a
scaler-skipped RL step that is not counted as a non-finite step (rl.max_nonfinite_steps), and `Updater.update`
(one optimizer step from micro-batch losses)."""

from __future__ import annotations

import pytest
import torch

from harness.parallel.updater import UpdateOutcome, Updater, needs_scaler


def _model():
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.3, -1.1, 0.7], [2.3, 0.1, -0.9]]))
        model.bias.copy_(torch.tensor([0.05, -0.45]))
    return model


def _step(updater: Updater, model, opt, x: torch.Tensor, factor: float = 1.0) -> bool:
    opt.zero_grad(set_to_none=True)
    with updater.no_sync():
        updater.backward(updater.forward(lambda m, v: (m(v) ** 2).sum() * factor, x))
    updater.sync()
    updater.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)  # on the true gradients
    return updater.step(opt)


def test_only_fp16_gets_a_scaler():
    assert needs_scaler(torch.float16)
    assert not needs_scaler(torch.bfloat16) and not needs_scaler(torch.float32)


def test_a_scaled_step_equals_the_plain_step_and_an_overflow_is_skipped():
    x = torch.tensor([[0.3, -1.7, 2.9], [1.1, 0.4, -0.6]])
    plain, scaled = _model(), _model()
    u_plain = Updater(plain, list(plain.parameters()))
    u_scaled = Updater(scaled, list(scaled.parameters()), fp16_scaler=True)
    u_scaled.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12, growth_interval=1000)
    opt_plain = torch.optim.AdamW(plain.parameters(), lr=0.01)
    opt_scaled = torch.optim.AdamW(scaled.parameters(), lr=0.01)
    assert _step(u_plain, plain, opt_plain, x) and _step(u_scaled, scaled, opt_scaled, x)
    for a, b in zip(plain.parameters(), scaled.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=0.0)  # a power-of-two scale divides out exactly
    assert not torch.equal(plain.weight, _model().weight)  # the step moved the weights
    # An overflow in the scaled backward (as fp16 activations give): no step, the scale halves, no error.
    before = [p.detach().clone() for p in scaled.parameters()]
    assert not _step(u_scaled, scaled, opt_scaled, x, factor=3e37)
    assert all(torch.equal(a, b) for a, b in zip(before, scaled.parameters(), strict=True))
    assert u_scaled.loss_scale == 2.0 ** 11
    assert _step(u_scaled, scaled, opt_scaled, x)  # and the next step goes through
    assert not torch.equal(before[0], scaled.weight)
    state = u_scaled.state_dict()
    other = Updater(_model(), list(_model().parameters()), fp16_scaler=True)
    other.load_state_dict(state)
    assert other.loss_scale == 2.0 ** 11


def test_a_rejected_step_leaves_the_scaler_ready_for_the_next():
    model = _model()
    updater = Updater(model, list(model.parameters()), fp16_scaler=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.tensor([[0.3, -1.7, 2.9]])
    updater.backward(updater.forward(lambda m, v: m(v).sum(), x))
    updater.unscale_(opt)
    updater.skip()  # e.g. another process found a non-finite reward
    opt.zero_grad(set_to_none=True)
    assert _step(updater, model, opt, x)  # unscale_ twice without update() would raise in torch


X = torch.tensor([[0.3, -1.7, 2.9], [1.1, 0.4, -0.6], [-0.8, 2.2, 0.5], [1.9, -0.3, -1.4], [0.2, 0.9, 1.3]])


def _weighted_loss(forward, rows):
    """Micro-batch rows a..b of X: their share of the mean over all 5 rows (the weights of the whole step)."""
    a, b = rows
    return forward(lambda m, v: (m(v) ** 2).sum() / len(X), X[a:b])


def _update(chunks, **kw):
    model = _model()
    updater = Updater(model, list(model.parameters()), fp16_scaler=kw.pop("fp16", False))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    return model, updater, opt, updater.update(kw.pop("loss", _weighted_loss), chunks, opt, **kw)


@pytest.mark.parametrize("chunks", [[(0, 2), (2, 5)], [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]])
def test_update_over_micro_batches_equals_the_one_batch_step(chunks):
    one, _, _, out_one = _update([(0, 5)], grad_clip=0.5)
    micro, _, _, out_micro = _update(chunks, grad_clip=0.5)
    assert out_one.stepped and out_micro.stepped and not out_micro.skipped and out_micro.loss_scale is None
    assert out_micro.grad_norm == pytest.approx(out_one.grad_norm, rel=1e-6) and out_one.grad_norm > 0.5  # clipped
    for a, b in zip(one.parameters(), micro.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)
    # and the one-batch step is plain torch: backward, clip, step
    plain = _model()
    opt = torch.optim.AdamW(plain.parameters(), lr=0.01)
    ((plain(X) ** 2).sum() / len(X)).backward()
    norm = torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.5)
    opt.step()
    assert out_one.grad_norm == float(norm)
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), one.parameters(), strict=True))


def test_update_without_clipping_reports_no_grad_norm():
    _, _, _, out = _update([(0, 5)])
    assert out == UpdateOutcome(stepped=True, cause=None, grad_norm=None, loss_scale=None, overflow=False)


def test_a_loss_fn_that_names_a_problem_skips_the_step_and_reports_the_cause():
    seen = []

    def loss(forward, rows):
        seen.append(rows)
        return "the loss is nan" if rows == (2, 4) else _weighted_loss(forward, rows)

    model, _, opt, out = _update([(0, 2), (2, 4), (4, 5)], loss=loss, grad_clip=1.0)
    assert out.skipped and out.cause == "the loss is nan" and not out.stepped
    assert seen == [(0, 2), (2, 4)]  # no micro-batch after the one that failed
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), _model().parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters()) and not opt.state  # the partial gradient is dropped


def test_a_reason_found_before_the_update_runs_no_forward():
    def loss(forward, rows):
        raise AssertionError("no forward for a rejected step")

    model, _, _, out = _update([(0, 5)], loss=loss, rejected="reward 'x' returned 1 value(s) that are not finite")
    assert out.skipped and out.cause.startswith("reward 'x'") and out.grad_norm is None
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), _model().parameters(), strict=True))


def test_a_non_finite_gradient_is_rejected_without_a_scaler():
    def loss(forward, rows):
        value = _weighted_loss(forward, rows)
        value.register_hook(lambda g: g * float("nan"))  # finite loss, NaN gradient
        return value

    model, _, opt, out = _update([(0, 2), (2, 5)], loss=loss, grad_clip=1.0)
    assert out.cause == "the gradient is not finite although the loss is" and not out.stepped
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), _model().parameters(), strict=True))


def test_an_fp16_overflow_is_the_scalers_skip_until_the_scale_is_below_one():
    def overflow(forward, rows):
        return _weighted_loss(forward, rows) * 1e34  # finite (~1e35); times the scale 2 ** 16 it is not

    model, updater, opt, out = _update([(0, 5)], loss=overflow, grad_clip=1.0, fp16=True)
    assert out.overflow and not out.stepped and not out.skipped and out.grad_norm is None
    assert out.loss_scale == updater.loss_scale == 2.0 ** 15
    updater.scaler = torch.amp.GradScaler("cpu", init_scale=1.5)
    out = updater.update(lambda f, r: _weighted_loss(f, r) * float("inf"), [(0, 5)], opt)
    assert out.overflow and out.skipped and out.cause == "the gradient is not finite at loss scale 0.75"
    assert out.loss_scale == 0.75
    out = updater.update(_weighted_loss, [(0, 2), (2, 5)], opt, grad_clip=1.0)  # the scaler is ready again
    assert out.stepped and out.loss_scale == 0.75 and not out.overflow
    assert not torch.equal(model.weight, _model().weight)


@pytest.fixture
def prompt_set(xray_images):
    from harness.grpo.trainer import PromptSet

    return PromptSet([f"s{i}" for i in range(4)], [[im] for im in xray_images], ["write"] * 4,
                     ["the heart size is normal ."] * 4)


def test_a_scaler_skipped_rl_step_is_not_a_nonfinite_step(tiny_model, tiny_processor, tmp_path, prompt_set):
    from tests.harness.grpo.test_trainer import _fresh_copy, _params, _trainer

    tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path, prompt_set, max_nonfinite_steps=1, epochs=2,
                  select="final")
    tr.updater.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)  # as a float16 base gets
    calls = {"n": 0}

    def overflow_once(g):  # the first backward overflows, as a too-large loss scale does in fp16
        calls["n"] += 1
        return g * float("inf") if calls["n"] == 1 else g

    tr.params[0].register_hook(overflow_once)
    start = _params(tr)
    steps = []
    tr.optimizer.register_step_post_hook(lambda *_: steps.append(tr.step + 1))
    tr.train()  # max_nonfinite_steps = 1 would stop the run at a counted step
    rows = tr.run.steps()
    assert [r["scaler_skipped"] for r in rows] == [True, False, False, False]
    assert [r["loss_scale"] for r in rows[:2]] == [2.0 ** 7, 2.0 ** 7]
    assert steps == [2, 3, 4] and tr.nonfinite["total"] == 0 and not any(r.get("skipped") for r in rows)
    assert not all(torch.equal(a, b) for a, b in zip(start, _params(tr), strict=True))


def test_the_regularizer_sees_only_steps_taken(tiny_model, tiny_processor, tmp_path, prompt_set):
    """regularizer.after_step is "once per optimizer step": a step the fp16 scaler skipped moved no weight, so
    the adaptive controller must not count it (its KL horizon is in steps taken)."""
    from tests.harness.grpo.test_trainer import _fresh_copy, _trainer

    tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path, prompt_set, epochs=2, select="final",
                  regularizer="adaptive")
    tr.updater.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    calls = {"n": 0}

    def overflow_once(g):
        calls["n"] += 1
        return g * float("inf") if calls["n"] == 1 else g

    tr.params[0].register_hook(overflow_once)
    updates = []
    tr.regularizer.after_step = lambda kl, n: updates.append(tr.step)
    tr.train()
    assert [r["scaler_skipped"] for r in tr.run.steps()] == [True, False, False, False]
    assert updates == [2, 3, 4]


def test_a_gradient_the_scaler_cannot_rescue_is_counted(tiny_model, tiny_processor, tmp_path, prompt_set):
    """A NaN gradient makes the scaler skip every step; once the scale is below 1 the skips are counted as
    non-finite, so rl.max_nonfinite_steps stops the run (it would otherwise run on without ever stepping)."""
    from tests.harness.grpo.test_trainer import _fresh_copy, _trainer

    tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path, prompt_set, max_nonfinite_steps=2, epochs=5,
                  select="final")
    tr.updater.scaler = torch.amp.GradScaler("cpu", init_scale=3.0)
    tr.params[0].register_hook(lambda g: g * float("nan"))
    with pytest.raises(FloatingPointError, match=r"2 RL steps .* first: step 2: .* at loss scale 0.75"):
        tr.train()
    rows = tr.run.steps()
    assert [r["loss_scale"] for r in rows] == [1.5, 0.75, 0.375]
    assert [bool(r.get("skipped")) for r in rows] == [False, True, True]
    assert all(r["scaler_skipped"] for r in rows)


def test_warmup_resumes_with_the_loss_scale(tiny_tokenizer, tiny_processor, xray_images, tmp_path, monkeypatch):
    """The GradScaler's state is in the warm-up / SFT checkpoint: a resumed fp16 run scales as an uninterrupted
    one (a fresh scaler would start again from 2**16)."""
    from harness.runs.records import RunDir
    from harness.stages import lm_train
    from tests.harness.stages.test_lm_train import _data, _model
    from tests.killed_runs import KilledAt

    monkeypatch.setattr(lm_train, "needs_scaler", lambda dtype: True)  # as a float16 base gets (fp32 here)
    data = _data(xray_images)
    cfg = lm_train.TrainConfig(epochs=2, batch_size=2, lr=1e-2, scheduler="constant", max_steps=4,
                               checkpoint_every=2)

    def overflowing_model():
        model, calls = _model(tiny_tokenizer), {"n": 0}

        def overflow_once(g):
            calls["n"] += 1
            return g * float("inf") if calls["n"] == 1 else g

        next(p for p in model.parameters() if p.requires_grad).register_hook(overflow_once)
        return model

    full = overflowing_model()
    lm_train.train_lm(full, tiny_processor, data, None, cfg, RunDir(tmp_path / "full"), seed=3,
                      max_report_tokens=10, progress=False)

    with pytest.raises(KeyboardInterrupt):
        lm_train.train_lm(overflowing_model(), tiny_processor, data, None, cfg, KilledAt(tmp_path / "part", 3),
                          seed=3, max_report_tokens=10, progress=False)
    resumed = _model(tiny_tokenizer)  # a fresh process
    run = RunDir(tmp_path / "part")
    lm_train.train_lm(resumed, tiny_processor, data, None, cfg, run, seed=3, max_report_tokens=10, progress=False)
    expected = [r["loss_scale"] for r in RunDir(tmp_path / "full").steps()]
    assert expected == [2.0 ** 15] * 4 and [r["loss_scale"] for r in run.steps()] == expected
    a, b = dict(full.named_parameters()), dict(resumed.named_parameters())
    assert all(torch.allclose(a[n], b[n], atol=1e-6) for n in a)
