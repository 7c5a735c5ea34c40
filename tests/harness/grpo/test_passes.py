"""The engine's passes, chosen once when the trainer is built (harness/grpo/passes.py; issue 47), and the run's
reward, resolved once (harness/grpo/reward.py). That the steps' numbers did not move is what the other tests of
this folder check (exact losses, log-probs and parameters)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from harness.config import GenerationConfig, RLConfig
from harness.grpo import reward as reward_module
from harness.grpo.passes import pass_problem, passes_for
from harness.grpo.reward import RunReward
from harness.grpo.rollout import merged_response_logits, response_logits
from harness.grpo.shared_prompt import shared_prompt_logits
from harness.prompting.output_format import reward_inputs
from rewards import spec as spec_module
from rewards.spec import compute_reward
from tests.harness.grpo.test_trainer import (  # noqa: F401 (prompt_set: a fixture)
    _fresh_copy,
    _trainer,
    prompt_set,
)


@pytest.mark.parametrize("option", [{"lora_pass": "merged"}, {"prompt_pass": "shared"}])
def test_a_forbidden_combination_is_refused_when_the_trainer_is_built(option, tiny_model, tiny_processor, tmp_path,
                                                                      prompt_set):  # noqa: F811
    """An RLConfig built in code skips the config's validation: the trainer itself refuses the speed options the
    protocol forbids with rl.policy_dropout, in one line naming the key, before any pass runs."""
    key = next(iter(option))
    with pytest.raises(ValueError, match=f"^rl.{key} = '{option[key]}' needs rl.policy_dropout false") as e:
        _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path, prompt_set, policy_dropout=True, **option)
    assert "\n" not in str(e.value)


def test_pass_problems_name_the_key():
    assert pass_problem(RLConfig()) is None
    assert pass_problem(RLConfig(lora_pass="merged", prompt_pass="shared")) is None
    assert pass_problem(RLConfig(lora_pass="fused")) == "rl.lora_pass = 'fused' must be peft or merged"
    assert pass_problem(RLConfig(prompt_pass="once")) == "rl.prompt_pass = 'once' must be per_row or shared"
    assert pass_problem(RLConfig(lora_pass="merged"), torch.float32) is None
    assert pass_problem(RLConfig(), torch.bfloat16) is None  # peft passes take any dtype
    with pytest.raises(ValueError, match=r"^rl.lora_pass = 'merged': float32 weights only.*torch.bfloat16"):
        passes_for(RLConfig(lora_pass="merged"), None, torch.bfloat16)


def test_the_logits_function_and_backend_are_chosen_once():
    assert passes_for(RLConfig()).logits is response_logits
    assert passes_for(RLConfig(prompt_pass="shared")).logits is shared_prompt_logits
    merged = passes_for(RLConfig(lora_pass="merged", prompt_pass="shared")).logits
    assert isinstance(merged, functools.partial) and merged.func is merged_response_logits
    assert merged.keywords == {"logits_fn": shared_prompt_logits}
    assert passes_for(RLConfig()).backend == GenerationConfig().backend
    assert passes_for(RLConfig(), GenerationConfig(backend="fused")).backend == "fused"
    assert passes_for(RLConfig()).borrows_current and not passes_for(RLConfig(policy_dropout=True)).borrows_current


def test_the_reward_is_resolved_once_per_run(tiny_model, tiny_processor, tmp_path, prompt_set,  # noqa: F811
                                             monkeypatch):
    """The issue's count: rl.reward was resolved twice per step (the reward and the texts it scores)."""
    calls = []
    real = spec_module.resolve_reward

    def counted(spec):
        calls.append(spec)
        return real(spec)

    monkeypatch.setattr(spec_module, "resolve_reward", counted)  # compute_reward's and reward_inputs' lookups
    monkeypatch.setattr(reward_module, "resolve_reward", counted)
    tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path, prompt_set)
    tr.reference.on_start(tr.store)
    tr.store.capture("old")
    tr.train_step()
    tr.train_step()
    assert calls == ["test_length"]


@pytest.mark.parametrize("fmt", ["plain", "think_report"])
@pytest.mark.parametrize("spec", ["bleu4", {"bleu4": 0.5, "format": 0.5}])
def test_the_run_reward_scores_what_compute_reward_scores(spec, fmt):
    texts = ["<think> a </think> <report> the heart size is normal . </report>", "the lungs are clear .",
             "<report> mild cardiomegaly . </report>"]
    refs = ["the heart size is normal .", "the lungs are clear .", "mild cardiomegaly ."]
    expected = compute_reward(spec, reward_inputs(spec, texts, fmt), refs)
    got = RunReward(spec, fmt)(texts, refs)
    assert got.dtype == np.float64 and np.array_equal(got, expected)
