"""An aggregation is one file plus one registration: this test file registers a throwaway one and runs it through
config loading, the GRPO loss, micro-batch weights and the RL trainer, touching no other file of the project."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.aggregation import (
    AGGREGATIONS,
    Aggregation,
    aggregate,
    aggregation_normalizer,
    aggregation_weights,
    available_aggregations,
    register_aggregation,
)
from harness.config import ConfigError, TrainConfig, load_config
from harness.grpo.core import policy_loss
from harness.grpo.trainer import GRPOTrainer, PromptSet
from harness.models.trainable import add_lora, set_trainable
from harness.runs.records import RunDir
from tests.harness.grpo.test_trainer import _length_reward  # noqa: F401 - registers the test_length reward


@register_aggregation("test_row_sum_mean")
class RowSumMean(Aggregation):
    """Sum of each response's tokens, averaged over all N responses (a sequence-sum rule, for the test only)."""

    def reduce(self, x, m, group_size, max_len):
        return (x * m).sum() / max(x.shape[0], 1)

    def normalizer(self, m, group_size, max_len):
        return torch.tensor(float(max(m.shape[0], 1)))

    def weights(self, m, group_size, max_len):
        return m / max(m.shape[0], 1)


def test_builtins_and_the_plugin_are_registered():
    names = available_aggregations()
    assert set(AGGREGATIONS) <= set(names) and "test_row_sum_mean" in names


def test_a_typo_fails_at_load_time_listing_the_registered_names():
    with pytest.raises(ConfigError, match=r"'rl.aggregation' = 'token_maen' is not registered; registered: .*"):
        load_config(None, ["rl.aggregation=token_maen"])
    with pytest.raises(ValueError, match=r"unknown aggregation 'token_maen'; available: .*token_mean"):
        aggregate(torch.ones(2, 3), torch.ones(2, 3), "token_maen")


def test_plugin_loss_equals_a_hand_count():
    # x = [[0.3, 0.7, 1.1], [0.2, 0.0, 0.0]] with mask [[1, 1, 0], [1, 0, 0]] -> (0.3 + 0.7 + 0.2) / 2 = 0.6
    x = torch.tensor([[0.3, 0.7, 1.1], [0.2, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert aggregate(x, mask, "test_row_sum_mean").item() == pytest.approx(0.6, rel=1e-12)
    assert aggregation_normalizer(mask, "test_row_sum_mean").item() == 2.0
    # Through the GRPO loss: on-policy (ratio 1), no KL, advantages [0.5, -0.25] -> per-token loss -A_i, so the
    # loss is -(0.5 + 0.5 - 0.25) / 2 = -0.375.
    logp = torch.log(torch.tensor([[0.2, 0.3, 0.9], [0.6, 0.9, 0.9]], dtype=torch.float64))
    loss, _ = policy_loss(logp, logp, None, torch.tensor([0.5, -0.25], dtype=torch.float64),
                          torch.zeros(2, dtype=torch.float64), mask, aggregation="test_row_sum_mean")
    assert loss.item() == pytest.approx(-0.375, rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 6), t=st.integers(1, 7), seed=st.integers(0, 10**6),
       mode=st.sampled_from([*AGGREGATIONS, "test_row_sum_mean"]))
def test_weights_reproduce_the_reduction_for_every_registered_rule(n, t, seed, mode):
    g = torch.Generator().manual_seed(seed)
    rows = n * 2  # group_token_mean needs G dividing the rows
    x = torch.randn(rows, t, generator=g, dtype=torch.float64)
    mask = (torch.rand(rows, t, generator=g) < 0.7).to(torch.int64)
    kw = {"group_size": 2, "max_len": t}
    w = aggregation_weights(mask.to(torch.float64), mode, **kw)
    assert (w * x).sum().item() == pytest.approx(aggregate(x, mask, mode, **kw).item(), rel=1e-9, abs=1e-12)


def test_a_plugin_aggregation_runs_through_config_and_the_trainer(tiny_model, tiny_processor, xray_images, tmp_path):
    cfg = load_config(None, ["rl.aggregation=test_row_sum_mean", "rl.regularizer=constant", "rl.reference=static",
                             "rl.reward=test_length", "rl.group_size=2", "rl.prompts_per_step=2",
                             "rl.max_new_tokens=6", "rl.min_new_tokens=2"])
    torch.manual_seed(0)
    model = add_lora(tiny_model, r=4, alpha=8, dropout=0.0)
    set_trainable(model, "rl")
    prompts = PromptSet([f"s{i}" for i in range(4)], [[im] for im in xray_images], ["write"] * 4,
                        ["the heart size is normal ."] * 4)
    run = RunDir(tmp_path / "rl")
    trainer = GRPOTrainer(model, tiny_processor, cfg.rl, TrainConfig(epochs=1, lr=5e-3, scheduler="constant"), run,
                          prompts, None, seed=0, progress=False)
    trainer.train()
    steps = run.steps()
    assert len(steps) == 2 and all(torch.isfinite(torch.tensor(s["loss"])) for s in steps)
