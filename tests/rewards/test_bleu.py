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


@pytest.mark.parametrize(
    ("block_chars", "key_bits"),
    [
        (60, 63),  # many small blocks
        (400, 26),  # 63-bit keys do not fit: words renumbered per block, blocks halved down to one pair
        (10**6, 20),  # not even one pair fits: the pair is counted in Python
    ],
)
def test_blocks_and_large_vocabulary_paths_stay_exact(monkeypatch, block_chars, key_bits):
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    cands = [" ".join(rng.choice(words, size=rng.integers(0, 25))) for _ in range(11)]
    refs = [" ".join(rng.choice(words, size=rng.integers(0, 25))) for _ in range(11)]
    expected = [nltk_bleu4(c, r) for c, r in zip(cands, refs, strict=True)]
    monkeypatch.setattr(bleu_module, "_BLOCK_CHARS", block_chars)
    monkeypatch.setattr(bleu_module, "_KEY_BITS", key_bits)
    np.testing.assert_allclose(bleu4(cands, refs), expected, atol=TOL, rtol=0)


def test_shared_references_rl_groups(monkeypatch):
    # Group-major RL batch: rows b*G .. b*G+G-1 share reference b (the same object, or an equal copy).
    rng = np.random.default_rng(1)
    words = ["the", "heart", "is", "normal", "no", "effusion", ".", "mild", "cardiomegaly"]
    refs_unique = [" ".join(rng.choice(words, size=rng.integers(3, 20))) for _ in range(7)]
    refs = [ref if g % 2 else (ref + " ")[:-1] for ref in refs_unique for g in range(4)]
    cands = [" ".join(rng.choice(words, size=rng.integers(0, 20))) for _ in refs]
    expected = [nltk_bleu4(c, r) for c, r in zip(cands, refs, strict=True)]
    np.testing.assert_allclose(bleu4(cands, refs), expected, atol=TOL, rtol=0)
    monkeypatch.setattr(bleu_module, "_BLOCK_CHARS", 150)  # cuts inside the batch
    np.testing.assert_allclose(bleu4(cands, refs), expected, atol=TOL, rtol=0)


def test_long_words_sharing_prefixes_are_distinct():
    # Words are compared 8 bytes at a time: words equal in their first 8 or 16 bytes must still differ.
    cand = "pneumoth pneumothorax pneumothoraces cardiomediastinal cardiomediastinum abcdefgh abcdefghabcdefgh"
    ref = "pneumothorax pneumoth cardiomediastinal abcdefghabcdefgh abcdefghabcdefghx pneumothoraces"
    for c, r in [(cand, ref), (ref, cand), (cand, cand)]:
        assert bleu4([c], [r])[0] == pytest.approx(nltk_bleu4(c, r), abs=TOL)


def _assert_ids_exact(words: list[str]) -> None:
    ids, lengths, _ = bleu_module._tokenize([" ".join(words)])
    assert lengths.tolist() == [len(words)]
    first_id: dict[str, int] = {}
    for word, word_id in zip(words, ids.tolist(), strict=True):
        assert first_id.setdefault(word, word_id) == word_id, word
    assert len(set(first_id.values())) == len(first_id), "two different words share an id"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=12), min_size=1, max_size=40), st.integers(0, 7))
def test_word_ids_exact_for_words_made_of_shared_chunks(block_lists, tail):
    # Words built from a few 8-byte blocks share chunks in every position and prefix one another, and differ
    # only in how many chunks they have or in a short tail: the cases a chunk-wise id could get wrong.
    blocks = ["abcdefgh", "ABCDEFGH", "pneumoth", "orax....", "a\x01cdefgh", "zzzzzzzz"]
    words = ["".join(blocks[b] for b in chosen) + "xyz"[: tail % 4] for chosen in block_lists]
    _assert_ids_exact(words + words[::-1])


@pytest.mark.parametrize("value_limit", [bleu_module._VALUE_LIMIT, 1 << 20])
def test_word_ids_exact_when_the_chunk_codes_must_be_recoded(monkeypatch, value_limit):
    # 300 distinct chunks and words of up to 12 chunks: 300**12 overflows int64, so the long-word values are
    # re-coded densely on the way (at almost every chunk with the lower limit); words still differ exactly
    # when their bytes do.
    monkeypatch.setattr(bleu_module, "_VALUE_LIMIT", value_limit)
    rng = np.random.default_rng(0)
    blocks = [f"{i:03d}" + "qwertyuiop"[i % 10] * 5 for i in range(300)]
    words = []
    for _ in range(400):
        chosen = rng.integers(0, 300, size=rng.integers(1, 13))
        words.append("".join(blocks[b] for b in chosen))
    words += [w[:-8] for w in words if len(w) > 8]  # every long word's one-chunk-shorter prefix as well
    _assert_ids_exact(words)


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


# Text outside the numpy fast path's comfort zone: non-ASCII words and whitespace (str.split() splits on
# "\u2003" and "\xa0" too), ASCII control characters that are whitespace ("\x1c") or not ("\x01", NUL),
# and words longer than 8 and 16 bytes that share prefixes.
_ODD_WORDS = st.sampled_from(
    ["the", "é", "naïve", "a\x01b", "x\x00y", "pneumoth", "pneumothorax", "pneumothoraces", "abcdefghabcdefgh",
     "abcdefghabcdefghij", "."]
)
_ODD_SEPARATORS = st.sampled_from([" ", "\n", "\x1c", "\x1f", "\u2003", "\xa0", "\r\n"])


@st.composite
def _odd_text(draw) -> str:
    words = draw(st.lists(_ODD_WORDS, min_size=0, max_size=20))
    return "".join(word + draw(_ODD_SEPARATORS) for word in words)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_odd_text(), _odd_text()), min_size=1, max_size=6))
def test_matches_nltk_on_odd_characters_and_long_words(pairs):
    cands = [c for c, _ in pairs]
    refs = [r for _, r in pairs]
    expected = np.array([nltk_bleu4(c, r) for c, r in pairs])
    np.testing.assert_allclose(bleu4(cands, refs), expected, atol=TOL, rtol=0)


@pytest.mark.parametrize(
    ("candidate", "reference"),
    [
        ("a\x01b the\x1cheart\x1fis normal", "the heart\x0bis\x0cnormal a\x01b"),  # ASCII: numpy path
        ("the\u2003heart is naïve", "the heart\xa0is naïve"),  # non-ASCII: str.split() path
        ("x\x00y the heart", "the x\x00y heart"),  # NUL byte: str.split() path
    ],
)
def test_control_and_unicode_whitespace(candidate, reference):
    assert bleu4([candidate], [reference])[0] == pytest.approx(nltk_bleu4(candidate, reference), abs=TOL)
