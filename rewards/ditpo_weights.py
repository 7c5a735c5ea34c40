"""DiTPO-style token weight formulas: per-token advantages that favour diagnostically informative tokens.
Numbers only (words, IDF tables, gradients -> weights); the engine's weighters (harness/token_weighting/,
registered as `rl.token_weighting` tfidf and gradient) apply them to a rollout's tokens.

DiTPO (paper 003, "Diagnostic Token-weighted Policy Optimization") observes that most tokens of a radiology
report are template-like and proposes to scale each token's advantage by a weight from a rule-based (TF-IDF)
or a gradient-based mechanism, with a diagnostic F1 reward; its main results use the gradient-based weights
(Table 1 caption). What the paper's text available to this project (paper 003: abstract, figure and table
captions) states is only that: token-level advantages that give diagnostically critical tokens more weight
(Fig. 1b), from TF-IDF or from gradients. It gives no formula, constant or normalisation, so every formula and
constant below (word split, IDF form, boost, mean-1 normalisation, the gradient's proxy objective, the norm, the
cap) is this project's own design.
The weights feed `harness.grpo.core.policy_loss` as per-token advantages `A[i, t] = w[i, t] * A[i]`
(`apply_token_weights`). Every weight vector has mean 1 over its response's tokens, so the average size of
the policy-gradient signal is that of plain GRPO and only its distribution over tokens changes.

Rule-based (TF-IDF)
- Words: lowercase runs of `[a-z0-9]` (`report_words`), the same for fitting and for weighting.
- `fit_idf(reports)`: smooth IDF over the training reports, `idf(w) = log((1 + n) / (1 + df(w))) + 1`
  (n reports, df = number of reports containing w; scikit-learn's `smooth_idf` form). It is >= 1, and 1 for a
  word found in every report.
- Raw weight of one occurrence of word w: `idf(w) * (boost if w is diagnostic else 1)`. Summed over a
  response, a word's occurrences weigh `tf(w) * idf(w)`: its TF-IDF in that response (times the boost). A word
  unseen in training gets the largest idf of the table (the rarest known word); a token with no letter or
  digit (punctuation, whitespace, special tokens) gets raw weight 1, the idf of a word found in every report.
- Diagnostic words: a word is diagnostic if it starts with one of `diagnostic_terms` (full words or stems;
  default: the rule labeler's finding and device trigger stems, `rewards.chexpert.diagnostic_terms()`, such as
  "effusion", "atelecta", "cardi"), except a few false friends of those stems (`NOT_DIAGNOSTIC`, e.g.
  "portable").
- Each response's raw weights are divided by their mean (mean 1); a response without tokens gets an empty
  array.
- Sub-word tokens: the model's tokens are mapped to words with `word_ids_from_offsets(text, offsets)`
  (character offsets from a fast tokenizer, `return_offsets_mapping=True`); `words_to_token_weights` gives
  every piece of a word that word's weight, and tokens of no word the weight `fill` (default 1, the average),
  then renormalises to mean 1 over the tokens. `stack_token_weights` places per-response weights into the
  masked positions of a `[N, T]` tensor.

Gradient-based
- `gradient_weights(grad_norms, mask)`: `w[i, t] = g[i, t] / mean_t g[i, t]` over the response's masked
  tokens, 0 at masked-out positions; a row without tokens is all 0, a row whose gradients are all 0 gets
  uniform weights 1 (no information). With `w_max`, weights are capped at `w_max` and the rest rescaled so the
  mean stays 1 (exact water-filling; needs `w_max >= 1`).
- `token_gradient_weights(embeds, logp, diagnostic, mask, prompt_len)` is the whole gradient-based rule as a
  pure function of tensors (the engine's weighter, harness/token_weighting/gradient.py, supplies the policy's
  embeddings and log-probs): proxy J = sum of `logp * diagnostic`, g = |dJ / d embeds| at the response
  positions, then `gradient_weights`. `diagnostic_flags(words, word_ids, terms)` marks the diagnostic tokens
  (all of a response's tokens when none is).
- How to compute `grad_norms` (the engine's job): run the policy on prompt + response with
  `inputs_embeds = embed(input_ids).detach().requires_grad_(True)` (parameters need no gradient); take the
  clinical-score proxy `J = sum_i sum_{t in D_i} log pi(y_{i,t} | y_{i,<t})`, the log-likelihood of the
  diagnostic tokens `D_i` of each response (the tokens whose word is diagnostic, as above; all response
  tokens if a response has none); `grad = torch.autograd.grad(J, inputs_embeds)`; `grad_norms[i, t]` = the L2
  norm over the hidden dimension of the gradient at the input position of response token t, in fp32, without
  gradient, once per rollout batch with the old policy. It measures how much each token conditions the
  diagnostic content that follows it. Weighting the proxy by the response's reward (r_i * log pi(y_i)) is
  pointless here: the per-response normalisation divides any per-response factor out.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from rewards.chexpert import diagnostic_terms

if TYPE_CHECKING:
    import torch

__all__ = [
    "NOT_DIAGNOSTIC",
    "apply_token_weights",
    "default_diagnostic_terms",
    "diagnostic_flags",
    "fit_idf",
    "gradient_weights",
    "is_diagnostic",
    "report_words",
    "stack_token_weights",
    "tfidf_weights",
    "token_gradient_weights",
    "word_ids_from_offsets",
    "word_weights",
    "words_to_token_weights",
]

_WORD = re.compile(r"[a-z0-9]+")
NOT_DIAGNOSTIC = frozenset({"portable", "portion", "portions", "portal", "clearly", "leading", "massively"})


# --------------------------------------------------------------------------------------------- TF-IDF


def report_words(text: str) -> list[str]:
    """The words of a text: lowercase runs of letters and digits."""
    return _WORD.findall(text.lower())


def _key(token: str) -> str:
    """A token string reduced to its word characters ("Ġeffusion" -> "effusion", "." -> "")."""
    return "".join(_WORD.findall(token.lower()))


def fit_idf(reports: Iterable[str]) -> dict[str, float]:
    """Smooth IDF of every word of the training reports: `log((1 + n) / (1 + df)) + 1`."""
    df: Counter[str] = Counter()
    n = 0
    for report in reports:
        n += 1
        df.update(set(report_words(report)))
    return {word: math.log((1 + n) / (1 + count)) + 1.0 for word, count in df.items()}


def default_diagnostic_terms() -> frozenset[str]:
    """The rule labeler's finding and device trigger stems (`rewards.chexpert.diagnostic_terms`)."""
    return diagnostic_terms()


def is_diagnostic(word: str, diagnostic_terms: Iterable[str]) -> bool:
    """True if `word` (a reduced word) starts with one of the terms and is not in `NOT_DIAGNOSTIC`."""
    return bool(word) and word not in NOT_DIAGNOSTIC and any(word.startswith(term) for term in diagnostic_terms)


def _check_boost(boost: float) -> float:
    boost = float(boost)
    if not (math.isfinite(boost) and boost > 0):
        raise ValueError(f"boost must be finite and > 0, got {boost}")
    return boost


def _mean_one(raw: np.ndarray) -> np.ndarray:
    if raw.size == 0:
        return raw.astype(np.float64)
    mean = raw.mean()
    return raw / mean if mean > 0 else np.ones_like(raw, dtype=np.float64)


def tfidf_weights(
    token_strings: Sequence[Sequence[str]],
    idf: Mapping[str, float],
    diagnostic_terms: Iterable[str],
    boost: float = 2.0,
) -> list[np.ndarray]:
    """Rule-based weights per response: one float per token string, mean 1 per response (module docstring).

    `token_strings[i]` are response i's words (or tokens: each is reduced to its letters and digits first).
    """
    boost = _check_boost(boost)
    terms = tuple(sorted(set(diagnostic_terms)))
    values = [float(v) for v in idf.values()]
    if any(not math.isfinite(v) or v <= 0 for v in values):
        raise ValueError("idf values must be finite and > 0")
    unseen = max(values, default=1.0)
    memo: dict[str, float] = {}

    def raw_weight(token: str) -> float:
        weight = memo.get(token)
        if weight is None:
            key = _key(token)
            if not key:
                weight = 1.0
            else:
                weight = float(idf.get(key, unseen)) * (boost if is_diagnostic(key, terms) else 1.0)
            memo[token] = weight
        return weight

    return [_mean_one(np.array([raw_weight(t) for t in tokens], dtype=np.float64)) for tokens in token_strings]


def word_weights(
    words: Sequence[str], idf: Mapping[str, float], diagnostic_terms: Iterable[str], boost: float = 2.0
) -> np.ndarray:
    """`tfidf_weights` of one response's words."""
    return tfidf_weights([words], idf, diagnostic_terms, boost)[0]


def word_ids_from_offsets(text: str, offsets: Sequence[tuple[int, int]]) -> tuple[list[str], list[int | None]]:
    """Words of `text` (as `report_words`) and, per token `(start, end)` character span, the index of the word
    it overlaps (the first one if several), or None (punctuation, whitespace, special tokens: empty spans)."""
    spans = [(m.start(), m.end()) for m in _WORD.finditer(text.lower())]
    words = [text[s:e].lower() for s, e in spans]
    starts = [s for s, _ in spans]
    ids: list[int | None] = []
    for start, end in offsets:
        word_id = None
        if end > start:
            j = bisect_right(starts, start) - 1  # last word starting at or before the token
            if j >= 0 and spans[j][1] > start:
                word_id = j
            elif j + 1 < len(spans) and spans[j + 1][0] < end:
                word_id = j + 1
        ids.append(word_id)
    return words, ids


def words_to_token_weights(
    word_weights: Sequence[float] | np.ndarray, token_word_ids: Sequence[int | None], fill: float = 1.0
) -> np.ndarray:
    """Token weights from word weights: each token takes its word's weight (None -> `fill`), then mean 1."""
    ww = np.asarray(word_weights, dtype=np.float64)
    out = np.empty(len(token_word_ids), dtype=np.float64)
    for t, word_id in enumerate(token_word_ids):
        if word_id is None:
            out[t] = fill
        else:
            if not 0 <= word_id < len(ww):
                raise IndexError(f"token {t} points at word {word_id}, but there are {len(ww)} words")
            out[t] = ww[word_id]
    return _mean_one(out)


def stack_token_weights(weights: Sequence[np.ndarray], mask: torch.Tensor) -> torch.Tensor:
    """Put response i's weights into the masked positions of row i of a `[N, T]` tensor (0 elsewhere).

    `len(weights[i])` must equal the number of masked positions of row i.
    """
    # lazy: start-up cost (torch)
    import torch

    if mask.dim() != 2 or mask.shape[0] != len(weights):
        raise ValueError(f"mask must be [N, T] with N = {len(weights)}, got {tuple(mask.shape)}")
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    keep = mask.bool()
    for i, w in enumerate(weights):
        n = int(keep[i].sum())
        if len(w) != n:
            raise ValueError(f"response {i}: {len(w)} weights for {n} masked tokens")
        if n:
            out[i, keep[i]] = torch.as_tensor(np.asarray(w), dtype=torch.float32, device=mask.device)
    return out


# ------------------------------------------------------------------------------------- gradient-based


def gradient_weights(grad_norms: torch.Tensor, mask: torch.Tensor, w_max: float | None = None) -> torch.Tensor:
    """Gradient-norm weights `[N, T]`, mean 1 over each row's masked tokens, 0 elsewhere (module docstring)."""
    # lazy: start-up cost (torch)
    import torch

    if grad_norms.shape != mask.shape or grad_norms.dim() != 2:
        raise ValueError(f"grad_norms {tuple(grad_norms.shape)} and mask {tuple(mask.shape)} must be the same [N, T]")
    g = grad_norms.detach().float()
    keep = mask.to(device=g.device).bool()
    g = torch.where(keep, g, torch.zeros_like(g))
    if not bool(torch.isfinite(g).all()) or bool((g < 0).any()):
        raise ValueError("grad_norms must be finite and >= 0 at masked positions")
    count = keep.sum(dim=1, keepdim=True).float()
    total = g.sum(dim=1, keepdim=True)
    uniform = keep.float()
    w = torch.where(total > 0, g * count / total.clamp_min(1e-30), uniform)
    w = torch.where(keep, w, torch.zeros_like(w))
    if w_max is not None:
        w = _cap_mean_one(w, keep, float(w_max))
    return w


def diagnostic_flags(
    words: Sequence[str], word_ids: Sequence[int | None], diagnostic_terms: Iterable[str]
) -> list[bool]:
    """Per token: does it belong to a diagnostic word (`is_diagnostic`)? A response without any diagnostic token
    gets all True (its whole log-likelihood is then the proxy; this project's choice)."""
    terms = tuple(diagnostic_terms)
    flags = [wid is not None and is_diagnostic(words[wid], terms) for wid in word_ids]
    return flags if any(flags) else [True] * len(flags)


def token_gradient_weights(
    embeds: torch.Tensor,
    logp: torch.Tensor,
    diagnostic: torch.Tensor,
    mask: torch.Tensor,
    prompt_len: int,
    w_max: float | None = None,
) -> torch.Tensor:
    """Gradient-based token weights `[N, T]` (this project's rule; module docstring).

    `embeds` `[N, P + T, H]` is a leaf tensor with `requires_grad`, the input embeddings `logp` `[N, T]` (the
    response tokens' log-probabilities) was computed from; `diagnostic` `[N, T]` is 1 at diagnostic tokens.
    J = sum(logp * diagnostic); g[i, t] = || dJ / d embeds[i, P + t] ||_2 (the embedding of response token t,
    which conditions every later token); weights = gradient_weights(g, mask, w_max).
    """
    # lazy: start-up cost (torch)
    import torch

    if not embeds.requires_grad:
        raise ValueError("embeds must be the leaf tensor (requires_grad=True) that logp was computed from")
    if logp.shape != diagnostic.shape or logp.shape != mask.shape or logp.dim() != 2:
        raise ValueError(f"logp {tuple(logp.shape)}, diagnostic {tuple(diagnostic.shape)} and mask "
                         f"{tuple(mask.shape)} must be the same [N, T]")
    T = logp.shape[1]
    if embeds.dim() != 3 or embeds.shape[0] != logp.shape[0] or embeds.shape[1] < prompt_len + T:
        raise ValueError(f"embeds must be [N, P + T, H] with P = {prompt_len}, T = {T}; got {tuple(embeds.shape)}")
    proxy = (logp * diagnostic.to(logp.dtype) * mask.to(logp.dtype)).sum()
    (grad,) = torch.autograd.grad(proxy, embeds, allow_unused=True)
    if grad is None:
        grad = torch.zeros_like(embeds)
    norms = grad[:, prompt_len:prompt_len + T].float().norm(dim=-1).detach()
    return gradient_weights(norms, mask.float(), w_max)


def _cap_mean_one(w: torch.Tensor, keep: torch.Tensor, w_max: float) -> torch.Tensor:
    """Cap weights at `w_max` keeping each row's mean over `keep` at 1 (rescale the uncapped ones)."""
    # lazy: start-up cost (torch)
    import torch

    if not (math.isfinite(w_max) and w_max >= 1.0):
        raise ValueError(f"w_max must be finite and >= 1 (weights have mean 1), got {w_max}")
    count = keep.sum(dim=1, keepdim=True).float()
    capped = torch.zeros_like(keep)
    for _ in range(w.shape[1] + 1):
        new_capped = keep & (capped | (w > w_max))
        free = keep & ~new_capped
        budget = count - new_capped.sum(dim=1, keepdim=True).float() * w_max  # what the free tokens must sum to
        free_sum = torch.where(free, w, torch.zeros_like(w)).sum(dim=1, keepdim=True)
        scale = torch.where(free_sum > 0, budget / free_sum.clamp_min(1e-30), torch.ones_like(free_sum))
        w = torch.where(new_capped, torch.full_like(w, w_max), torch.where(free, w * scale, torch.zeros_like(w)))
        if bool((new_capped == capped).all()):
            break
        capped = new_capped
    return w


def apply_token_weights(advantages: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token advantages `A[i, t] = w[i, t] * A[i]` (0 at masked-out positions), shape `[N, T]`."""
    n = advantages.shape[0] if advantages.dim() == 1 else -1
    if n < 0 or weights.dim() != 2 or weights.shape != mask.shape or weights.shape[0] != n:
        raise ValueError(
            f"expected advantages [N], weights and mask [N, T]; got {tuple(advantages.shape)}, "
            f"{tuple(weights.shape)}, {tuple(mask.shape)}"
        )
    weights = weights.to(dtype=advantages.dtype, device=advantages.device)
    return advantages[:, None] * weights * mask.to(dtype=advantages.dtype, device=advantages.device)
