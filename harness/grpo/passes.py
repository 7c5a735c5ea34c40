"""How the GRPO engine computes its passes, chosen once when the trainer is built (issue 47): the speed options
(rl.lora_pass, rl.prompt_pass, generation.backend, the frozen passes' vision-feature memo) and the mode of the
current policy's pass (rl.policy_dropout). The step (harness/grpo/trainer.py) then reads the algorithm only: it
asks `Passes` for the logits function, a rollout, the pass mode with grad, and whether a frozen policy equal to
the live parameters may take the current pass's values.

Combinations the protocol forbids cannot be built: `passes_for` refuses them in one line (the rules on the options
alone are one list, harness/config/rl.py `pass_option_problem`, which the config's validation also reads when a
config loads; a trainer built from an RLConfig in code meets them here):
- rl.lora_pass merged with rl.policy_dropout: LoRA dropout acts on A's input alone, one merged weight cannot;
- rl.lora_pass merged with base weights that are not float32 (harness/models/merged_lora.py checks each layer);
- rl.prompt_pass shared with rl.policy_dropout: one prompt computation would share one dropout draw across its group.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from harness.config import GenerationConfig, RLConfig
from harness.config.rl import pass_option_problem
from harness.grpo.rollout import Rollout, merged_response_logits, response_logits, sample_rollout
from harness.grpo.shared_prompt import shared_prompt_logits
from harness.models.pass_mode import set_grad_pass_mode
from harness.sampling.feature_memo import SnapshotFeatures


@dataclass(frozen=True)
class Passes:
    """The passes of one RL run. `logits(model, rollout, memo=None)` -> [N, L, V]: the old, reference and current
    log-prob passes' logits function; `backend`: generation.backend of the rollouts; `policy_dropout`: the current
    pass runs in train mode (LoRA dropout active); `features`: the frozen snapshots' vision features
    (harness/sampling/feature_memo.py)."""

    logits: Callable
    backend: str
    policy_dropout: bool
    features: SnapshotFeatures = field(default_factory=SnapshotFeatures)

    @property
    def borrows_current(self) -> bool:
        """Whether a frozen policy equal to the live parameters takes the current pass's values (detached) instead
        of a pass of its own: not under rl.policy_dropout, where the current pass's values are not the policy's
        eval-mode values."""
        return not self.policy_dropout

    @contextlib.contextmanager
    def with_grad(self, model) -> Iterator[None]:
        """The current policy's pass with grad in its mode (rl.policy_dropout; gradient checkpointing needs train
        mode: harness/models/pass_mode.py), the model back in eval mode afterwards."""
        try:
            set_grad_pass_mode(model, self.policy_dropout)
            yield
        finally:
            model.eval()

    def sample(self, model, processor, images, instructions, **sampling) -> Rollout:
        """One rollout with the run's decoding backend (harness/grpo/rollout.py: sample_rollout's arguments)."""
        return sample_rollout(model, processor, images, instructions, backend=self.backend, **sampling)

    def after_rollouts(self) -> None:
        """After a step's rollouts: a vLLM engine gives its memory back to the update (generation.vllm_sleep_level)."""
        if self.backend == "vllm":
            # lazy: vllm is optional (pip install 'regbench[vllm]')
            from harness.sampling.vllm_rollout import sleep_engines

            sleep_engines()


def pass_problem(rl: RLConfig, weights: torch.dtype | None = None) -> str | None:
    """Why rl's pass options cannot be combined (None when they can), with the base's `weights` dtype when known:
    one line naming the key and value."""
    if problem := pass_option_problem(rl):
        key, value, why = problem
        return f"{key} = {value!r} {why}"
    if rl.lora_pass == "merged" and weights not in (None, torch.float32):
        return (f"rl.lora_pass = 'merged': float32 weights only, the base weights are {weights} (the merged weight "
                "would round the LoRA delta away); use rl.lora_pass=peft")
    return None


def passes_for(rl: RLConfig, generation: GenerationConfig | None = None,
               weights: torch.dtype | None = None) -> Passes:
    """The run's passes from its RL and generation sections (GenerationConfig's default backend when None) and
    the base's weights dtype (harness/models/precision.py base_dtype; None: not checked here, merged_lora checks
    each layer at its first pass); a forbidden combination raises ValueError (`pass_problem`)."""
    problem = pass_problem(rl, weights)
    if problem:
        raise ValueError(problem)
    logits = shared_prompt_logits if rl.prompt_pass == "shared" else response_logits
    if rl.lora_pass == "merged":
        logits = functools.partial(merged_response_logits, logits_fn=logits)
    return Passes(logits, (generation or GenerationConfig()).backend, rl.policy_dropout)
