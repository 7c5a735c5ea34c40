"""Per-validation gold metric, proxy reward and KL to the starting policy (issue 12, item 1)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.constants import OBSERVATIONS
from harness.grpo.trainer import PromptSet
from harness.grpo.val_drift import kl_summary, kl_to_snapshot, token_kl
from harness.policy.snapshots import SnapshotStore

HYPS = ["mild cardiomegaly .", "small left pleural effusion . no pneumothorax .",
        "the lungs are clear . no pleural effusion .",
        "heart size is normal . there is a right pneumothorax . mild pulmonary edema .", ""]
# Ground truth: positives per report (others 0 or not mentioned, which must both count as "absent").
TRUTH = [{"Cardiomegaly"}, {"Pleural Effusion", "Pneumothorax"}, {"Cardiomegaly"}, {"Edema", "Pneumothorax"},
         {"No Finding"}]


def _labels(sets, fill):
    out = np.full((len(sets), len(OBSERVATIONS)), fill)
    for i, s in enumerate(sets):
        out[i, [OBSERVATIONS.index(o) for o in s]] = 1.0
    return out


def test_labeler_agreement_equals_a_hand_count():
    from harness.config import RunConfig
    from harness.stages.rl import score_validation, validation_fields
    from rewards.chexpert import label_reports

    # What the rule labeler reads in each report (the hand count below rests on it).
    found = [{OBSERVATIONS[j] for j in np.flatnonzero(row == 1)} for row in label_reports(HYPS)]
    assert found == [{"Cardiomegaly"}, {"Pleural Effusion"}, {"No Finding"}, {"Edema", "Pneumothorax"}, set()]
    # Hand count: TP = 1 + 1 + 0 + 2 + 0 = 4; FP = 1 (No Finding, report 2); FN = 0 + 1 + 1 + 0 + 1 = 3.
    # Micro-F1 = 2 TP / (2 TP + FP + FN) = 8 / 12; exact match: reports 0 and 3 = 2 / 5.
    val = PromptSet([f"s{i}" for i in range(5)], [[None]] * 5, ["w"] * 5, ["mild cardiomegaly ."] * 5)
    for fill in (0.0, np.nan):
        scores = score_validation(validation_fields(RunConfig()), val, HYPS, _labels(TRUTH, fill))
        assert scores["labeler_f1"] == pytest.approx(8 / 12, abs=1e-12)
        assert scores["labeler_exact"] == pytest.approx(2 / 5, abs=1e-12)
        assert "gold_f1" not in scores  # stored labels but no image truth: no gold reader
    # no ground truth: no gold metric
    assert "labeler_f1" not in score_validation(validation_fields(RunConfig()), val, HYPS)


def test_gold_metric_is_the_gold_readers_against_the_image_truth():
    from harness.config import RunConfig
    from harness.data.phantom.gold_reader import read_reports
    from harness.stages.rl import score_validation, validation_fields

    # The gold reader reads only the generator's sentences: "heart size is normal" and "there is a right
    # pneumothorax" (no severity word) are not among them, so report 3 states only its edema.
    found = [{OBSERVATIONS[j] for j in np.flatnonzero(row == 1)} for row in read_reports(HYPS)]
    assert found == [{"Cardiomegaly"}, {"Pleural Effusion"}, {"No Finding"}, {"Edema"}, set()]
    # Against what was drawn (TRUTH): TP = 1 + 1 + 0 + 1 + 0 = 3; FP = 1 (No Finding, report 2);
    # FN = 0 + 1 + 1 + 1 + 1 = 4 -> F1 6 / 11; exact: report 0 = 1 / 5. The labeler differs on report 3 only.
    val = PromptSet([f"s{i}" for i in range(5)], [[None]] * 5, ["w"] * 5, ["mild cardiomegaly ."] * 5)
    scores = score_validation(validation_fields(RunConfig()), val, HYPS, _labels(TRUTH, np.nan), _labels(TRUTH, 0.0))
    assert scores["gold_f1"] == pytest.approx(6 / 11, abs=1e-12)
    assert scores["gold_exact"] == pytest.approx(1 / 5, abs=1e-12)
    assert scores["labeler_gold_disagree"] == pytest.approx(1 / 5, abs=1e-12)
    assert scores["labeler_f1"] == pytest.approx(8 / 12, abs=1e-12)


def test_proxy_reward_is_the_mean_rl_reward_of_the_validation_reports():
    from harness.config import RunConfig
    from harness.stages.rl import score_validation, validation_fields
    from rewards.spec import compute_reward

    refs = ["mild cardiomegaly . no effusion .", "small left pleural effusion .", "the lungs are clear .",
            "right pneumothorax .", "normal heart ."]
    val = PromptSet([f"s{i}" for i in range(5)], [[None]] * 5, ["w"] * 5, refs)
    cfg = RunConfig()
    for reward in ("bleu4", "chexpert_f1"):
        cfg.rl.reward = reward
        expected = float(np.mean(compute_reward(reward, HYPS, refs)))
        assert score_validation(validation_fields(cfg), val, HYPS)["proxy_reward"] == pytest.approx(expected, abs=1e-12)


def test_ground_truth_labels_only_when_every_sample_has_them():
    from harness.data.datasets import Sample
    from harness.stages.rl import ground_truth_labels, image_truth

    a = Sample("a", "r", [], labels=np.array([1.0] + [np.nan] * 13), present=np.array([1] + [0] * 13))
    b = Sample("b", "r", [], labels=None, categories=["Edema"])
    assert ground_truth_labels([a, a]).shape == (2, 14) and image_truth([a, a]).shape == (2, 14)
    assert ground_truth_labels([a, b]) is None and ground_truth_labels([]) is None
    assert image_truth([a, b]) is None and image_truth([]) is None


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_token_kl_equals_scipy(temperature):
    from scipy.special import softmax
    from scipy.stats import entropy

    g = torch.Generator().manual_seed(3)
    p, q = torch.randn(3, 5, 11, generator=g) * 2, torch.randn(3, 5, 11, generator=g) * 2
    ours = token_kl(p, q, temperature).numpy()
    ref = entropy(softmax(p.numpy() / temperature, -1), softmax(q.numpy() / temperature, -1), axis=-1)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-7)
    assert torch.allclose(token_kl(p, p, temperature), torch.zeros(3, 5), atol=1e-6)


@pytest.fixture
def lora_model(tiny_model):
    from harness.models.trainable import add_lora, set_trainable

    torch.manual_seed(0)
    model = add_lora(tiny_model, r=4, alpha=8, dropout=0.0)
    set_trainable(model, "rl")
    return model


def test_kl_to_snapshot_zero_at_start_positive_after_a_move_and_independent_of_batching(
        lora_model, tiny_processor, xray_images):
    store = SnapshotStore(lora_model)
    store.capture("start")
    images, instr = [[im] for im in xray_images], ["write"] * 4
    texts = ["mild cardiomegaly .", "the lungs are clear . no acute osseous abnormality .", "", "no effusion ."]
    at_start = kl_summary([kl_to_snapshot(lora_model, tiny_processor, store, "start", images, instr, texts)])
    assert at_start["kl_start_seq"] == pytest.approx(0.0, abs=1e-6)
    with torch.no_grad():
        for p in store.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    moved = [p.detach().clone() for p in store.parameters()]
    whole = kl_to_snapshot(lora_model, tiny_processor, store, "start", images, instr, texts, temperature=0.7)
    ones = [kl_to_snapshot(lora_model, tiny_processor, store, "start", images[i:i + 1], instr[i:i + 1],
                           texts[i:i + 1], temperature=0.7, batch_size=1) for i in range(4)]
    assert all(torch.equal(a, b) for a, b in zip(moved, store.parameters(), strict=True))  # live put back
    s_whole, s_ones = kl_summary([whole]), kl_summary(ones)
    assert s_whole["kl_start_seq"] > 1e-4
    # Padding in a batch of 4 changes nothing: the same sums as one report at a time (and shares add up).
    assert s_whole["kl_start_seq"] == pytest.approx(s_ones["kl_start_seq"], rel=1e-4)
    assert s_whole["kl_start_token"] == pytest.approx(s_ones["kl_start_token"], rel=1e-4)
    # Sequence KL = token mean x tokens per report (each report's tokens + its end token).
    n_tok = sum(len(tiny_processor.tokenizer(t, add_special_tokens=False).input_ids) + 1 for t in texts)
    assert whole["n_tok"] == n_tok
    assert s_whole["kl_start_seq"] == pytest.approx(s_whole["kl_start_token"] * n_tok / 4, rel=1e-6)


def test_validator_logs_proxy_gold_and_kl(monkeypatch, lora_model, tiny_processor, xray_images):
    from harness.config import RunConfig
    from harness.stages import rl as rl_stage

    monkeypatch.setattr(rl_stage, "generate_reports", lambda m, p, images, ins, **kw: HYPS[:len(images)])
    val = PromptSet([f"s{i}" for i in range(4)], [[im] for im in xray_images], ["write"] * 4, ["no effusion ."] * 4)
    store = SnapshotStore(lora_model)
    store.capture("start")
    cfg = RunConfig()
    scores = rl_stage.make_validator(rl_stage.validation_fields(cfg), val, tiny_processor,
                                     stored_labels=_labels(TRUTH[:4], 0.0), start=store,
                                     gold_present=_labels(TRUTH[:4], 0.0))(lora_model)
    assert scores["kl_start_seq"] == pytest.approx(0.0, abs=1e-6)
    assert scores["labeler_f1"] == pytest.approx(8 / 11) and scores["labeler_exact"] == pytest.approx(2 / 4)
    # gold reader (see test_gold_metric_is_the_gold_readers_against_the_image_truth): TP 3, FP 1, FN 3
    assert scores["gold_f1"] == pytest.approx(6 / 10) and scores["gold_exact"] == pytest.approx(1 / 4)
    assert {"proxy_reward", "BLEU_4", "kl_start_token"} <= set(scores)
