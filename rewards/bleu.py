"""BLEU-4 reward: NLTK's smoothed sentence BLEU, computed for a whole batch at once.

`bleu4(candidates, references)[i]` equals

    nltk.translate.bleu_score.sentence_bleu([references[i].split()], candidates[i].split(),
                                            weights=(0.25,) * 4,
                                            smoothing_function=SmoothingFunction().method1)

(the official REVA-PO reward) up to float rounding (< 1e-12 in practice). NLTK's rules, reproduced here:

- modified precision p_n = clipped matches / max(1, number of candidate n-grams); a candidate shorter
  than n has no n-grams, so p_n = 0 / 1;
- if there is no unigram match at all, the score is 0 (NLTK returns before smoothing). This covers an
  empty candidate and an empty reference: both score 0, with no warning;
- method1 smoothing: a zero-match precision becomes 0.1 / denominator;
- brevity penalty with the single reference's length r and candidate length c: 1 if c > r, else
  exp(1 - r / c);
- score = BP * exp(sum_n 0.25 * log p_n).

Speed: tokens are split with `str.split()` (the reward's own tokenisation), mapped to dense integer ids,
and the n-grams of every pair are counted with one sort per order over the whole batch: n-gram codes are
exact integers (no hashing), so matches are exact.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from rewards.registry import register_reward

MAX_ORDER = 4
SMOOTHING_EPSILON = 0.1  # NLTK SmoothingFunction().method1 default
_INT64_LIMIT = 2**63
# Pairs per internal chunk: bounds memory and keeps the integer sort keys far from int64 overflow.
_CHUNK_PAIRS = 4096


def bleu4(candidates: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """Per-pair smoothed BLEU-4 (NLTK method1, whitespace tokens, one reference per candidate)."""
    if len(candidates) != len(references):
        raise ValueError(
            f"bleu4: {len(candidates)} candidates but {len(references)} references; they are scored in pairs"
        )
    n = len(candidates)
    out = np.zeros(n, dtype=np.float64)
    for start in range(0, n, _CHUNK_PAIRS):
        stop = min(start + _CHUNK_PAIRS, n)
        out[start:stop] = _bleu4_chunk(candidates[start:stop], references[start:stop])
    return out


def _bleu4_chunk(candidates: Sequence[str], references: Sequence[str]) -> np.ndarray:
    n_pairs = len(candidates)
    if n_pairs == 0:
        return np.zeros(0, dtype=np.float64)
    ids, text_idx, lengths, vocab_size = _tokenize_pairs(candidates, references)
    cand_len, ref_len = lengths[0::2], lengths[1::2]
    matches = _clipped_matches(ids, text_idx, n_pairs, vocab_size)
    return _combine(matches, cand_len, ref_len)


def _tokenize_pairs(
    candidates: Sequence[str], references: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Token ids of all texts laid out as c0, r0, c1, r1, ... (text index = 2 * pair + side).

    Returns (ids[T], text index of each token[T], tokens per text[2N], vocabulary size).
    """
    texts = [text for pair in zip(candidates, references, strict=True) for text in pair]
    token_lists = [_as_str(text).split() for text in texts]
    lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists))
    total = int(lengths.sum())
    # A defaultdict backed by a counter assigns dense ids in C, without a Python-level loop.
    vocab: defaultdict[str, int] = defaultdict(itertools.count().__next__)
    ids = np.fromiter(map(vocab.__getitem__, itertools.chain.from_iterable(token_lists)), dtype=np.int64, count=total)
    text_idx = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)
    return ids, text_idx, lengths, max(len(vocab), 1)


def _as_str(text: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"bleu4 expects strings, got {type(text).__name__}")
    return text


def _clipped_matches(ids: np.ndarray, text_idx: np.ndarray, n_pairs: int, vocab_size: int) -> np.ndarray:
    """Clipped n-gram match counts, shape [MAX_ORDER, n_pairs]."""
    matches = np.zeros((MAX_ORDER, n_pairs), dtype=np.int64)
    n_texts = 2 * n_pairs
    codes = ids  # codes[i] identifies the n-gram starting at token i (exact integer, no hashing)
    for order in range(1, MAX_ORDER + 1):
        if order > 1:
            codes = _extend_codes(codes, ids, order, vocab_size, n_texts)
        span = len(codes)
        if span <= 0:
            break
        # An n-gram is real only if its first and last tokens belong to the same text.
        valid = text_idx[:span] == text_idx[order - 1 : order - 1 + span]
        # key = code * 2N + (2 * pair + side): sorting groups equal n-grams of one pair, candidate first.
        keys = np.sort((codes * n_texts + text_idx[:span])[valid])
        matches[order - 1] = _count_matches(keys, n_pairs)
    return matches


def _extend_codes(codes: np.ndarray, ids: np.ndarray, order: int, vocab_size: int, n_texts: int) -> np.ndarray:
    """Codes of n-grams of `order` from those of `order - 1`: code * V + id of the next token."""
    span = len(ids) - order + 1
    if span <= 0:
        return codes[:0]
    prev = codes[:span]
    if (int(prev.max()) + 1) * vocab_size * n_texts >= _INT64_LIMIT:
        # Large vocabularies: replace codes by their dense rank (still exact) before widening them.
        prev = np.unique(prev, return_inverse=True)[1].astype(np.int64)
        if (int(prev.max()) + 1) * vocab_size * n_texts >= _INT64_LIMIT:
            raise OverflowError("bleu4: batch too large for exact 64-bit n-gram keys; pass fewer pairs")
    return prev * vocab_size + ids[order - 1 :]


def _count_matches(sorted_keys: np.ndarray, n_pairs: int) -> np.ndarray:
    """Sum over n-grams of min(candidate count, reference count), per pair."""
    if len(sorted_keys) == 0:
        return np.zeros(n_pairs, dtype=np.int64)
    is_start = np.empty(len(sorted_keys), dtype=bool)
    is_start[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=is_start[1:])
    bounds = np.append(np.flatnonzero(is_start), len(sorted_keys))  # run j is bounds[j]:bounds[j + 1]
    uniq = sorted_keys[bounds[:-1]]
    # A candidate key (even) followed in sorted order by its reference twin (key + 1) is a match.
    hit = np.flatnonzero(((uniq[:-1] & 1) == 0) & (uniq[1:] == uniq[:-1] + 1))
    cand_count = bounds[hit + 1] - bounds[hit]
    ref_count = bounds[hit + 2] - bounds[hit + 1]
    pair = (uniq[hit] >> 1) % n_pairs
    return np.bincount(pair, weights=np.minimum(cand_count, ref_count), minlength=n_pairs).astype(np.int64)


def _combine(matches: np.ndarray, cand_len: np.ndarray, ref_len: np.ndarray) -> np.ndarray:
    """Smoothed geometric mean of the precisions times the brevity penalty, as NLTK computes it."""
    orders = np.arange(1, MAX_ORDER + 1)[:, None]
    denominators = np.maximum(1, cand_len[None, :] - orders + 1).astype(np.float64)
    numerators = np.where(matches > 0, matches.astype(np.float64), SMOOTHING_EPSILON)
    log_precision = np.log(numerators / denominators)
    geometric = np.exp(np.sum(0.25 * log_precision, axis=0))
    scored = matches[0] > 0  # NLTK returns 0 when no unigram matches (empty candidate or reference too)
    safe_len = np.maximum(cand_len, 1)
    brevity = np.where(cand_len > ref_len, 1.0, np.exp(1.0 - ref_len / safe_len))
    return np.where(scored, brevity * geometric, 0.0)


@register_reward("bleu4")
def bleu4_reward(candidates: list[str], references: list[str], **_) -> np.ndarray:
    """REVA-PO's reward: sentence BLEU-4 of the whitespace-split candidate against the cleaned reference."""
    return bleu4(candidates, references)
