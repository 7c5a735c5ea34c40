import pytest

from harness.grpo.validation import validation_score

SCORES = {"BLEU_1": 0.4, "BLEU_2": 0.3, "BLEU_3": 0.2, "BLEU_4": 0.1, "METEOR": 0.2, "ROUGE_L": 0.3}


def test_paper_eq10_hand_computed():
    # (0.4 + 0.3 + 0.2 + 0.1 + 0.2 + 0.3 + 0.1 * 0.5) / 7 = 1.55 / 7
    assert validation_score(SCORES, "paper", 0.1, 0.5) == pytest.approx(1.55 / 7)


def test_official_variant_hand_computed():
    # mean(M) + lambda RG = 1.5 / 6 + 0.05
    assert validation_score(SCORES, "official", 0.1, 0.5) == pytest.approx(0.3)


def test_lambda_zero_needs_no_rg_and_missing_keys_error():
    assert validation_score(SCORES, "paper", 0.0, None) == pytest.approx(1.5 / 7)
    with pytest.raises(ValueError, match="RG"):
        validation_score(SCORES, "paper", 0.1, None)
    with pytest.raises(ValueError, match="METEOR"):
        validation_score({k: v for k, v in SCORES.items() if k != "METEOR"}, "paper", 0.0)
    with pytest.raises(ValueError, match="val_score"):
        validation_score(SCORES, "mean", 0.0)
