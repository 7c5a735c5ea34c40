"""reports/bootstrap.py: count-based corpus metrics equal the library's on the full set; the paired bootstrap
over test reports is calibrated under a planted null and detects a planted difference at the promised rate."""

from __future__ import annotations

import numpy as np
import pytest

from harness.constants import NUM_OBSERVATIONS
from harness.scoring.evaluation import ce_scores, nlg_report_scores, nlg_scores
from reports.bootstrap import (
    BLEU_METRICS,
    CE_METRICS,
    ReportData,
    bleu_from_counts,
    corpus_scores,
    paired_bootstrap,
    report_data_from_rows,
    resample_weights,
)
from reports.stats import mdd_normal

WORDS = "the heart size is normal no pleural effusion or pneumothorax mild cardiomegaly lungs are clear".split()


def _corpus(rng, n: int) -> tuple[dict, dict]:
    def text():
        words = list(rng.choice(WORDS, size=int(rng.integers(0, 14))))
        seps = rng.choice([" ", "  ", "\t", " \n"], size=max(len(words) - 1, 0), p=[0.7, 0.1, 0.1, 0.1])
        return "".join(w + s for w, s in zip(words, [*seps, ""][: len(words)], strict=True))

    return {f"r{i}": text() for i in range(n)}, {f"r{i}": text() for i in range(n)}


def test_count_based_corpus_scores_equal_pycocoevalcap_on_the_full_set():
    refs, hyps = _corpus(np.random.default_rng(3), 40)
    per = nlg_report_scores(refs, hyps)
    rows = [{"id": k, "nlg": per[k]} for k in refs]
    data = report_data_from_rows(rows)
    full = corpus_scores(data, np.ones((1, len(refs))), [*BLEU_METRICS, "ROUGE_L", "CIDEr"])
    expected = nlg_scores(refs, hyps, metrics=["BLEU", "ROUGE_L", "CIDEr"])
    for m in (*BLEU_METRICS, "ROUGE_L", "CIDEr"):
        assert full[m][0] == pytest.approx(expected[m], abs=1e-12), m
    # a resample rescored from counts equals pycocoevalcap on the resampled corpus (duplicate ids renamed)
    w = resample_weights(len(refs), B=1, seed=5)[0].astype(int)
    keys = [k for k, c in zip(refs, w, strict=True) for _ in range(c)]
    rs_refs = {f"{k}#{j}": refs[k] for j, k in enumerate(keys)}
    rs_hyps = {f"{k}#{j}": hyps[k] for j, k in enumerate(keys)}
    again = nlg_scores(rs_refs, rs_hyps, metrics=["BLEU", "ROUGE_L"])
    scored = corpus_scores(data, w[None, :], [*BLEU_METRICS, "ROUGE_L"])
    for m in (*BLEU_METRICS, "ROUGE_L"):
        assert scored[m][0] == pytest.approx(again[m], abs=1e-12), m


def test_bleu_from_counts_by_hand():
    # correct (3, 1, 0, 0) of guess (5, 4, 3, 2), hyp length 5 against reference length 7
    sums = np.array([3, 1, 0, 0, 5, 4, 3, 2, 5, 7], dtype=float)
    bp = np.exp(1 - 7 / 5)
    assert bleu_from_counts(sums)[0] == pytest.approx(0.6 * bp, rel=1e-9)
    assert bleu_from_counts(sums)[1] == pytest.approx((0.6 * 0.25) ** 0.5 * bp, rel=1e-9)
    assert bleu_from_counts(sums)[3] < 1e-3  # no 3- or 4-gram match: pycocoevalcap's tiny/small guards


def test_ce_from_counts_equal_ce_scores():
    rng = np.random.default_rng(1)
    hyp = rng.choice([1.0, 0.0, -1.0, np.nan], size=(50, NUM_OBSERVATIONS), p=[0.3, 0.4, 0.2, 0.1])
    ref = rng.choice([1.0, 0.0, -1.0, np.nan], size=(50, NUM_OBSERVATIONS), p=[0.3, 0.4, 0.2, 0.1])
    def as_json(row):
        return [None if np.isnan(v) else v for v in row]

    rows = [{"id": str(i), "hyp_labels": as_json(hyp[i]), "ref_labels": as_json(ref[i])} for i in range(50)]
    data = report_data_from_rows(rows)
    full = corpus_scores(data, np.ones((1, 50)), [*CE_METRICS, "findings_acc"])
    expected = ce_scores(hyp, ref)
    for m in CE_METRICS:
        assert full[m][0] == pytest.approx(expected[m], abs=1e-12), m
    assert full["findings_acc"][0] == pytest.approx(((hyp == 1) == (ref == 1)).mean(), abs=1e-12)


def test_bad_label_rows_name_the_field():
    rows = [{"id": "a", "hyp_labels": [1.0] * 3, "ref_labels": [0.0] * 3}]
    with pytest.raises(ValueError, match=r"preds.jsonl: field 'hyp_labels' must hold 14 labels"):
        report_data_from_rows(rows, "preds.jsonl")


# ----------------------------------------------------------------------------------- simulations


def _arm(rng, difficulty: np.ndarray, ref_pos: np.ndarray, reflen: np.ndarray, shift: float = 0.0) -> ReportData:
    """One arm's test decoding: per-report quality = shared difficulty + arm noise (+ a planted shift)."""
    n = difficulty.size
    quality = np.clip(difficulty + rng.normal(0, 0.08, n) + shift, 0.01, 0.99)
    testlen = rng.poisson(25, n) + 3
    guess = np.maximum(testlen[:, None] - np.arange(4)[None, :], 0)
    correct = rng.binomial(guess, quality[:, None] * 0.6 ** np.arange(4)[None, :])
    bleu = np.column_stack([correct, guess, testlen, reflen]).astype(float)
    flip = rng.random(ref_pos.shape) < (0.35 - 0.3 * quality[:, None])
    return ReportData([f"r{i}" for i in range(n)], bleu, {"ROUGE_L": quality + rng.normal(0, 0.05, n)},
                      ref_pos ^ flip, ref_pos)


def _test_set(rng, n: int):
    return rng.beta(4, 6, n), rng.random((n, NUM_OBSERVATIONS)) < 0.2, rng.poisson(25, n) + 3


def test_report_bootstrap_null_is_calibrated():
    """Two arms drawn from one distribution at one seed: "different" (p < 0.05) at most 5% + sampling slack."""
    rng = np.random.default_rng(11)
    n, reps, B = 300, 300, 1000
    w = resample_weights(n, B, seed=0)
    metrics = ["BLEU_4", "ROUGE_L", "ce_micro_f1"]
    flagged = {m: 0 for m in metrics}
    for _ in range(reps):
        difficulty, ref_pos, reflen = _test_set(rng, n)
        a, b = _arm(rng, difficulty, ref_pos, reflen), _arm(rng, difficulty, ref_pos, reflen)
        res = paired_bootstrap(a, b, metrics, weights=w)
        for m in metrics:
            flagged[m] += res[m].p < 0.05
    slack = 3 * np.sqrt(0.05 * 0.95 / reps)
    for m in metrics:
        assert flagged[m] / reps <= 0.05 + slack, (m, flagged[m] / reps)


def test_report_bootstrap_detects_the_mdd_at_about_80_percent():
    """A planted ROUGE-L shift of the size the MDD figure names is detected about 80% of the time."""
    rng = np.random.default_rng(12)
    n, reps, B = 300, 300, 1000
    w = resample_weights(n, B, seed=0)
    # per report, each arm's ROUGE-L = shared difficulty + N(0, 0.08) (quality) + N(0, 0.05): the paired
    # difference has variance 2 (0.08^2 + 0.05^2) (clipping at 0.01 / 0.99 is rare at Beta(4, 6))
    true_se = np.sqrt(2 * (0.08**2 + 0.05**2) / n)
    delta = mdd_normal(true_se)
    hits, ses = 0, []
    for _ in range(reps):
        difficulty, ref_pos, reflen = _test_set(rng, n)
        a = _arm(rng, difficulty, ref_pos, reflen)
        b = _arm(rng, difficulty, ref_pos, reflen)
        a.means["ROUGE_L"] = a.means["ROUGE_L"] + delta
        r = paired_bootstrap(a, b, ["ROUGE_L"], weights=w)["ROUGE_L"]
        hits += r.p < 0.05
        ses.append(r.se)
    assert np.median(ses) == pytest.approx(true_se, rel=0.1)  # the bootstrap se estimates the true one
    assert 0.8 - 0.08 <= hits / reps <= 0.8 + 0.08


def test_paired_bootstrap_basics():
    rng = np.random.default_rng(2)
    difficulty, ref_pos, reflen = _test_set(rng, 80)
    a = _arm(rng, difficulty, ref_pos, reflen)
    same = paired_bootstrap(a, a, B=500)
    assert all(r.diff == 0 and r.p == 1.0 and r.lo == r.hi == 0 for r in same.values())
    b = _arm(rng, difficulty, ref_pos, reflen, shift=0.3)
    res = paired_bootstrap(b, a, ["ROUGE_L", "BLEU_4"], B=500, seed=1)
    assert res["ROUGE_L"].diff > 0.2 and res["ROUGE_L"].p == pytest.approx(1 / 501)
    assert res["ROUGE_L"].lo <= res["ROUGE_L"].diff <= res["ROUGE_L"].hi and res["BLEU_4"].n_reports == 80
    assert paired_bootstrap(b, a, ["ROUGE_L"], B=500, seed=1)["ROUGE_L"] == res["ROUGE_L"]  # seeded
    with pytest.raises(ValueError, match="share no test report"):
        paired_bootstrap(a, ReportData(["zzz"], means={"ROUGE_L": np.zeros(1)}))


def test_gold_metrics_on_the_full_set_equal_the_gold_readers_scores():
    """gold_* from predictions rows (the reader's labels, hedged = reported; the image truth) equal
    harness/data/phantom/gold_reader.py's gold_scores on the full set, and resample like the other metrics."""
    from harness.data.phantom.gold_reader import gold_scores

    rng = np.random.default_rng(5)
    n = 60
    gold = rng.choice([1.0, -1.0, 0.0, np.nan], size=(n, NUM_OBSERVATIONS), p=[0.15, 0.05, 0.3, 0.5])
    present = (rng.random((n, NUM_OBSERVATIONS)) < 0.2).astype(int)
    rows = [{"id": f"r{i}", "gold_labels": [None if np.isnan(v) else float(v) for v in g],
             "present": [int(v) for v in p], "hyp_labels": [None] * NUM_OBSERVATIONS,
             "ref_labels": [None] * NUM_OBSERVATIONS}
            for i, (g, p) in enumerate(zip(gold, present, strict=True))]
    data = report_data_from_rows(rows)
    expected = gold_scores(gold, present)
    full = corpus_scores(data, np.ones((1, n)), ["gold_f1", "gold_precision", "gold_recall", "gold_exact", "gold_acc"])
    for m, v in full.items():
        assert v[0] == pytest.approx(expected[m], abs=1e-12), m
    w = np.zeros((1, n))
    w[0, :3] = [2, 0, 1]
    w[0, 3] = n - 3  # any multiset: weighted sums of the per-report counts
    idx = np.repeat(np.arange(n), w[0].astype(int))
    again = gold_scores(gold[idx], present[idx])
    assert corpus_scores(data, w, ["gold_f1"])["gold_f1"][0] == pytest.approx(again["gold_f1"], abs=1e-12)
