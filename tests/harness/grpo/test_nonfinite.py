"""Non-finite RL steps (issue 13): skipped without an optimizer step, logged, counted; too many in a row stop the
run with the first cause named and a checkpoint to resume from."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from harness.grpo import step_loss as step_loss_module
from harness.grpo.trainer import PromptSet
from rewards.registry import register_reward
from tests.harness.grpo.test_trainer import _fresh_copy, _params, _trainer

_CALLS = {"n": 0}


@pytest.fixture
def prompt_set(xray_images):
    return PromptSet([f"s{i}" for i in range(4)], [[im] for im in xray_images], ["write"] * 4,
                     ["the heart size is normal ."] * 4)


@register_reward("test_huge")
def _huge_reward(candidates, references, **_):
    # A reward with a bug: one candidate scores 1e308 (inf in float32), the others vary with their length.
    return np.array([1e308] + [len(c) / 7.0 for c in candidates[1:]])


@register_reward("test_huge_on_second_call")
def _huge_once(candidates, references, **_):
    # (NaN or inf never get here: rewards/spec.py (compute_reward) refuses them with an error naming the candidate.)
    _CALLS["n"] += 1
    out = np.array([len(c.split()) / 10.0 + 0.01 * i for i, c in enumerate(candidates)])
    return out * 1e300 if _CALLS["n"] == 2 else out


def test_a_reward_of_1e308_is_named_and_the_run_is_resumable(tiny_model, tiny_processor, tmp_path, prompt_set):
    tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path, prompt_set, reward="test_huge",
                  max_nonfinite_steps=2, epochs=2, select="final")
    start = _params(tr)
    with pytest.raises(FloatingPointError, match=r"reward 'test_huge'.*1e\+308") as err:
        tr.train()
    assert "2 RL steps in a row" in str(err.value) and "the first: step 1" in str(err.value)
    # no optimizer step was taken, and both skipped steps are in the log with their cause
    assert all(torch.equal(a, b) for a, b in zip(start, _params(tr), strict=True))
    rows = tr.run.steps()
    assert [(r["step"], r["skipped"], r["nonfinite_in_a_row"]) for r in rows] == [(1, True, 1), (2, True, 2)]
    assert "test_huge" in rows[0]["nonfinite_cause"] and rows[0]["reward_max"] is None  # inf is logged as null
    # the checkpoint resumes: a fixed reward continues from step 2 with the counters kept
    resumed = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path, prompt_set, reward="test_length",
                       max_nonfinite_steps=2, epochs=2, select="final")
    assert resumed.try_resume() and resumed.step == 2 and resumed.nonfinite["total"] == 2
    assert [e["step"] for e in resumed.run.evals()] == [0, 2]  # the epoch-end validation ran before the stop
    resumed.train()
    assert resumed.step == 4 and not any(r.get("skipped") for r in resumed.run.steps()[2:])
    assert not all(torch.equal(a, b) for a, b in zip(start, _params(resumed), strict=True))


def test_one_bad_step_is_skipped_and_the_run_goes_on(tiny_model, tiny_processor, tmp_path, prompt_set):
    _CALLS["n"] = 0
    tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path, prompt_set, reward="test_huge_on_second_call",
                  epochs=2, select="final")
    snaps = {}
    tr.optimizer.register_step_post_hook(lambda *_: snaps.__setitem__(tr.step + 1, _params(tr)))
    tr.train()
    rows = tr.run.steps()
    assert [r.get("skipped", False) for r in rows] == [False, True, False, False]
    assert rows[1]["nonfinite_total"] == 1 and "test_huge_on_second_call" in rows[1]["nonfinite_cause"]
    assert sorted(snaps) == [1, 3, 4]  # three optimizer steps for four training steps
    assert tr.nonfinite == {"in_a_row": 0, "total": 1, "first": None}


def _nan_logits(real):
    return lambda model, ro, *memo: real(model, ro, *memo) * float("nan")


def _nan_loss(real):
    def loss(*a, **k):
        value, stats = real(*a, **k)
        return value * float("nan"), stats
    return loss


@pytest.mark.parametrize(("cause", "target", "make"), [
    ("logits of the current policy", "logits", _nan_logits),
    ("the loss is nan", "policy_loss", _nan_loss),
    ("the gradient is not finite", None, None),
])
def test_each_cause_is_named(cause, target, make, tiny_model, tiny_processor, tmp_path, prompt_set, monkeypatch):
    tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path, prompt_set, max_nonfinite_steps=1)
    if target == "logits":  # the passes' logits function, chosen when the trainer was built (harness/grpo/passes.py)
        tr.passes = dataclasses.replace(tr.passes, logits=make(tr.passes.logits))
    elif target is not None:
        monkeypatch.setattr(step_loss_module, target, make(getattr(step_loss_module, target)))
    else:
        tr.params[0].register_hook(lambda g: g * float("nan"))
    start = _params(tr)
    with pytest.raises(FloatingPointError, match=cause):
        tr.train()
    assert all(torch.equal(a, b) for a, b in zip(start, _params(tr), strict=True))
    assert (tmp_path / "checkpoint" / "rl_state.pt").is_file()
