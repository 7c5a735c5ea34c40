"""A regularizer is one file plus one registration: this test file registers a throwaway one and runs it through
config loading, the RL trainer and the report, touching no other file of the project."""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import pytest
import torch

from harness.config import ConfigError, TrainConfig, load_config
from harness.grpo.trainer import GRPOTrainer, PromptSet
from harness.models.trainable import add_lora, set_trainable
from harness.runs.records import RunDir
from regularizers.registry import Regularizer, register_regularizer
from tests.harness.grpo.test_trainer import _length_reward  # noqa: F401 - registers the test_length reward


@register_regularizer("test_scaled_constant")
@dataclass
class ScaledConstant(Regularizer):
    """beta = scale x beta_base: beta_base comes from the RL config by name, scale from rl.regularizer_args."""

    beta_base: float = 0.1
    scale: float = 1.0

    def __post_init__(self) -> None:
        if not self.scale >= 0:
            raise ValueError(f"scale must be >= 0, got {self.scale}")

    def betas(self, advantages, h_ref=None):
        return torch.full_like(advantages, self.beta_base * self.scale, dtype=torch.float32)


def test_a_plugin_regularizer_runs_through_config_trainer_and_report(tiny_model, tiny_processor, xray_images,
                                                                     tmp_path):
    cfg = load_config(None, ["rl.regularizer=test_scaled_constant", "rl.regularizer_args={scale: 0.3}",
                             "rl.beta_base=0.07", "rl.reference=static", "rl.reward=test_length",
                             "rl.group_size=2", "rl.prompts_per_step=2", "rl.max_new_tokens=6",
                             "rl.min_new_tokens=2"])
    with pytest.raises(ConfigError, match="'rl.regularizer' = 'test_scaled_constant' cannot be built"):
        load_config(None, ["rl.regularizer=test_scaled_constant", "rl.regularizer_args={scale: -1}"])
    torch.manual_seed(0)
    model = add_lora(tiny_model, r=4, alpha=8, dropout=0.0)
    set_trainable(model, "rl")
    prompts = PromptSet([f"s{i}" for i in range(4)], [[im] for im in xray_images], ["write"] * 4,
                        ["the heart size is normal ."] * 4)
    run = RunDir(tmp_path / "rl")
    trainer = GRPOTrainer(model, tiny_processor, cfg.rl, TrainConfig(epochs=1, lr=5e-3, scheduler="constant"), run,
                          prompts, None, seed=0, progress=False)
    assert isinstance(trainer.regularizer, ScaledConstant) and trainer.regularizer.scale == 0.3
    trainer.train()
    steps = run.steps()
    assert [s["beta_mean"] for s in steps] == pytest.approx([0.021, 0.021])
    assert all(s["kl_mean"] >= 0 for s in steps)

    # The report reads the plug-in arm's records like any other arm's.
    from reports.build import build_report
    from tests.reports.conftest import write_experiment

    exp = write_experiment(tmp_path / "exp")
    arm_dir = exp / "stages" / "rl-seed0-ckl"
    for name in ("steps.jsonl",):
        shutil.copy(run.path / name, arm_dir / name)
    page = build_report(exp, B=200)
    assert page.is_file() and (page.parent / "figures").is_dir()
