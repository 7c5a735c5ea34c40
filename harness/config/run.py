"""RunConfig: one config for any stage, made of the sections; each stage reads the sections it needs."""

from __future__ import annotations

from dataclasses import dataclass

from harness.config.rl import RLConfig
from harness.config.sections import (
    ClassifierConfigSection,
    DataConfig,
    EvalConfig,
    GenerationConfig,
    ModelConfig,
    PromptConfig,
    knob,
)
from harness.config.training import PretrainConfig, TrainConfig


@dataclass
class RunConfig:
    seed: int = knob(0, "Seed of the run (data order, init, sampling), 0 <= seed < 2**63.")
    out_dir: str = knob("runs/run", "Run directory; records and checkpoints go here.")
    init_from: str | None = knob(None, "Stage model to start from (the `model/` folder an earlier stage wrote; "
                                       "docs/protocol.md, glossary); null = the base model.")
    cache_dir: str | None = knob(None, "Cache for stage 0 (tiny base pretraining), keyed by config hash.")
    data: DataConfig = knob(help="Data set and its subsets.", default_factory=DataConfig)
    model: ModelConfig = knob(help="Base model, LoRA and tiny-preset sizes.", default_factory=ModelConfig)
    train: TrainConfig = knob(help="Optimizer and schedule of stages 1-3.", default_factory=TrainConfig)
    prompt: PromptConfig = knob(help="Prompt text and report length.", default_factory=PromptConfig)
    classifier: ClassifierConfigSection = knob(help="The disease classifier of stage 2.",
                                               default_factory=ClassifierConfigSection)
    pretrain: PretrainConfig = knob(help="Stage 0 (tiny preset only).", default_factory=PretrainConfig)
    rl: RLConfig = knob(help="Stage 3: GRPO with a KL regularizer and a reference strategy.",
                        default_factory=RLConfig)
    generation: GenerationConfig = knob(help="Decoding of evaluation (and the rollouts' loop).",
                                        default_factory=GenerationConfig)
    eval: EvalConfig = knob(help="Scoring of evaluations.", default_factory=EvalConfig)
