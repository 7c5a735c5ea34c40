"""harness.scoring.evaluation: NLG scores equal pycocoevalcap's; CE scores against hand-computed values."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.cider.cider import Cider
from pycocoevalcap.meteor.meteor import Meteor
from pycocoevalcap.rouge.rouge import Rouge

from harness.constants import OBSERVATIONS
from harness.scoring import evaluation
from harness.scoring.evaluation import NLG_KEYS, ce_scores, meteor_safe_text, meteor_scorer, nlg_scores

CORPORA = [
    (
        {"a": "the heart size is normal . no pleural effusion .", "b": "mild cardiomegaly . lungs are clear ."},
        {"a": "heart size is normal . no effusion .", "b": "the lungs are clear . mild cardiomegaly ."},
    ),
    (
        {
            "1": "small left pleural effusion with adjacent atelectasis .",
            "2": "no acute cardiopulmonary process .",
            "3": "endotracheal tube terminates 4 cm above the carina .",
        },
        {
            "1": "small left pleural effusion .",
            "2": "no acute cardiopulmonary abnormality .",
            "3": "the endotracheal tube is 4 cm above the carina . no pneumothorax .",
        },
    ),
    (
        {f"s{i}": f"finding {i} is stable . the lungs are clear ." for i in range(5)},
        {f"s{i}": f"finding {(i * 3) % 5} is stable . lungs clear ." for i in range(5)},
    ),
]


@pytest.fixture(scope="module")
def reference_meteor():
    """An independent pycocoevalcap Meteor (its own JVM) to compute the expected numbers."""
    scorer = Meteor()
    yield scorer
    scorer.meteor_p.stdin.close()
    scorer.meteor_p.kill()
    scorer.meteor_p.wait()


def pycoco_scores(refs: dict[str, str], hyps: dict[str, str], meteor: Meteor) -> dict[str, float]:
    """The oracle: pycocoevalcap's scorers on the raw strings; METEOR alone on the normalised ones."""
    gts = {k: [refs[k]] for k in refs}
    res = {k: [hyps[k]] for k in refs}
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    out = {f"BLEU_{i + 1}": bleu[i] for i in range(4)}
    clean_gts = {k: [meteor_safe_text(refs[k])] for k in refs}
    clean_res = {k: [meteor_safe_text(hyps[k])] for k in refs}
    out["METEOR"] = meteor.compute_score(clean_gts, clean_res)[0]
    out["ROUGE_L"] = Rouge().compute_score(gts, res)[0]
    out["CIDEr"] = Cider().compute_score(gts, res)[0]
    return out


def assert_scores_equal(actual: dict, expected: dict) -> None:
    """Bit for bit: BLEU and ROUGE-L (harness/scoring/coco_scores.py) and pipelined METEOR give pycocoevalcap's
    numbers."""
    assert set(actual) == set(expected)
    for key in expected:
        assert actual[key] == expected[key], key


# --------------------------------------------------------------------------------------------- NLG


@pytest.mark.parametrize("corpus", range(len(CORPORA)))
def test_nlg_scores_equal_pycocoevalcap(corpus, reference_meteor):
    refs, hyps = CORPORA[corpus]
    scores = nlg_scores(refs, hyps)
    assert tuple(scores) == NLG_KEYS
    assert all(isinstance(v, float) for v in scores.values())
    assert_scores_equal(scores, pycoco_scores(refs, hyps, reference_meteor))


def _separately(refs, hyps):
    """nlg_scores and nlg_report_scores as they were computed before they shared their scorers: each scorer run
    twice (pycocoevalcap directly for the per-report half)."""
    from pycocoevalcap.bleu.bleu_scorer import cook_refs, cook_test

    from harness.constants import BLEU_COUNT_KEYS

    gts = {k: [refs[k]] for k in refs}
    res = {k: [hyps[k]] for k in refs}
    per = {}
    for k in gts:
        c = cook_test(res[k][0], cook_refs(gts[k]), eff="closest")
        counts = [*c["correct"], *c["guess"], c["testlen"], c["reflen"]]
        per[k] = {**dict(zip(BLEU_COUNT_KEYS, map(float, counts), strict=True)),
                  "ROUGE_L": float(Rouge().calc_score(res[k], gts[k]))}
    cider = (Cider().compute_score(gts, res)[1] if any(t.split() for v in gts.values() for t in v)
             else np.zeros(len(gts)))
    norm = evaluation._normalized
    _, meteor = evaluation._METEOR.score(norm(gts), norm(res), segments=True)
    for k, c, m in zip(gts, cider, meteor, strict=True):
        per[k].update(CIDEr=float(c), METEOR=float(m))
    return nlg_scores(refs, hyps), per


@pytest.mark.parametrize("corpus", [*range(len(CORPORA)), "empty_refs", "random"])
def test_corpus_and_report_scores_from_one_run_equal_two_runs(corpus):
    """A test evaluation scores each metric once (nlg_scores_and_reports): the same numbers, bit for bit and in
    the same key order, as nlg_scores and the per-report scores computed separately."""
    from harness.scoring.evaluation import nlg_report_scores, nlg_scores_and_reports

    if corpus == "empty_refs":
        refs, hyps = {"a": "", "b": " "}, {"a": "no effusion .", "b": ""}
    elif corpus == "random":
        rng = np.random.default_rng(3)
        words = "the heart lungs are clear mild small left right effusion pneumothorax opacity . no".split()
        refs = {f"r{i}": " ".join(rng.choice(words, rng.integers(1, 20))) for i in range(40)}
        hyps = {k: " ".join(rng.choice(words, rng.integers(0, 20))) for k in refs}
    else:
        refs, hyps = CORPORA[corpus]
    corpus_scores, per = nlg_scores_and_reports(refs, hyps)
    want_corpus, want_per = _separately(refs, hyps)
    assert list(corpus_scores) == list(want_corpus) == list(NLG_KEYS)
    assert corpus_scores == want_corpus and per == want_per
    assert nlg_report_scores(refs, hyps) == want_per


def test_metric_subset():
    refs, hyps = CORPORA[0]
    assert set(nlg_scores(refs, hyps, metrics=["ROUGE_L", "CIDEr"])) == {"ROUGE_L", "CIDEr"}
    bleu = nlg_scores(refs, hyps, metrics={"BLEU"})
    assert set(bleu) == {"BLEU_1", "BLEU_2", "BLEU_3", "BLEU_4"}
    with pytest.raises(ValueError, match="unknown NLG metric"):
        nlg_scores(refs, hyps, metrics=["SPICE"])


def test_meteor_safe_text():
    assert meteor_safe_text("  the heart\n\nis  normal .\t") == "the heart is normal ."
    assert meteor_safe_text("a ||| b|||c") == "a b c"
    assert meteor_safe_text("a ||||| b") == "a || b"  # no `|||` can survive
    assert meteor_safe_text("\n \u2028 ") == ""


def test_raw_strings_score_as_pycocoevalcap_scores_them(reference_meteor):
    """Double spaces, tabs and newlines reach BLEU / ROUGE-L / CIDEr untouched (ROUGE-L splits on single spaces,
    so they change it); only METEOR's input is normalised, and its pipe survives `|||` and newlines."""
    refs = {"a": "the heart  size is normal .", "b": "no ||| effusion .\r\n", "c": "lungs are\tclear .",
            "d": "mild  cardiomegaly .  no edema ."}
    hyps = {"a": "the heart size\n\n is normal", "b": "|||no effusion ||| .", "c": "  lungs\tclear .",
            "d": "mild cardiomegaly . no  edema ."}
    scores = nlg_scores(refs, hyps)
    assert_scores_equal(scores, pycoco_scores(refs, hyps, reference_meteor))
    clean = nlg_scores({k: meteor_safe_text(v) for k, v in refs.items()},
                       {k: meteor_safe_text(v) for k, v in hyps.items()})
    assert abs(scores["ROUGE_L"] - clean["ROUGE_L"]) > 1e-3  # the raw strings are what is scored
    assert scores["METEOR"] == clean["METEOR"]
    assert meteor_scorer().meteor_p.poll() is None  # the pipe survived the separators


def test_non_string_report_is_named():
    with pytest.raises(TypeError, match=r"hyps\['b'\] must be a string, got NoneType"):
        nlg_scores({"a": "x", "b": "y"}, {"a": "x", "b": None})


def test_empty_hypotheses_score_zero_and_do_not_crash():
    refs = {"a": "the heart size is normal .", "b": "no pleural effusion ."}
    scores = nlg_scores(refs, {"a": "", "b": "  \n "})
    for key in NLG_KEYS:
        assert scores[key] == pytest.approx(0.0, abs=1e-12), key


def test_empty_references_and_pairs(reference_meteor):
    refs = {"a": "the heart size is normal .", "b": "", "c": ""}
    hyps = {"a": "the heart is normal .", "b": "no effusion .", "c": ""}
    assert_scores_equal(nlg_scores(refs, hyps), pycoco_scores(refs, hyps, reference_meteor))
    # Every reference empty: pycocoevalcap's CIDEr would raise; ours reports 0 (documented).
    all_empty = nlg_scores({"a": "", "b": ""}, {"a": "x", "b": ""})
    assert all_empty["CIDEr"] == 0.0
    assert all_empty["ROUGE_L"] == pytest.approx(0.5)  # ("", "") is a perfect ROUGE-L match
    # raw strings: "\n" against "" is no match for pycocoevalcap's ROUGE-L (it splits on " " only)
    assert nlg_scores({"a": "\n"}, {"a": ""}, metrics=["ROUGE_L"])["ROUGE_L"] == 0.0


def test_mismatched_or_empty_ids_raise():
    with pytest.raises(ValueError, match="same ids"):
        nlg_scores({"a": "x", "b": "y"}, {"a": "x", "c": "y"})
    with pytest.raises(ValueError, match="at least one"):
        nlg_scores({}, {})


@pytest.mark.parametrize("chunk", [1, 7, 128])
def test_pipelined_meteor_equals_pycocoevalcap_bit_for_bit(chunk, reference_meteor):
    """pipelined_meteor sends pycocoevalcap's own lines, several before reading their replies: the corpus and
    every segment score equal Meteor.compute_score's on the same JVM protocol, for any chunk size (a corpus of
    150 reports of varied length crosses several chunk boundaries; one pair has no overlap, one an empty
    hypothesis, one a double space that METEOR's line builder removes)."""
    from harness.scoring.evaluation import meteor_safe_text, pipelined_meteor

    rng = np.random.default_rng(11)
    words = "the heart size is normal lungs are clear mild small left right pleural effusion no pneumothorax .".split()
    gts, res = {}, {}
    for i in range(150):
        gts[f"r{i}"] = [meteor_safe_text(" ".join(rng.choice(words, rng.integers(3, 40))))]
        res[f"r{i}"] = [meteor_safe_text(" ".join(rng.choice(words, rng.integers(0, 40))))]
    gts["x"], res["x"] = ["cardiomegaly ."], ["osseous structures intact"]
    gts["y"], res["y"] = ["no acute disease ."], [""]
    gts["z"], res["z"] = ["heart normal ."], ["heart  normal ."]
    expected = reference_meteor.compute_score(gts, res)
    assert pipelined_meteor(meteor_scorer(), gts, res, chunk=chunk) == expected
    assert len(set(expected[1])) > 50  # the segments differ: a reply read out of order would show


def test_meteor_jvm_is_reused_across_calls():
    refs, hyps = CORPORA[1]
    first = nlg_scores(refs, hyps, metrics=["METEOR"])
    scorer = meteor_scorer()
    pid = scorer.meteor_p.pid
    for _ in range(5):
        assert nlg_scores(refs, hyps, metrics=["METEOR"]) == first
    assert meteor_scorer() is scorer
    assert scorer.meteor_p.pid == pid and scorer.meteor_p.poll() is None


def test_meteor_is_safe_from_threads():
    refs, hyps = CORPORA[2]
    expected = nlg_scores(refs, hyps, metrics=["METEOR"])
    results: list[dict] = []

    def work() -> None:
        results.append(nlg_scores(refs, hyps, metrics=["METEOR"]))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == [expected] * 4


def test_meteor_recovers_from_a_dead_jvm():
    refs, hyps = CORPORA[0]
    expected = nlg_scores(refs, hyps, metrics=["METEOR"])
    dead = meteor_scorer()
    dead.meteor_p.kill()
    dead.meteor_p.wait()
    assert nlg_scores(refs, hyps, metrics=["METEOR"]) == expected
    assert meteor_scorer() is not dead
    assert not dead.lock.locked()  # released, so its __del__ cannot deadlock


def test_meteor_service_close_stops_the_jvm():
    service = evaluation._MeteorService()
    scorer = service.scorer()
    service.close()
    assert scorer.meteor_p.poll() is not None


# ---------------------------------------------------------------------------------------------- CE

NAN = float("nan")


def three_samples() -> tuple[np.ndarray, np.ndarray]:
    """Hand-built labels. Index: 0 No Finding, 2 Cardiomegaly, 3 Lung Opacity, 5 Edema, 8 Atelectasis,
    10 Pleural Effusion.

    sample 1: ref {2, 10}, hyp {2, 5}   -> tp 1, fp 1, fn 1: P 1/2, R 1/2, F1 1/2
    sample 2: ref {8},     hyp {8, 10}  -> tp 1, fp 1, fn 0: P 1/2, R 1,   F1 2/3
    sample 3: ref {0},     hyp {}       -> tp 0, fp 0, fn 1: P 0 (0/0), R 0, F1 0
    micro: tp 2, fp 2, fn 2 -> P = R = F1 = 1/2
    example: P = (1/2 + 1/2 + 0)/3 = 1/3, R = (1/2 + 1 + 0)/3 = 1/2, F1 = (1/2 + 2/3 + 0)/3 = 7/18
    per label: Cardiomegaly and Atelectasis 1/1/1; No Finding, Pleural Effusion, Edema 0; others 0 (0/0)
    macro: P = R = F1 = 2/14
    Uncertain (-1) and blank (NaN) entries are sprinkled in and must count as negatives.
    """
    hyp = np.zeros((3, 14))
    ref = np.zeros((3, 14))
    hyp[0, [2, 5]] = 1
    ref[0, [2, 10]] = 1
    hyp[1, [8, 10]] = 1
    ref[1, 8] = 1
    ref[2, 0] = 1
    hyp[2, 0] = -1
    hyp[2, 3] = NAN
    hyp[0, 9] = -1
    ref[0, 5] = -1
    ref[1, 3] = NAN
    return hyp, ref


def test_ce_scores_hand_computed():
    hyp, ref = three_samples()
    scores = ce_scores(hyp, ref)
    expected = {
        "ce_micro_precision": 0.5,
        "ce_micro_recall": 0.5,
        "ce_micro_f1": 0.5,
        "ce_macro_precision": 2 / 14,
        "ce_macro_recall": 2 / 14,
        "ce_macro_f1": 2 / 14,
        "ce_example_precision": 1 / 3,
        "ce_example_recall": 0.5,
        "ce_example_f1": 7 / 18,
    }
    for key, value in expected.items():
        assert scores[key] == pytest.approx(value, abs=1e-12), key
    assert scores["ce_num_examples"] == 3
    per_label = scores["per_label"]
    assert list(per_label) == list(OBSERVATIONS)
    assert per_label["Cardiomegaly"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}
    assert per_label["Atelectasis"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}
    assert per_label["Pleural Effusion"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert per_label["No Finding"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert per_label["Edema"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}
    assert per_label["Fracture"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}


def test_uncertain_and_blank_equal_negative():
    hyp, ref = three_samples()
    clean = lambda a: np.where(a == 1, 1.0, 0.0)  # noqa: E731
    messy, tidy = ce_scores(hyp, ref), ce_scores(clean(hyp), clean(ref))
    assert messy == tidy


def test_ce_scores_agree_with_sklearn_zero_division_0():
    from sklearn.metrics import precision_recall_fscore_support

    rng = np.random.default_rng(0)
    hyp = rng.choice([1.0, 0.0, -1.0, NAN], size=(40, 14), p=[0.3, 0.4, 0.2, 0.1])
    ref = rng.choice([1.0, 0.0, -1.0, NAN], size=(40, 14), p=[0.3, 0.4, 0.2, 0.1])
    scores = ce_scores(hyp, ref)
    y_true, y_pred = (ref == 1).astype(int), (hyp == 1).astype(int)
    for average, prefix in (("micro", "micro"), ("macro", "macro"), ("samples", "example")):
        p, r, f, _ = precision_recall_fscore_support(y_true, y_pred, average=average, zero_division=0)
        assert scores[f"ce_{prefix}_precision"] == pytest.approx(p, abs=1e-12)
        assert scores[f"ce_{prefix}_recall"] == pytest.approx(r, abs=1e-12)
        assert scores[f"ce_{prefix}_f1"] == pytest.approx(f, abs=1e-12)


@pytest.mark.parametrize(
    ("hyp_shape", "ref_shape", "match"),
    [
        ((3, 13), (3, 13), r"shape \[N, 14\]"),
        ((14,), (14,), r"shape \[N, 14\]"),
        ((3, 14), (4, 14), "same shape"),
        ((0, 14), (0, 14), "no samples"),
    ],
)
def test_ce_scores_shape_errors(hyp_shape, ref_shape, match):
    with pytest.raises(ValueError, match=match):
        ce_scores(np.zeros(hyp_shape), np.zeros(ref_shape))


def test_meteor_without_java_says_what_to_install(monkeypatch):
    import shutil

    service = evaluation._MeteorService()
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match=r"no 'java' is on PATH: install a Java runtime"):
        service.scorer()
