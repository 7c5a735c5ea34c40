"""rl.prompt_pass = shared (harness/grpo/shared_prompt.py): each group's prompt computed once.

Not bit-identical, so the checks are to float rounding: the logits at every response position and the LoRA
gradients through a loss on them equal the full pass's; runs of rows that share a prompt are found from the
tokens and the images (the test prompts share their text and differ only in their image), also in a micro-batch
that cuts a group; a GRPO step gives the per-row step's log-probs, losses and updated parameters; and the config
refuses the shared pass with rl.policy_dropout.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from harness.config import ConfigError, load_config
from harness.grpo.rollout import Rollout, response_logits
from harness.grpo.shared_prompt import prompt_runs, shared_prompt_logits
from harness.models.trainable import unwrap
from tests.harness.grpo.test_trainer import (  # noqa: F401 (prompt_set: a fixture)
    _fresh_copy,
    _trainer,
    assert_steps_match_to_rounding,
    prompt_set,
    three_steps_from_start,
)


@pytest.fixture
def trainer(tiny_model, tiny_processor, tmp_path, prompt_set):  # noqa: F811
    tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path, prompt_set, group_size=3, max_new_tokens=7)
    tr.store.capture("old")  # the rollout samples under the old snapshot
    tr.model.eval()
    return tr


@pytest.fixture
def rollout(trainer) -> Rollout:
    return trainer._rollout([0, 1, 2, 3])


def _without_keys(ro: Rollout) -> Rollout:
    return Rollout(ro.sequences, ro.prompt_mask, ro.response_mask, ro.pixel_values, ro.image_grid_thw, ro.texts,
                   ro.images_per_row, None)


@contextlib.contextmanager
def _language_model_rows(model):
    """The batch size of every call of the language model inside the block."""
    seen = []
    lm = unwrap(model).model.language_model
    handle = lm.register_forward_pre_hook(lambda _m, _a, kw: seen.append(kw["inputs_embeds"].shape[0]),
                                          with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def _assert_close_on_responses(actual, expected, mask):
    keep = mask.bool()
    torch.testing.assert_close(actual[keep], expected[keep], rtol=1e-5, atol=1e-5)


def test_runs_are_found_from_tokens_and_images(rollout):
    """The 4 prompts have the same text and different images: 4 runs of G = 3, with image keys or without."""
    assert prompt_runs(rollout) == [3, 3, 3, 3]
    assert prompt_runs(_without_keys(rollout)) == [3, 3, 3, 3]
    assert prompt_runs(rollout.rows(2, 8)) == [1, 3, 2]  # a micro-batch cutting two groups
    swapped = _without_keys(rollout)
    swapped.pixel_values = swapped.pixel_values.clone()
    per_image = int(rollout.image_grid_thw[0].prod())
    swapped.pixel_values[per_image:2 * per_image] += 1.0  # row 1 now has another image than rows 0 and 2
    assert prompt_runs(swapped) == [1, 1, 1, 3, 3, 3]


def test_pick_takes_rows_with_their_images(rollout):
    """Rollout.pick (the first row of each run): a contiguous pick equals `rows`; any pick keeps each row's
    images and keys with it."""
    a, b = rollout.pick([2, 3, 4]), rollout.rows(2, 5)
    for name in ("sequences", "prompt_mask", "response_mask", "pixel_values", "image_grid_thw"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert (a.texts, a.images_per_row, a.image_keys) == (b.texts, b.images_per_row, b.image_keys)
    picked = rollout.pick([9, 0])
    for got, row in zip((picked.rows(0, 1), picked.rows(1, 2)), (9, 0), strict=True):
        want = rollout.rows(row, row + 1)
        assert torch.equal(got.pixel_values, want.pixel_values) and got.image_keys == want.image_keys
        assert torch.equal(got.sequences, want.sequences)


@pytest.mark.parametrize("rows", [(0, 12), (2, 8)])
@pytest.mark.parametrize("keys", [True, False])
def test_logits_equal_the_full_pass_to_rounding(trainer, rollout, rows, keys):
    ro = rollout.rows(*rows)
    ro = ro if keys else _without_keys(ro)
    with torch.no_grad():
        full = response_logits(trainer.model, ro)
        with _language_model_rows(trainer.model) as seen:
            shared = shared_prompt_logits(trainer.model, ro)
    # Another computation, not the full pass again: the prompts of one row per run, then every row's response
    # (at these tiny widths the two can agree bit for bit; at the testbed's they differ in the last bits).
    assert seen == [len(prompt_runs(ro)), len(ro)]
    assert shared.shape == full.shape
    _assert_close_on_responses(shared, full, ro.response_mask)


def test_lora_gradients_equal_the_full_pass_to_rounding(trainer, rollout):
    def grads(fn):
        trainer.model.zero_grad()
        logits = fn(trainer.model, rollout)
        # A loss weighing every logit differently, on response positions only (padding predicts nothing scored).
        weights = torch.linspace(0.3, 1.7, 7)
        loss = (torch.log_softmax(logits, -1)[..., :7] * weights).sum(-1)
        (loss * rollout.response_mask).sum().backward()
        return {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}

    full, shared = grads(response_logits), grads(shared_prompt_logits)
    assert set(full) == set(shared) and any("lora_" in n for n in full) and any("visual" in n for n in full)
    nonzero = 0
    for name, g in shared.items():
        # Relative to the largest entry: the two sum in another order, so small entries differ in more digits. (A
        # LoRA A behind a zero-initialised B has no gradient yet: exactly zero in both.)
        scale = float(full[name].abs().max())
        nonzero += scale > 0
        assert float((g - full[name]).abs().max()) <= 1e-5 * scale, name
    assert nonzero >= 10


def test_a_rollout_without_shared_prompts_takes_the_full_pass(trainer, rollout):
    single = rollout.rows(0, 1)
    with torch.no_grad():
        assert torch.equal(shared_prompt_logits(trainer.model, single), response_logits(trainer.model, single))


@pytest.mark.parametrize("lora_pass", ["peft", "merged"])
def test_shared_prompt_passes_give_the_per_row_step_to_rounding(tiny_model, tiny_processor, tmp_path,
                                                               prompt_set, lora_pass, monkeypatch):  # noqa: F811
    """Three GRPO steps (RER: old and reference passes, and the current pass with grad) with the prompt computed
    once per group: the same rollouts, losses and updated parameters as per-row passes, to float rounding."""
    from harness.grpo import passes as passes_module  # the logits function is chosen there (issue 47)

    entered = []
    monkeypatch.setattr(passes_module, "shared_prompt_logits",
                        lambda *a, **k: entered.append(1) or shared_prompt_logits(*a, **k))
    runs = {}
    for prompt_pass in ("per_row", "shared"):
        tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / prompt_pass, prompt_set,
                      regularizer="rer", prompt_pass=prompt_pass, lora_pass=lora_pass)
        entered.clear()
        runs[prompt_pass] = *three_steps_from_start(tr), len(entered)
    (base_rows, base_params, base_entered), (rows, params, shared_entered) = runs["per_row"], runs["shared"]
    # 3 current passes; old and ref passes at step 2, ref alone at step 3 (old synced after step 2)
    assert base_entered == 0 and shared_entered == 3 + 2 + 1
    assert_steps_match_to_rounding(base_rows, base_params, rows, params)


def test_config_refuses_the_shared_pass_with_policy_dropout():
    with pytest.raises(ConfigError, match="rl.prompt_pass.*policy_dropout"):
        load_config(None, ["rl.prompt_pass=shared", "rl.policy_dropout=true"])
    with pytest.raises(ConfigError, match="rl.prompt_pass.*must be per_row or shared"):
        load_config(None, ["rl.prompt_pass=once"])
    assert load_config(None, ["rl.prompt_pass=shared"]).rl.prompt_pass == "shared"
