"""The RL reward of one run: `rl.reward` resolved once (rewards/spec.py: resolve_reward), not at every step and
validation; called on sampled texts, it scores what the spec scores (harness/prompting/output_format.py: reward_inputs,
the <report> part of a think_report output unless the reward reads raw text) and checks the output as
compute_reward does (shape [N], finite; rewards/spec.py: call_reward)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from harness.prompting.output_format import reward_inputs
from rewards.spec import call_reward, resolve_reward, reward_label


class RunReward:
    """`reward(texts, references)` -> [N] float64 rewards of the sampled `texts` (raw model outputs) against their
    references. `spec`: rl.reward; `output_format`: prompt.output_format of the policy."""

    def __init__(self, spec, output_format: str = "plain"):
        self.spec, self.output_format = spec, output_format
        self.fn, self.label = resolve_reward(spec), reward_label(spec)

    def __call__(self, texts: Sequence[str], references: Sequence[str]) -> np.ndarray:
        inputs = reward_inputs(self.fn, texts, self.output_format)
        return call_reward(self.fn, self.label, inputs, references)
