"""harness/parallel/updater.py in one process: fp16 loss scaling with torch's GradScaler on the CPU, and a
scaler-skipped RL step that is not counted as a non-finite step (rl.max_nonfinite_steps)."""

from __future__ import annotations

import pytest
import torch

from harness.parallel.updater import Updater, needs_scaler


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

    class Interrupted(RunDir):
        def log_step(self, row):
            if row["step"] == 3:
                raise KeyboardInterrupt
            super().log_step(row)

    with pytest.raises(KeyboardInterrupt):
        lm_train.train_lm(overflowing_model(), tiny_processor, data, None, cfg, Interrupted(tmp_path / "part"),
                          seed=3, max_report_tokens=10, progress=False)
    resumed = _model(tiny_tokenizer)  # a fresh process
    run = RunDir(tmp_path / "part")
    lm_train.train_lm(resumed, tiny_processor, data, None, cfg, run, seed=3, max_report_tokens=10, progress=False)
    expected = [r["loss_scale"] for r in RunDir(tmp_path / "full").steps()]
    assert expected == [2.0 ** 15] * 4 and [r["loss_scale"] for r in run.steps()] == expected
    a, b = dict(full.named_parameters()), dict(resumed.named_parameters())
    assert all(torch.allclose(a[n], b[n], atol=1e-6) for n in a)
