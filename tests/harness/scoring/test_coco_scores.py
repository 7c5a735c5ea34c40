"""harness.scoring.coco_scores: pycocoevalcap's ROUGE-L and BLEU, bit for bit, on random and awkward texts."""

from __future__ import annotations

import numpy as np
import pytest
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.bleu.bleu_scorer import cook_refs, cook_test
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.rouge.rouge import Rouge, my_lcs

from harness.scoring import coco_scores
from harness.scoring.coco_scores import bleu_statistics, cider_d, corpus_bleu, lcs_length, rouge_l

WORDS = "the heart lungs are clear mild small left right effusion pneumothorax opacity . , no size normal".split()


def random_text(rng, max_words: int, separators=(" ",)) -> str:
    n = int(rng.integers(0, max_words + 1))
    parts = [str(rng.choice(WORDS)) for _ in range(n)]
    out = ""
    for i, word in enumerate(parts):
        out += word if i == 0 else str(rng.choice(separators)) + word
    return out


def corpus(seed: int, n: int, max_words: int = 30, separators=(" ",)) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    gts = {f"id{i}": [random_text(rng, max_words, separators)] for i in range(n)}
    res = {k: [random_text(rng, max_words, separators)] for k in gts}
    return gts, res


# Texts where the two tokenizations differ (ROUGE-L splits on " ", BLEU on any whitespace), empty texts,
# repeated words (LCS ties), Unicode, a long report (a bit vector over several 64-bit words).
AWKWARD = [
    ("", ""),
    ("", "no effusion ."),
    ("no effusion .", ""),
    (" ", "  "),
    ("a  b", "a b"),
    ("a\tb c", "a b\tc"),
    ("line one .\nline two .", "line one . line two ."),
    ("the the the the", "the"),
    ("a b a b a b", "b a b a"),
    ("é ü ß — 肺", "ü é 肺 ß"),
    (" ".join(["lungs are clear ."] * 60), " ".join(["the lungs are clear ."] * 45)),
    ("x", "x"),
]


@pytest.mark.parametrize("seed", range(20))
def test_lcs_length_equals_pycocoevalcap_my_lcs(seed):
    rng = np.random.default_rng(seed)
    alphabet = list("abcd")[: 1 + seed % 4] + ["", "a b"]
    for _ in range(200):
        a = [str(rng.choice(alphabet)) for _ in range(int(rng.integers(0, 90)))]
        b = [str(rng.choice(alphabet)) for _ in range(int(rng.integers(0, 90)))]
        assert lcs_length(a, b) == lcs_length(b, a) == my_lcs(a, b)


def test_lcs_length_hand_computed():
    assert lcs_length("ABCBDAB", "BDCABA") == 4  # CLRS's example: BCBA
    assert lcs_length(["x"], ["y"]) == 0
    assert lcs_length([], ["y"]) == 0
    assert lcs_length(list("aaaa"), list("aa")) == 2


@pytest.mark.parametrize("case", ["random", "separators", "short", "awkward", "one"])
def test_rouge_l_equals_pycocoevalcap_bit_for_bit(case):
    if case == "random":
        gts, res = corpus(1, 300)
    elif case == "separators":
        gts, res = corpus(2, 200, separators=(" ", "  ", "\t", "\n", " \u00a0"))
    elif case == "short":
        gts, res = corpus(3, 300, max_words=3)
    elif case == "awkward":
        gts = {f"k{i}": [ref] for i, (ref, _) in enumerate(AWKWARD)}
        res = {f"k{i}": [hyp] for i, (_, hyp) in enumerate(AWKWARD)}
    else:
        gts, res = {"only": ["no acute process ."]}, {"only": ["no acute cardiopulmonary process ."]}
    want_mean, want_each = Rouge().compute_score(gts, res)
    mean, each = rouge_l(gts, res)
    assert mean == want_mean  # exact: same integers, same float expressions, same np.mean
    assert np.array_equal(each, want_each) and each.dtype == want_each.dtype


def test_rouge_l_several_references_equal_pycocoevalcap():
    gts, res = corpus(4, 100)
    rng = np.random.default_rng(5)
    gts = {k: [v[0], random_text(rng, 25), random_text(rng, 10)] for k, v in gts.items()}
    want_mean, want_each = Rouge().compute_score(gts, res)
    mean, each = rouge_l(gts, res)
    assert mean == want_mean and np.array_equal(each, want_each)


def test_rouge_l_hand_computed():
    # LCS("no acute process .", "no acute cardiopulmonary process .") = 4; P = 4/5, R = 4/4;
    # F = (1 + 1.44) * 0.8 * 1 / (1 + 1.44 * 0.8) = 1.952 / 2.152 = 0.907063197...
    mean, each = rouge_l({"a": ["no acute process ."]}, {"a": ["no acute cardiopulmonary process ."]})
    assert mean == pytest.approx(0.9070631970260223, rel=1e-15)
    assert each.tolist() == [mean]


@pytest.mark.parametrize("case", ["random", "separators", "short", "awkward", "long"])
def test_bleu_statistics_and_corpus_bleu_equal_pycocoevalcap_bit_for_bit(case):
    if case == "random":
        gts, res = corpus(6, 300)
    elif case == "separators":
        gts, res = corpus(7, 200, separators=(" ", "  ", "\t", "\n", "\u2003"))
    elif case == "short":
        gts, res = corpus(8, 300, max_words=3)
    elif case == "awkward":
        gts = {f"k{i}": [ref] for i, (ref, _) in enumerate(AWKWARD)}
        res = {f"k{i}": [hyp] for i, (_, hyp) in enumerate(AWKWARD)}
    else:
        gts, res = corpus(9, 50, max_words=400)
    stats = bleu_statistics(gts, res)
    for row, key in zip(stats, gts, strict=True):
        cooked = cook_test(res[key][0], cook_refs(gts[key]), eff="closest")
        assert row.tolist() == [*cooked["correct"], *cooked["guess"], cooked["testlen"], cooked["reflen"]], key
    want, _ = Bleu(4).compute_score(gts, res, verbose=0)
    assert corpus_bleu(stats) == want  # exact, BLEU-1..4


def test_corpus_bleu_of_a_resample_equals_pycocoevalcap_on_it():
    """What reports/bootstrap.py relies on: BLEU of a subset from the subset's rows."""
    gts, res = corpus(10, 120)
    stats = bleu_statistics(gts, res)
    keys = list(gts)
    pick = np.random.default_rng(11).integers(0, len(keys), 120)
    sub_gts = {f"{j}:{keys[i]}": gts[keys[i]] for j, i in enumerate(pick)}
    sub_res = {f"{j}:{keys[i]}": res[keys[i]] for j, i in enumerate(pick)}
    assert corpus_bleu(stats[pick]) == Bleu(4).compute_score(sub_gts, sub_res, verbose=0)[0]


def test_brevity_penalty_branch_hand_computed():
    # Hypothesis "a b" against "a b c d": 2 of 2 unigrams, 1 of 1 bigram, no 3- or 4-grams; ratio 2/4 < 1.
    stats = bleu_statistics({"x": ["a b c d"]}, {"x": ["a b"]})
    assert stats.tolist() == [[2, 1, 0, 0, 2, 1, 0, 0, 2, 4]]
    bleu = corpus_bleu(stats)
    # pycocoevalcap's constants (tiny 1e-15 over, small 1e-9 under every ratio) shift each value by ~1e-9:
    # BLEU-1 = (2/2)(1 - 5e-10) * BP, BLEU-2 = sqrt((1 - 5e-10)(1 - 1e-9)) * BP, BP = exp(1 - 2(1 + 2.5e-10)).
    bp = np.exp(-1 - 5e-10)
    assert bleu[0] == pytest.approx((1 - 5e-10) * bp, rel=1e-13)
    assert bleu[1] == pytest.approx(np.sqrt((1 - 5e-10) * (1 - 1e-9)) * bp, rel=1e-13)
    # No 3- or 4-gram: a factor 1e-15 / 1e-9 = 1e-6 under the cube and fourth roots.
    assert bleu[2] == pytest.approx(1e-2 * bp, rel=1e-8)
    assert bleu[3] == pytest.approx(1e-12 ** 0.25 * bp, rel=1e-8)


@pytest.mark.parametrize("case", ["random", "separators", "short", "awkward", "long", "several_refs", "one"])
def test_cider_d_equals_pycocoevalcap_bit_for_bit(case):
    if case == "random":
        gts, res = corpus(12, 300)
    elif case == "separators":
        gts, res = corpus(13, 200, separators=(" ", "  ", "\t", "\n", "\u2003"))
    elif case == "short":
        gts, res = corpus(14, 300, max_words=3)
    elif case == "awkward":
        gts = {f"k{i}": [ref] for i, (ref, _) in enumerate(AWKWARD)}
        res = {f"k{i}": [hyp] for i, (_, hyp) in enumerate(AWKWARD)}
    elif case == "long":
        gts, res = corpus(15, 50, max_words=400)
    elif case == "several_refs":
        gts, res = corpus(16, 150)
        rng = np.random.default_rng(17)
        gts = {k: [v[0], random_text(rng, 25), random_text(rng, 5)] for k, v in gts.items()}
    else:
        gts, res = {"only": ["no acute process ."]}, {"only": ["no acute cardiopulmonary process ."]}
    coco_scores._CIDER_CACHE.clear()
    want_mean, want_each = Cider().compute_score(gts, res)
    mean, each = cider_d(gts, res)
    assert mean == want_mean
    assert np.array_equal(each, want_each) and each.dtype == want_each.dtype


def test_cider_d_reuses_a_splits_references_and_only_that_split():
    """Several arms' evaluations on one split compute the reference side once; another split replaces it."""
    gts, res = corpus(18, 200)
    _, other_res = corpus(19, 200)
    other_res = dict(zip(gts, other_res.values(), strict=True))
    coco_scores._CIDER_CACHE.clear()
    first = cider_d(gts, res)
    cached = coco_scores._CIDER_CACHE[0][1]
    second = cider_d(gts, other_res)
    assert coco_scores._CIDER_CACHE[0][1] is cached  # read, not rebuilt
    assert second[0] == Cider().compute_score(gts, other_res)[0] and first[0] == Cider().compute_score(gts, res)[0]
    new_gts, new_res = corpus(20, 200)
    assert cider_d(new_gts, new_res)[0] == Cider().compute_score(new_gts, new_res)[0]
    assert coco_scores._CIDER_CACHE[0][1] is not cached
    assert len(coco_scores._CIDER_CACHE) == 1


def test_cider_d_hand_computed():
    """Two images, hypothesis = reference on the first: its unigram..4-gram cosines are 1, no length penalty,
    so its CIDEr-D is 10 * mean(1, 1, 1, 1) = 10 (up to the float rounding of the cosines)."""
    gts = {"a": ["no acute process ."], "b": ["mild cardiomegaly ."]}
    res = {"a": ["no acute process ."], "b": ["lungs clear"]}
    mean, each = cider_d(gts, res)
    assert each[0] == pytest.approx(10.0, rel=1e-12) and each[1] == 0.0
    assert mean == pytest.approx(5.0, rel=1e-12)


def test_mismatched_inputs_are_named():
    with pytest.raises(ValueError, match="same ids"):
        rouge_l({"a": ["x"]}, {"b": ["x"]})
    with pytest.raises(ValueError, match=r"res\['a'\]"):
        rouge_l({"a": ["x"]}, {"a": ["x", "y"]})
    with pytest.raises(ValueError, match="one reference"):
        bleu_statistics({"a": ["x", "y"]}, {"a": ["x"]})
    with pytest.raises(ValueError, match="at least one reference with a word"):
        cider_d({"a": [" "]}, {"a": ["x"]})
