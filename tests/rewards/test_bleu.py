"""rewards.bleu.bleu4 against NLTK's smoothed sentence BLEU (the official REVA-PO reward)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

from rewards import bleu as bleu_module
from rewards.bleu import bleu4

TOL = 1e-9


def nltk_bleu4(candidate: str, reference: str) -> float:
    return float(
        sentence_bleu(
            [reference.split()],
            candidate.split(),
            weights=(0.25,) * 4,
            smoothing_function=SmoothingFunction().method1,
        )
    )


def test_hand_computed_equal_length_pair():
    # cand "the cat sat on the mat" vs ref "the cat is on the mat" (both 6 words, so BP = exp(1 - 6/6) = 1):
    #   p1 = 5/6 (the x2, cat, on, mat)      p2 = 3/5 (the cat, on the, the mat)
    #   p3 = 1/4 (on the mat)                 p4 = 0/3 -> method1: 0.1/3
    #   BLEU = (5/6 * 3/5 * 1/4 * 0.1/3) ** (1/4) = (1/240) ** 0.25 = 0.254066...
    score = bleu4(["the cat sat on the mat"], ["the cat is on the mat"])
    assert score.shape == (1,)
    assert score[0] == pytest.approx(240**-0.25, abs=1e-12)


def test_hand_computed_candidate_shorter_than_the_orders():
    # cand "the cat" (2 words) vs ref "the cat sat" (3): p1 = 2/2, p2 = 1/1; no 3- or 4-grams exist, so
    # p3 = p4 = 0/max(1, 0) -> 0.1/1. BP = exp(1 - 3/2). BLEU = exp(-0.5) * (1 * 1 * 0.1 * 0.1) ** 0.25.
    expected = math.exp(-0.5) * 0.01**0.25
    score = bleu4(["the cat"], ["the cat sat"])[0]
    assert score == pytest.approx(expected, abs=1e-12)
    assert score == pytest.approx(nltk_bleu4("the cat", "the cat sat"), abs=TOL)


def test_clipping_repeated_words():
    # "the the the the" vs "the cat": unigram matches are clipped to the reference count (1 of 4).
    cand, ref = "the the the the", "the cat"
    assert bleu4([cand], [ref])[0] == pytest.approx(nltk_bleu4(cand, ref), abs=TOL)


@pytest.mark.parametrize(
    ("candidate", "reference"),
    [("", "the heart is normal"), ("the heart is normal", ""), ("", ""), ("   \n ", "\t")],
)
def test_empty_candidate_or_reference_scores_zero(candidate, reference):
    assert bleu4([candidate], [reference])[0] == 0.0
    assert nltk_bleu4(candidate, reference) == 0.0  # NLTK returns 0 too (no unigram match), no warning


def test_no_unigram_match_is_zero():
    assert bleu4(["alpha beta"], ["gamma delta"])[0] == 0.0


def test_identical_texts_score_one():
    text = "no pleural effusion or pneumothorax . the heart size is normal ."
    assert bleu4([text], [text])[0] == pytest.approx(1.0, abs=1e-12)


def test_batch_scores_are_per_pair():
    # n-grams of one pair must never be matched against another pair's reference.
    cands = ["a b c d", "a b c d", "x y"]
    refs = ["e f g h", "a b c d", "a b c d"]
    expected = [nltk_bleu4(c, r) for c, r in zip(cands, refs, strict=True)]
    np.testing.assert_allclose(bleu4(cands, refs), expected, atol=TOL, rtol=0)
    assert bleu4(cands, refs)[0] == 0.0


def test_length_mismatch_raises():
    with pytest.raises(ValueError, match="2 candidates but 1 references"):
        bleu4(["a", "b"], ["a"])


def test_empty_batch_and_non_strings():
    assert bleu4([], []).shape == (0,)
    with pytest.raises(TypeError):
        bleu4([None], ["a"])  # type: ignore[list-item]


def test_chunking_and_large_vocabulary_paths_stay_exact(monkeypatch):
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    cands = [" ".join(rng.choice(words, size=rng.integers(0, 25))) for _ in range(11)]
    refs = [" ".join(rng.choice(words, size=rng.integers(0, 25))) for _ in range(11)]
    expected = [nltk_bleu4(c, r) for c, r in zip(cands, refs, strict=True)]
    # Small chunks and a tiny integer limit force the multi-chunk loop and the dense-rank compression.
    monkeypatch.setattr(bleu_module, "_CHUNK_PAIRS", 4)
    monkeypatch.setattr(bleu_module, "_INT64_LIMIT", 10**6)
    np.testing.assert_allclose(bleu4(cands, refs), expected, atol=TOL, rtol=0)


_WORDS = st.sampled_from(["the", "heart", "is", "normal", "no", "effusion", "."])
_SEPARATORS = st.sampled_from([" ", "  ", "\n", "\t "])


@st.composite
def _text(draw) -> str:
    words = draw(st.lists(_WORDS, min_size=0, max_size=30))
    return "".join(word + draw(_SEPARATORS) for word in words)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_text(), _text()), min_size=1, max_size=6))
def test_matches_nltk_on_random_batches(pairs):
    cands = [c for c, _ in pairs]
    refs = [r for _, r in pairs]
    expected = np.array([nltk_bleu4(c, r) for c, r in pairs])
    np.testing.assert_allclose(bleu4(cands, refs), expected, atol=TOL, rtol=0)
