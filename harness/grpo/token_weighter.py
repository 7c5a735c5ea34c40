"""The engine's token weighter (`rl.token_weighting`, DiTPO-style): a rollout's tokens -> per-token advantages
A[i, t] = w[i, t] * A[i], weights of mean 1 over each response's tokens. The weight formulas are in
rewards/ditpo_weights.py (this project's own design; DiTPO publishes none); this module only maps the
engine's rollout tokens onto words and, for the gradient weighter, runs the old policy once.
"""

from __future__ import annotations

import torch

from harness.grpo.core import token_logprobs
from harness.grpo.rollout import Rollout, response_logits
from rewards.ditpo_weights import (
    default_diagnostic_terms,
    fit_idf,
    gradient_weights,
    is_diagnostic,
    stack_token_weights,
    word_ids_from_offsets,
    word_weights,
    words_to_token_weights,
)

MODES = ("none", "tfidf", "gradient")


def token_texts_and_offsets(tokenizer, ids: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """Decode tokens one by one, so every token's character span in the response text is exact."""
    text, offsets = "", []
    for i in ids:
        piece = tokenizer.decode([i], skip_special_tokens=True)
        offsets.append((len(text), len(text) + len(piece)))
        text += piece
    return text, offsets


class TokenWeighter:
    def __init__(self, mode: str, tokenizer, train_reports: list[str], boost: float = 2.0,
                 w_max: float | None = None, chunk_rows: int = 4):
        if mode not in MODES:
            raise ValueError(f"rl.token_weighting must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode, self.tok, self.boost, self.w_max, self.chunk_rows = mode, tokenizer, boost, w_max, chunk_rows
        self.terms = default_diagnostic_terms()
        self.idf = fit_idf(train_reports) if mode == "tfidf" else {}

    def _words(self, ro: Rollout):
        """Per response: (words, word id per masked token)."""
        out = []
        for row, m in zip(ro.responses.tolist(), ro.response_mask.tolist(), strict=True):
            ids = [t for t, k in zip(row, m, strict=True) if k]
            text, offsets = token_texts_and_offsets(self.tok, ids)
            out.append(word_ids_from_offsets(text, offsets))
        return out

    def weights(self, model, ro: Rollout) -> torch.Tensor:
        """[N, L] weights (0 outside the response mask). `model` must hold the old policy for `gradient`."""
        mask = ro.response_mask
        words = self._words(ro)
        if self.mode == "tfidf":
            per = [words_to_token_weights(word_weights(ws, self.idf, self.terms, self.boost), wid)
                   for ws, wid in words]
            return stack_token_weights(per, mask).float()
        return self._gradient(model, ro, words)

    def _gradient(self, model, ro: Rollout, words) -> torch.Tensor:
        mask = ro.response_mask
        diag = torch.zeros_like(mask, dtype=torch.float32)
        for i, (ws, wid) in enumerate(words):
            flags = [wid_t is not None and is_diagnostic(ws[wid_t], self.terms) for wid_t in wid]
            if not any(flags):
                flags = [True] * len(wid)  # no diagnostic token: the whole response is the proxy
            pos = mask[i].nonzero().flatten().tolist()
            for p, f in zip(pos, flags, strict=True):
                diag[i, p] = float(f)
        captured = {}
        embed = model.get_input_embeddings()

        def hook(_module, _inp, output):
            leaf = output.detach().requires_grad_(True)
            captured["embeds"] = leaf
            return leaf

        handle = embed.register_forward_hook(hook)
        try:
            with torch.enable_grad():
                logits = response_logits(model, ro)
                logp = token_logprobs(logits, ro.responses, 1.0, self.chunk_rows)
                proxy = (logp * diag).sum()
                (grad,) = torch.autograd.grad(proxy, captured["embeds"])
        finally:
            handle.remove()
        P = ro.prompt_len
        # The gradient at the input position of response token t (position P + t).
        norms = grad[:, P:].float().norm(dim=-1).detach()
        return gradient_weights(norms, mask.float(), self.w_max)
