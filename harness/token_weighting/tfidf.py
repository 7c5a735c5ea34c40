"""`rl.token_weighting=tfidf`: DiTPO's rule-based (TF-IDF) token weights, the variant of its main (gradient) setting;
the formula (IDF of the RL training reports, x `token_weight_boost` on diagnostic words, mean 1 per response) is
this project's (rewards/ditpo_weights.py: tfidf_weights)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.token_weighting.registry import TokenWeighting, register_token_weighting
from harness.token_weighting.words import rollout_words
from rewards.ditpo_weights import (
    default_diagnostic_terms,
    fit_idf,
    stack_token_weights,
    word_weights,
    words_to_token_weights,
)


@register_token_weighting("tfidf")
@dataclass
class TfidfWeighting(TokenWeighting):
    token_weight_boost: float = 2.0  # rl.token_weight_boost (this project's)
    idf: dict = field(default_factory=dict, repr=False)

    def setup(self, tokenizer, train_reports: list[str]) -> None:
        self.tok, self.terms, self.idf = tokenizer, default_diagnostic_terms(), fit_idf(train_reports)

    def weights(self, model, rollout) -> torch.Tensor:
        per = [
            words_to_token_weights(word_weights(ws, self.idf, self.terms, self.token_weight_boost), wid)
            for ws, wid in rollout_words(self.tok, rollout)
        ]
        return stack_token_weights(per, rollout.response_mask).float()
