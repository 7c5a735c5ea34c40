"""`rl.token_weighting=gradient`: DiTPO's gradient-based token weights, its main setting (paper 003, Table 1
caption). The paper's text gives no formula; the rule is this project's (rewards/ditpo_weights.py:
token_gradient_weights): the old policy reads prompt + response once, J = the log-likelihood of the response's
diagnostic tokens, and a token's weight is the L2 norm of dJ / d(its input embedding), normalised to mean 1 per
response (capped at `token_weight_max` if set)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.policy.logprobs import token_logprobs
from harness.token_weighting.registry import TokenWeighting, register_token_weighting
from harness.token_weighting.words import rollout_words
from rewards.ditpo_weights import default_diagnostic_terms, diagnostic_flags, token_gradient_weights


@register_token_weighting("gradient")
@dataclass
class GradientWeighting(TokenWeighting):
    token_weight_max: float | None = None  # rl.token_weight_max (this project's)
    logprob_chunk_positions: int | None = None  # rl.logprob_chunk_positions (memory only)

    def setup(self, tokenizer, train_reports: list[str]) -> None:
        self.tok, self.terms = tokenizer, default_diagnostic_terms()

    def diagnostic_mask(self, rollout) -> torch.Tensor:
        """[N, L]: 1 at the diagnostic tokens of each response (all its tokens when it has none)."""
        mask = rollout.response_mask
        diag = torch.zeros_like(mask, dtype=torch.float32)
        for i, (words, wid) in enumerate(rollout_words(self.tok, rollout)):
            pos = mask[i].nonzero().flatten()
            diag[i, pos] = torch.tensor(diagnostic_flags(words, wid, self.terms), dtype=torch.float32)
        return diag

    def weights(self, model, rollout) -> torch.Tensor:
        diag = self.diagnostic_mask(rollout)
        captured = {}

        def hook(_module, _inp, output):  # the input embeddings become the leaf the gradient is taken against
            leaf = output.detach().requires_grad_(True)
            captured["embeds"] = leaf
            return leaf

        handle = model.get_input_embeddings().register_forward_hook(hook)
        try:
            with torch.enable_grad():
                logits = rollout.logits(model)  # the engine's log-prob forward (Rollout.logits)
                logp = token_logprobs(logits, rollout.responses, 1.0, self.logprob_chunk_positions)
                return token_gradient_weights(
                    captured["embeds"], logp, diag, rollout.response_mask, rollout.prompt_len, self.token_weight_max
                )
        finally:
            handle.remove()
