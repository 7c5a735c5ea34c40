"""Tests of DiTPO-style token weights (rewards/ditpo_weights.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rewards.ditpo_weights import (
    apply_token_weights,
    default_diagnostic_terms,
    fit_idf,
    gradient_weights,
    is_diagnostic,
    report_words,
    stack_token_weights,
    tfidf_weights,
    word_ids_from_offsets,
    word_weights,
    words_to_token_weights,
)


def test_fit_idf_smooth_formula():
    idf = fit_idf(["A b.", "a c c", "a"])  # n = 3; df(a) = 3, df(b) = df(c) = 1
    assert idf == pytest.approx({"a": 1.0, "b": math.log(4 / 2) + 1, "c": math.log(4 / 2) + 1})
    assert fit_idf([]) == {}
    assert report_words("Left-sided 2.5cm EFFUSION.") == ["left", "sided", "2", "5cm", "effusion"]


def test_tfidf_weights_hand_computed_and_mean_one():
    idf = {"a": 1.0, "b": 2.0, "effusion": 2.0}
    (w,) = tfidf_weights([["a", "b", "effusion"]], idf, {"effusion"}, boost=2.0)
    assert w == pytest.approx(np.array([1, 2, 4]) / (7 / 3))  # raw idf x boost, divided by the mean
    assert w.mean() == pytest.approx(1.0)


def test_diagnostic_boost_ratio():
    idf = {"effusion": 3.0, "template": 3.0}
    for boost in (1.0, 2.0, 5.0):
        (w,) = tfidf_weights([["effusion", "template"]], idf, {"effusion"}, boost=boost)
        assert w[0] / w[1] == pytest.approx(boost)
        assert w.mean() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="boost"):
        tfidf_weights([["a"]], idf, set(), boost=0.0)


def test_unseen_words_punctuation_and_subword_strings():
    idf = {"the": 1.0, "effusion": 2.5, "heart": 1.5}
    (w,) = tfidf_weights([["the", ".", "zygoma", "Ġeffusion", "<|im_end|>"]], idf, set(), boost=2.0)
    # "." has no word characters -> 1; "zygoma" is unseen -> the largest idf; "Ġeffusion" -> "effusion";
    # "<|im_end|>" reduces to "imend", unseen too (special tokens belong in `words_to_token_weights`' None).
    raw = np.array([1.0, 1.0, 2.5, 2.5, 2.5])
    assert w == pytest.approx(raw / raw.mean())


def test_empty_responses():
    out = tfidf_weights([[], ["a"], []], {"a": 2.0}, set())
    assert [len(w) for w in out] == [0, 1, 0]
    assert out[1].tolist() == [1.0]
    assert tfidf_weights([], {}, set()) == []
    assert word_weights([], {}, set()).shape == (0,)
    with pytest.raises(ValueError, match="idf"):
        tfidf_weights([["a"]], {"a": 0.0}, set())


def test_default_diagnostic_terms_from_the_labeler():
    terms = default_diagnostic_terms()
    for word in ("effusion", "effusions", "atelectasis", "cardiomegaly", "pneumothorax", "consolidation", "tube"):
        assert is_diagnostic(word, terms), word
    for word in ("the", "is", "portable", "seen", "there", ""):
        assert not is_diagnostic(word, terms), word
    idf = fit_idf(["the heart is normal . no effusion .", "the lungs are clear .", "the effusion is small ."])
    words = report_words("the small effusion is stable")
    w = word_weights(words, idf, terms)
    assert w.argmax() == words.index("effusion")


def test_word_ids_from_offsets_and_token_expansion():
    text = "Small effusion."
    offsets = [(0, 5), (5, 9), (9, 14), (14, 15), (0, 0)]  # "Small", " eff", "usion", ".", a special token
    words, ids = word_ids_from_offsets(text, offsets)
    assert words == ["small", "effusion"] and ids == [0, 1, 1, None, None]
    tw = words_to_token_weights([0.5, 1.5], ids, fill=1.0)
    raw = np.array([0.5, 1.5, 1.5, 1.0, 1.0])
    assert tw == pytest.approx(raw / raw.mean())
    assert tw.mean() == pytest.approx(1.0)
    assert words_to_token_weights([], []).shape == (0,)
    with pytest.raises(IndexError):
        words_to_token_weights([1.0], [3])


def test_stack_token_weights_into_masked_positions():
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    out = stack_token_weights([np.array([0.5, 1.5]), np.ones(4), np.zeros(0)], mask)
    assert out.tolist() == [[0, 0.5, 1.5, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    with pytest.raises(ValueError, match="response 0"):
        stack_token_weights([np.ones(3), np.ones(4), np.zeros(0)], mask)


def test_gradient_weights_normalisation_and_masks():
    g = torch.tensor([[1.0, 2.0, 3.0, 100.0], [0.0, 0.0, 0.0, 0.0], [5.0, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]])
    w = gradient_weights(g, mask)
    assert w[0].tolist() == pytest.approx([0.5, 1.0, 1.5, 0.0])  # mean over masked tokens = 2
    assert w[1].tolist() == [0, 0, 0, 0]  # no tokens
    assert w[2].tolist() == pytest.approx([1.0, 1.0, 0.0, 0.0])
    assert w[3].tolist() == [1, 1, 1, 0]  # all-zero gradients: uniform
    for i in (0, 2, 3):
        assert w[i][mask[i].bool()].mean().item() == pytest.approx(1.0)
    # NaN at a masked-out position is ignored; at a response token it is an error
    g2 = g.clone()
    g2[0, 3] = math.nan
    assert torch.equal(gradient_weights(g2, mask), w)
    g2[0, 0] = math.nan
    with pytest.raises(ValueError, match="finite"):
        gradient_weights(g2, mask)
    with pytest.raises(ValueError, match="finite"):
        gradient_weights(-g, mask)
    with pytest.raises(ValueError, match="same"):
        gradient_weights(g[:, :2], mask)


def test_gradient_weights_cap_keeps_mean_one():
    g = torch.tensor([[10.0, 1.0, 1.0, 1.0, 1.0]])
    mask = torch.ones_like(g)
    # uncapped: 50/14 and 5/14; cap 2: the big one is 2 and the four others share 5 - 2 = 3
    w = gradient_weights(g, mask, w_max=2.0)
    assert w[0].tolist() == pytest.approx([2.0, 0.75, 0.75, 0.75, 0.75])
    rng = torch.Generator().manual_seed(0)
    g = torch.rand(8, 16, generator=rng) ** 6
    mask = (torch.rand(8, 16, generator=rng) > 0.3).float()
    w = gradient_weights(g, mask, w_max=3.0)
    assert (w <= 3.0 + 1e-5).all()
    rows = mask.sum(1) > 0
    assert torch.allclose((w * mask).sum(1)[rows] / mask.sum(1)[rows], torch.ones(int(rows.sum())), atol=1e-5)
    assert (w[mask == 0] == 0).all()
    with pytest.raises(ValueError, match="w_max"):
        gradient_weights(g, mask, w_max=0.5)


def test_apply_token_weights():
    adv = torch.tensor([2.0, -1.0])
    weights = torch.tensor([[0.5, 1.5], [1.0, 1.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    assert apply_token_weights(adv, weights, mask).tolist() == [[1.0, 3.0], [-1.0, 0.0]]
    with pytest.raises(ValueError):
        apply_token_weights(adv[:1], weights, mask)
    with pytest.raises(ValueError):
        apply_token_weights(adv, weights, mask[:, :1])


def test_uniform_weights_leave_policy_loss_unchanged():
    from harness.grpo.core import policy_loss

    gen = torch.Generator().manual_seed(0)
    n, t = 4, 6
    logp = -torch.rand(n, t, generator=gen)
    logp_old = logp + 0.05 * torch.randn(n, t, generator=gen)
    mask = torch.ones(n, t)
    mask[0, 4:] = 0
    adv = torch.tensor([1.0, -1.0, 0.5, 0.0])
    beta = torch.zeros(n)
    base, _ = policy_loss(logp, logp_old, None, adv, beta, mask)
    per_token = apply_token_weights(adv, gradient_weights(torch.ones(n, t), mask), mask)
    weighted, _ = policy_loss(logp, logp_old, None, per_token, beta, mask)
    assert weighted.item() == pytest.approx(base.item(), abs=1e-6)


def test_token_gradient_weights_hand_computed():
    """One response of T = 3 tokens after a prompt of P = 1 position, H = 2. A linear "policy": the log-prob of
    response token t is a_t . e[P + t - 1] (the embedding before it). Tokens 1 and 2 are diagnostic, so
    J = a_1 . e[1] + a_2 . e[2]; dJ/de at the response positions P + t = 1, 2, 3 is a_1, a_2, 0, with norms
    |(3, 4)| = 5, |(0, 1)| = 1, 0; their mean is 2, so the weights are 2.5, 0.5, 0."""
    from rewards.ditpo_weights import token_gradient_weights

    a = torch.tensor([[1.0, 1.0], [3.0, 4.0], [0.0, 1.0]])  # a_0 (token 0 is not diagnostic), a_1, a_2
    embeds = torch.tensor([[[0.5, -1.0], [2.0, 0.0], [1.0, 1.0], [-3.0, 2.0]]], requires_grad=True)
    logp = (a * embeds[0, :3]).sum(-1).unsqueeze(0)  # [1, 3]: token t reads e[t] (= e[P + t - 1])
    diagnostic = torch.tensor([[0.0, 1.0, 1.0]])
    mask = torch.ones(1, 3)
    w = token_gradient_weights(embeds, logp, diagnostic, mask, prompt_len=1)
    torch.testing.assert_close(w, torch.tensor([[2.5, 0.5, 0.0]]))
    # The cap keeps the mean at 1: 2.5 -> 2, the rest scaled to sum 1: 0.5 -> 1, 0 stays 0.
    logp = (a * embeds[0, :3]).sum(-1).unsqueeze(0)
    capped = token_gradient_weights(embeds, logp, diagnostic, mask, prompt_len=1, w_max=2.0)
    torch.testing.assert_close(capped, torch.tensor([[2.0, 1.0, 0.0]]))


def test_token_gradient_weights_masks_and_bad_input():
    from rewards.ditpo_weights import token_gradient_weights

    embeds = torch.randn(2, 4, 3, requires_grad=True)
    logp = (embeds[:, 1:3] ** 2).sum(-1)  # [2, 2]: the proxy reads positions 1 and 2, the responses start at 2
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    w = token_gradient_weights(embeds, logp, torch.ones(2, 2), mask, prompt_len=2)
    assert w[1, 1] == 0 and w[1, 0] == 1.0  # one token: weight 1; masked-out: 0
    torch.testing.assert_close(w[0].mean(), torch.tensor(1.0))
    with pytest.raises(ValueError, match="leaf"):
        token_gradient_weights(embeds.detach(), logp, torch.ones(2, 2), mask, prompt_len=2)
    with pytest.raises(ValueError, match="P = 3"):
        token_gradient_weights(embeds, logp, torch.ones(2, 2), mask, prompt_len=3)


def test_diagnostic_flags_fall_back_to_every_token():
    from rewards.ditpo_weights import diagnostic_flags

    words = ["small", "effusion", "."]
    assert diagnostic_flags(words, [0, 1, None, 1], ["effusion"]) == [False, True, False, True]
    assert diagnostic_flags(["the", "lungs"], [0, None, 1], ["effusion"]) == [True, True, True]
