"""A rollout's response tokens mapped onto the words of their decoded text, which the registered weighters weigh with
the formulas of rewards/ditpo_weights.py (`rl.token_weighting`, DiTPO). The rollout is any object with the engine's
`responses` and `response_mask` ([N, L] tensors; harness/grpo/rollout.py's Rollout), so the weighters need no
import of the engine, which builds them (`build_token_weighting`) and applies A[i, t] = w[i, t] * A[i].
"""

from __future__ import annotations

from rewards.ditpo_weights import word_ids_from_offsets

__all__ = ["rollout_words", "token_texts_and_offsets"]


def token_texts_and_offsets(tokenizer, ids: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """Decode tokens one by one, so every token's character span in the response text is exact."""
    text, offsets = "", []
    for i in ids:
        piece = tokenizer.decode([i], skip_special_tokens=True)
        offsets.append((len(text), len(text) + len(piece)))
        text += piece
    return text, offsets


def rollout_words(tokenizer, ro) -> list[tuple[list[str], list[int | None]]]:
    """Per response: (its words, the word index of each masked token, None for a token of no word)."""
    out = []
    for row, m in zip(ro.responses.tolist(), ro.response_mask.tolist(), strict=True):
        ids = [t for t, k in zip(row, m, strict=True) if k]
        text, offsets = token_texts_and_offsets(tokenizer, ids)
        out.append(word_ids_from_offsets(text, offsets))
    return out
