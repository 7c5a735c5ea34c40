"""pycocoevalcap's BLEU, ROUGE-L and CIDEr-D, the same numbers bit for bit, without its pure-Python inner loops.

A 4,000-report test evaluation spent about 6 s of its ~45 s in two loops of pycocoevalcap (issue 27): ROUGE-L's
dynamic-programming LCS (`my_lcs`, one Python step per pair of tokens) and BLEU's n-gram cooking (a Python dict
per report, done twice: once for the corpus score and once more for the per-report statistics). Both metrics are
functions of integers, so they can be computed another way and still agree to the last bit:

- ROUGE-L (pycocoevalcap.rouge.Rouge): per report, the LCS length of the candidate's and each reference's
  single-space tokens (`str.split(" ")`, as pycocoevalcap splits), then its F-measure with beta = 1.2 through
  the same float expressions, and the corpus score as the same `np.mean`. The LCS length comes from the
  bit-parallel recurrence of Allison and Dix (1986) and Crochemore et al. (2001), one integer addition per
  token of one side, on Python's unbounded ints instead of a table.
- BLEU (pycocoevalcap.bleu.Bleu(4), "closest" reference length): the integer statistics per report (clipped
  n-gram matches, hypothesis n-grams, hypothesis and reference lengths) from `rewards.bleu.bleu_counts` (NLTK's
  clipping is pycocoevalcap's with one reference, both on `str.split()` tokens), summed as Python ints, then
  the corpus formula of `BleuScorer.compute_score` with its own `tiny` and `small` constants.

- CIDEr-D (pycocoevalcap.cider.Cider: n = 4, sigma = 6): the same scalar operations in the same order (n-grams
  in `precook`'s order, NumPy's log for the idf, the same sums and products), which makes it a float-exact
  copy, not a vectorised one; faster because the reference side (document frequencies, every reference's
  tf-idf vectors and norms) depends on the references alone: `cider_d` keeps the last split's, so the test
  evaluations of several arms in one worker process compute it once (about half of CIDEr's time; it holds
  about 63 MB for a 4,000-report split, one split at a time).

BLEU needs one reference per report (what `harness.scoring.evaluation._prepare` builds);
`tests/harness/scoring/test_coco_scores.py` checks all three against pycocoevalcap on random and adversarial texts.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from rewards.bleu import MAX_ORDER, bleu_counts

ROUGE_BETA = 1.2  # pycocoevalcap.rouge.Rouge().beta
CIDER_N, CIDER_SIGMA = 4, 6.0  # pycocoevalcap.cider.Cider() defaults
_BLEU_TINY = 1e-15  # pycocoevalcap.bleu.bleu_scorer.BleuScorer.compute_score's constants
_BLEU_SMALL = 1e-9


def lcs_length(a: list, b: list) -> int:
    """Length of the longest common subsequence of two token lists (tokens compared with ==, hashed).

    Bit i of `v` is 1 while position i of `a` has not been counted in the LCS of `a` and the prefix of `b`
    read so far; every token of `b` updates all positions at once with one addition (the carry moves each
    match to the leftmost free position of its run). The LCS length is the number of cleared bits."""
    if not a or not b:
        return 0
    positions: dict = {}
    for i, token in enumerate(a):
        positions[token] = positions.get(token, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full
    for token in b:
        match = positions.get(token)
        if match is not None:
            u = v & match
            v = ((v + u) | (v - u)) & full
    return len(a) - v.bit_count()


def rouge_l(gts: dict[str, list[str]], res: dict[str, list[str]]) -> tuple[float, np.ndarray]:
    """pycocoevalcap's `Rouge().compute_score(gts, res)`: the mean ROUGE-L and the per-report scores, in the
    order of `gts`."""
    _check_pairs(gts, res)
    beta2 = ROUGE_BETA**2
    scores = []
    for key in gts:
        candidate = res[key][0].split(" ")
        precisions, recalls = [], []
        for reference in gts[key]:
            tokens = reference.split(" ")
            lcs = lcs_length(tokens, candidate)
            precisions.append(lcs / float(len(candidate)))
            recalls.append(lcs / float(len(tokens)))
        p, r = max(precisions), max(recalls)
        scores.append(((1 + beta2) * p * r) / float(r + beta2 * p) if p != 0 and r != 0 else 0.0)
    each = np.array(scores)
    return np.mean(each), each


def bleu_statistics(gts: dict[str, list[str]], res: dict[str, list[str]]) -> np.ndarray:
    """Per report (rows in the order of `gts`): pycocoevalcap's cooked BLEU statistics of the pair as
    integers, columns harness.constants.BLEU_COUNT_KEYS: correct n-grams for n = 1..4, hypothesis n-grams for
    n = 1..4, hypothesis length, reference length."""
    _check_pairs(gts, res, one_reference=True)
    keys = list(gts)
    matches, test_len, ref_len = bleu_counts([res[k][0] for k in keys], [gts[k][0] for k in keys])
    guesses = np.maximum(0, test_len[None, :] - np.arange(MAX_ORDER)[:, None])
    return np.concatenate([matches, guesses, test_len[None, :], ref_len[None, :]]).T


def corpus_bleu(statistics: np.ndarray) -> list[float]:
    """BLEU-1..4 of `BleuScorer.compute_score(option="closest")` from `bleu_statistics` rows (summed exactly)."""
    totals = [int(x) for x in np.asarray(statistics, dtype=np.int64).sum(axis=0)]
    correct, guess = totals[:MAX_ORDER], totals[MAX_ORDER:2 * MAX_ORDER]
    test_len, ref_len = totals[2 * MAX_ORDER], totals[2 * MAX_ORDER + 1]
    bleus, bleu = [], 1.0
    for k in range(MAX_ORDER):
        bleu *= float(correct[k] + _BLEU_TINY) / (guess[k] + _BLEU_SMALL)
        bleus.append(bleu ** (1.0 / (k + 1)))
    ratio = (test_len + _BLEU_TINY) / (ref_len + _BLEU_SMALL)
    if ratio < 1:
        bleus = [b * math.exp(1 - 1 / ratio) for b in bleus]
    return bleus


def cider_d(gts: dict[str, list[str]], res: dict[str, list[str]]) -> tuple[float, np.ndarray]:
    """pycocoevalcap's `Cider().compute_score(gts, res)`: the mean CIDEr-D and the per-report scores, in the order
    of `gts` (which must hold at least one non-empty reference: pycocoevalcap raises otherwise)."""
    _check_pairs(gts, res)
    refs = _cider_references(tuple(tuple(gts[key]) for key in gts))
    penalty_scale = 2 * CIDER_SIGMA**2
    scores = []
    for key, ref_vectors in zip(gts, refs.vectors, strict=True):
        vec, norm, length = refs.tfidf(_ngram_counts(res[key][0]))
        score = np.array([0.0 for _ in range(CIDER_N)])
        for vec_ref, norm_ref, length_ref in ref_vectors:
            delta = float(length - length_ref)
            val = np.array([0.0 for _ in range(CIDER_N)])
            for n in range(CIDER_N):
                ref_n = vec_ref[n]
                for ngram, weight in vec[n].items():
                    ref_weight = ref_n.get(ngram)
                    if ref_weight is not None:  # an absent n-gram adds min(w, 0.0) * 0.0 = +0.0: nothing
                        val[n] += min(weight, ref_weight) * ref_weight
                if norm[n] != 0 and norm_ref[n] != 0:
                    val[n] /= norm[n] * norm_ref[n]
                val[n] *= np.e ** (-(delta**2) / penalty_scale)
            score += val
        mean = np.mean(score)
        mean /= len(ref_vectors)
        mean *= 10.0
        scores.append(mean)
    each = np.array(scores)
    return np.mean(each), each


class _CiderReferences:
    """The reference side of CIDEr-D for one list of reference lists: document frequencies, log(number of
    images), and every reference's (tf-idf vectors per n, their norms, its length as pycocoevalcap counts it)."""

    def __init__(self, references: tuple[tuple[str, ...], ...]) -> None:
        cooked = [[_ngram_counts(text) for text in texts] for texts in references]
        frequency: dict[tuple, float] = {}
        for counts in cooked:
            for ngram in {ngram for c in counts for ngram in c}:
                frequency[ngram] = frequency.get(ngram, 0.0) + 1
        if not frequency:
            raise ValueError("CIDEr-D needs at least one reference with a word")
        self.ref_len = np.log(float(len(references)))
        # np.log of every distinct frequency once (NumPy's log, as pycocoevalcap calls it; not math.log).
        log_of = {f: np.log(max(1.0, f)) for f in set(frequency.values()) | {0.0}}
        self.log_df = {ngram: log_of[f] for ngram, f in frequency.items()}
        self.log_unseen = log_of[0.0]
        self.vectors = [[self.tfidf(c) for c in counts] for counts in cooked]

    def tfidf(self, counts: dict[tuple, int]) -> tuple[list[dict], list, int]:
        """pycocoevalcap's counts2vec: tf-idf weight per n-gram (n = 1..4 in slots 0..3), each slot's L2 norm,
        and the number of bigrams (its "length")."""
        vec: list[dict] = [{} for _ in range(CIDER_N)]
        norm = [0.0 for _ in range(CIDER_N)]
        length = 0
        for ngram, term_freq in counts.items():
            n = len(ngram) - 1
            weight = float(term_freq) * (self.ref_len - self.log_df.get(ngram, self.log_unseen))
            vec[n][ngram] = weight
            norm[n] += pow(weight, 2)
            if n == 1:
                length += term_freq
        return vec, [np.sqrt(x) for x in norm], length


_CIDER_CACHE: list[tuple[tuple, _CiderReferences]] = []  # the last split's reference side (one entry)


def _cider_references(references: tuple[tuple[str, ...], ...]) -> _CiderReferences:
    if _CIDER_CACHE and _CIDER_CACHE[0][0] == references:
        return _CIDER_CACHE[0][1]
    built = _CiderReferences(references)
    _CIDER_CACHE[:] = [(references, built)]
    return built


def _ngram_counts(text: str) -> dict[tuple, int]:
    """pycocoevalcap's precook: counts of every 1- to 4-gram of the whitespace tokens, in the order it inserts
    them (n = 1 first, left to right), which fixes the order of every later sum."""
    words = [sys.intern(word) for word in text.split()]  # one object per distinct word: the cache stays small
    counts: dict[tuple, int] = {}
    for k in range(1, CIDER_N + 1):
        for i in range(len(words) - k + 1):
            ngram = tuple(words[i:i + k])
            counts[ngram] = counts.get(ngram, 0) + 1
    return counts


def _check_pairs(gts: dict, res: dict, one_reference: bool = False) -> None:
    if gts.keys() != res.keys():
        raise ValueError("gts and res must have the same ids")
    for key in gts:
        if not isinstance(res[key], list) or len(res[key]) != 1:
            raise ValueError(f"res[{key!r}] must be a list of one hypothesis")
        if not isinstance(gts[key], list) or not gts[key] or (one_reference and len(gts[key]) != 1):
            raise ValueError(f"gts[{key!r}] must be a list of {'one reference' if one_reference else 'references'}")
