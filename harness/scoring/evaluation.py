"""Evaluation metrics: NLG scores (pycocoevalcap) and clinical-efficacy (CE) scores over CheXpert labels.

NLG (`nlg_scores`): BLEU-1..4 (corpus BLEU, "closest" reference length), METEOR 1.5, ROUGE-L and CIDEr,
as pycocoevalcap computes them: METEOR by its own scorer, BLEU, ROUGE-L and CIDEr-D by harness/scoring/coco_scores.py,
which gives pycocoevalcap's numbers bit for bit without its pure-Python loops. BLEU, ROUGE-L and CIDEr see the
raw strings, exactly as the standard
(R2Gen-style) evaluation passes them, so they equal pycocoevalcap's numbers on the same texts (ROUGE-L splits on
single spaces, so double spaces and tabs change it; BLEU and CIDEr split on any whitespace). Only METEOR's input
is normalised (`meteor_safe_text`), because its Java pipe breaks on what the raw text may hold:
- every `|||` becomes a space: it is METEOR's field separator and would desynchronise its stdin/stdout pipe;
- all whitespace runs (newlines, tabs, Unicode spaces) collapse to one space, ends stripped: METEOR reads one
  line per segment;
- an empty (or all-whitespace) text stays empty. Every scorer accepts it: an empty hypothesis scores 0 on
  every metric; an empty hypothesis against an empty reference gets ROUGE-L 1 (pycocoevalcap's own rule).
  One exception to pycocoevalcap: when *every* reference is empty (no token), pycocoevalcap's CIDEr raises on
  its empty document-frequency table; we report CIDEr 0.0 there.

METEOR runs one Java process per Python process (created lazily, reused, closed at exit). Calls are
serialised by a lock; if the process dies or a reply cannot be parsed, it is replaced and the call retried
once. A forked child never touches its parent's JVM: it starts its own.

CE (`ce_scores`): positive = label value 1; 0 (negative), -1 (uncertain) and NaN (not mentioned) count as
not positive, as in the R2Gen / PromptMRG CE protocol. Every ratio with a zero denominator is 0, which is
that protocol's convention too (it divides by `x + 1e-6`; we divide exactly, so our values differ from it by
under 1e-6 relative). In particular a sample with no positive label in either the reference or the
hypothesis has example-based precision = recall = F1 = 0, and a label with no positives anywhere has
macro precision = recall = F1 = 0.
"""

from __future__ import annotations

import atexit
import os
import shutil
import threading
from collections.abc import Iterable, Mapping

import numpy as np

from harness.constants import BLEU_COUNT_KEYS, NUM_OBSERVATIONS, OBSERVATIONS
from harness.scoring.coco_scores import bleu_statistics, cider_d, corpus_bleu, rouge_l
from rewards.chexbert import label_reports_chexbert

NLG_METRICS: tuple[str, ...] = ("BLEU", "METEOR", "ROUGE_L", "CIDEr")
NLG_KEYS: tuple[str, ...] = ("BLEU_1", "BLEU_2", "BLEU_3", "BLEU_4", "METEOR", "ROUGE_L", "CIDEr")
_METEOR_SEPARATOR = "|||"


# --------------------------------------------------------------------------------------------------- NLG


def meteor_safe_text(text: str) -> str:
    """Text as METEOR sees it: no `|||`, whitespace collapsed to single spaces, stripped."""
    if not isinstance(text, str):
        raise TypeError(f"reports must be strings, got {type(text).__name__}")
    return " ".join(text.replace(_METEOR_SEPARATOR, " ").split())


def nlg_scores(
    refs: Mapping[str, str], hyps: Mapping[str, str], metrics: Iterable[str] | None = None
) -> dict[str, float]:
    """Corpus NLG scores of `hyps` against `refs` (one reference per id).

    `metrics` is a subset of {"BLEU", "METEOR", "ROUGE_L", "CIDEr"} (None = all). Returns the keys of the
    chosen metrics among BLEU_1..BLEU_4, METEOR, ROUGE_L, CIDEr, as floats.
    """
    chosen = _check_metrics(metrics)
    gts, res = _prepare(refs, hyps)
    scores: dict[str, float] = {}
    if "BLEU" in chosen:
        scores.update(_bleu(gts, res))
    if "METEOR" in chosen:
        scores["METEOR"] = _METEOR.score(_normalized(gts), _normalized(res))
    if "ROUGE_L" in chosen:
        scores["ROUGE_L"] = _rouge(gts, res)
    if "CIDEr" in chosen:
        scores["CIDEr"] = _cider(gts, res)
    return scores


def nlg_report_scores(refs: Mapping[str, str], hyps: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """Per report (id -> {...}): what the corpus NLG scores are sums or means of, so that a resample of reports
    can be rescored without rerunning the scorers (reports/bootstrap.py).

    - BLEU: pycocoevalcap's own sufficient statistics of the pair (`BLEU_COUNT_KEYS`: clipped n-gram matches and
      hypothesis n-grams for n = 1..4, hypothesis and closest-reference lengths); corpus BLEU is a function of
      their sums, so it equals `nlg_scores` on the full set.
    - ROUGE_L, CIDEr: pycocoevalcap's per-report scores (its corpus numbers are their means; CIDEr's document
      frequencies are those of the whole set).
    - METEOR: METEOR's segment score (its corpus score pools statistics instead, so the segment mean differs).
    """
    return nlg_scores_and_reports(refs, hyps)[1]


def nlg_scores_and_reports(refs: Mapping[str, str], hyps: Mapping[str, str]
                           ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """`nlg_scores` (every metric) and `nlg_report_scores` from one run of each scorer, as a test evaluation needs
    both: BLEU's integer statistics are cooked once for the corpus score and the per-report rows, ROUGE-L and
    CIDEr return the corpus score with the per-report ones, METEOR's one call its corpus and segment scores, so
    nothing is scored twice (the same numbers)."""
    gts, res = _prepare(refs, hyps)
    statistics = bleu_statistics(gts, res)  # BLEU's integer statistics, cooked once for both halves
    corpus = _bleu_scores(corpus_bleu(statistics))
    rouge, rouge_each = rouge_l(gts, res)
    out: dict[str, dict[str, float]] = {}
    for key, counts, r in zip(gts, statistics.tolist(), rouge_each, strict=True):
        out[key] = {**dict(zip(BLEU_COUNT_KEYS, map(float, counts), strict=True)), "ROUGE_L": float(r)}
    if any(text.split() for texts in gts.values() for text in texts):
        cider, cider_each = cider_d(gts, res)
    else:
        cider, cider_each = 0.0, np.zeros(len(gts))  # see the module docstring
    meteor, meteor_each = _METEOR.score(_normalized(gts), _normalized(res), segments=True)
    for key, c, m in zip(gts, cider_each, meteor_each, strict=True):
        out[key].update(CIDEr=float(c), METEOR=float(m))
    corpus.update(METEOR=meteor, ROUGE_L=float(rouge), CIDEr=float(cider))
    return corpus, out


def _check_metrics(metrics: Iterable[str] | None) -> tuple[str, ...]:
    if metrics is None:
        return NLG_METRICS
    chosen = tuple(metrics) if not isinstance(metrics, str) else (metrics,)
    unknown = sorted(set(chosen) - set(NLG_METRICS))
    if unknown:
        raise ValueError(f"unknown NLG metric(s) {unknown}; choose from {list(NLG_METRICS)}")
    if not chosen:
        raise ValueError("metrics is empty; pass None for all metrics")
    return chosen


def _prepare(refs: Mapping[str, str], hyps: Mapping[str, str]) -> tuple[dict, dict]:
    """pycocoevalcap's input format ({id: [text]}) of the raw strings, in the order of `refs`."""
    if set(refs) != set(hyps):
        only_refs = sorted(map(str, set(refs) - set(hyps)))[:5]
        only_hyps = sorted(map(str, set(hyps) - set(refs)))[:5]
        raise ValueError(
            "refs and hyps must have the same ids; "
            f"only in refs (first 5): {only_refs}, only in hyps (first 5): {only_hyps}"
        )
    if not refs:
        raise ValueError("nlg_scores needs at least one (reference, hypothesis) pair")
    for name, texts in (("refs", refs), ("hyps", hyps)):
        bad = next((key for key, text in texts.items() if not isinstance(text, str)), None)
        if bad is not None:
            raise TypeError(f"{name}[{bad!r}] must be a string, got {type(texts[bad]).__name__}")
    gts = {key: [refs[key]] for key in refs}
    res = {key: [hyps[key]] for key in refs}
    return gts, res


def _normalized(texts: dict) -> dict:
    """METEOR's copy of a pycocoevalcap input dict (see `meteor_safe_text`)."""
    return {key: [meteor_safe_text(text) for text in values] for key, values in texts.items()}


def _bleu(gts: dict, res: dict) -> dict[str, float]:
    # pycocoevalcap's Bleu(4).compute_score with the "closest" reference length (harness/scoring/coco_scores.py).
    return _bleu_scores(corpus_bleu(bleu_statistics(gts, res)))


def _bleu_scores(values: list[float]) -> dict[str, float]:
    return {f"BLEU_{n}": float(value) for n, value in enumerate(values, start=1)}


def _rouge(gts: dict, res: dict) -> float:
    return float(rouge_l(gts, res)[0])


def _cider(gts: dict, res: dict) -> float:
    if not any(text.split() for texts in gts.values() for text in texts):
        return 0.0  # pycocoevalcap raises here (empty document frequencies); see the module docstring
    return float(cider_d(gts, res)[0])


# SCORE lines sent before their replies are read (a chunk's stat replies, ~150 bytes each, stay well inside a
# 64 KiB pipe buffer, so the JVM never blocks on a full stdout while we are still writing).
METEOR_CHUNK = 128


def pipelined_meteor(scorer, gts: dict, res: dict, chunk: int = METEOR_CHUNK) -> tuple[float, list[float]]:
    """pycocoevalcap `Meteor.compute_score(gts, res)` with its SCORE lines pipelined: the same lines to the same
    JVM and the same EVAL line, so the same numbers (tests/harness/scoring/test_evaluation.py compares them bit for
    bit), but `chunk` lines are written before their replies are read instead of one round trip per report. METEOR's
    own work is unchanged; the saving is the 4,000 waits of a test evaluation (0.72-0.83x of METEOR's time on
    4,000 reports: benchmarks/bench_eval_scoring.py)."""
    assert gts.keys() == res.keys()
    lines = []
    for key in gts:
        assert len(res[key]) == 1
        hypothesis = res[key][0].replace("|||", "").replace("  ", " ")  # as Meteor._stat
        lines.append(" ||| ".join(("SCORE", " ||| ".join(gts[key]), hypothesis)))
    process = scorer.meteor_p
    stats: list[str] = []
    with scorer.lock:
        for start in range(0, len(lines), chunk):
            part = lines[start:start + chunk]
            process.stdin.write("".join(f"{line}\n" for line in part).encode())
            process.stdin.flush()
            stats.extend(process.stdout.readline().decode().strip() for _ in part)
        process.stdin.write(("EVAL" + "".join(f" ||| {stat}" for stat in stats) + "\n").encode())
        process.stdin.flush()
        per_segment = [float(process.stdout.readline().strip()) for _ in lines]
        score = float(process.stdout.readline().strip())
    return score, per_segment


class _MeteorService:
    """The process's single pycocoevalcap `Meteor` (one JVM), made safe to call many times.

    pycocoevalcap's Meteor takes its own lock around each call and never releases it if the call raises
    (a dead JVM, an unparsable reply), after which every call, and its `__del__`, would block forever. We
    serialise calls with our own lock, and on any failure release its lock, kill the JVM and retry once
    with a fresh one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scorer = None
        self._owner_pid: int | None = None
        self._atexit_registered = False

    def scorer(self):
        """The live Meteor scorer of this process, started on first use."""
        with self._lock:
            return self._get()

    def score(self, gts: dict, res: dict, segments: bool = False):
        """The corpus score, or (corpus score, segment scores) when `segments`."""
        with self._lock:
            for attempt in range(2):
                scorer = self._get()
                try:
                    score, per_segment = pipelined_meteor(scorer, gts, res)
                    return (float(score), [float(x) for x in per_segment]) if segments else float(score)
                except (OSError, ValueError) as error:  # broken pipe, dead JVM, unparsable reply
                    self._discard()
                    if attempt == 1:
                        raise RuntimeError(f"METEOR failed twice: {error!r}") from error
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            self._discard()

    def _get(self):
        if self._scorer is not None and self._owner_pid != os.getpid():
            # Forked child: the JVM and its pipes belong to the parent. Keep the inherited object alive
            # so that its __del__ (which kills the JVM) never runs here, and start our own.
            _INHERITED_SCORERS.append(self._scorer)
            self._scorer, self._owner_pid = None, None
        if self._scorer is None:
            # lazy: start-up cost (pycocoevalcap)
            from pycocoevalcap.meteor.meteor import Meteor

            if shutil.which("java") is None:
                raise RuntimeError("METEOR (pycocoevalcap) runs a Java program, and no 'java' is on PATH: install a "
                                   "Java runtime (e.g. apt-get install default-jre-headless). METEOR is one of the "
                                   "reported metrics and part of the RL validation score (Eq. 10)")
            self._scorer, self._owner_pid = Meteor(), os.getpid()
            if not self._atexit_registered:
                atexit.register(self.close)
                self._atexit_registered = True
        return self._scorer

    def _discard(self) -> None:
        scorer, self._scorer = self._scorer, None
        if scorer is None:
            return
        if self._owner_pid != os.getpid():
            _INHERITED_SCORERS.append(scorer)  # the parent's JVM: not ours to stop
            return
        if scorer.lock.locked():
            scorer.lock.release()  # left held by a failed call; its __del__ would deadlock otherwise
        process = scorer.meteor_p
        for action in (process.stdin.close, process.kill, process.wait):
            try:
                action()
            except OSError:
                pass


_INHERITED_SCORERS: list = []
_METEOR = _MeteorService()


def meteor_scorer():
    """The pycocoevalcap Meteor instance this process reuses (for tests and diagnostics)."""
    return _METEOR.scorer()


# ---------------------------------------------------------------------------------------------------- CE


def ce_scores(hyp_labels: np.ndarray, ref_labels: np.ndarray) -> dict:
    """Clinical-efficacy precision/recall/F1 of predicted labels against reference labels, both [N, 14].

    Returns `ce_{micro,macro,example}_{precision,recall,f1}`, `ce_num_examples` and
    `per_label: {observation: {precision, recall, f1, support}}` (support = reference positives).
    """
    hyp = _binarize(hyp_labels, "hyp_labels")
    ref = _binarize(ref_labels, "ref_labels")
    if hyp.shape != ref.shape:
        raise ValueError(f"hyp_labels {hyp.shape} and ref_labels {ref.shape} must have the same shape")
    tp = (hyp & ref).astype(np.int64)
    fp = (hyp & ~ref).astype(np.int64)
    fn = (~hyp & ref).astype(np.int64)

    scores: dict = {}
    scores.update(_prf("micro", *(np.array([x.sum()]) for x in (tp, fp, fn))))
    per_label = _prf_arrays(tp.sum(0), fp.sum(0), fn.sum(0))
    scores.update({f"ce_macro_{name}": float(values.mean()) for name, values in per_label.items()})
    scores.update(_prf("example", tp.sum(1), fp.sum(1), fn.sum(1)))
    scores["ce_num_examples"] = int(hyp.shape[0])
    support = ref.sum(0)
    scores["per_label"] = {
        name: {
            "precision": float(per_label["precision"][i]),
            "recall": float(per_label["recall"][i]),
            "f1": float(per_label["f1"][i]),
            "support": int(support[i]),
        }
        for i, name in enumerate(OBSERVATIONS)
    }
    return scores


def _binarize(labels: np.ndarray, name: str) -> np.ndarray:
    """Boolean positives; NaN, 0 and -1 are all 'not positive'."""
    array = np.asarray(labels, dtype=np.float64)
    if array.ndim != 2 or array.shape[1] != NUM_OBSERVATIONS:
        raise ValueError(f"{name} must have shape [N, {NUM_OBSERVATIONS}], got {tuple(array.shape)}")
    if array.shape[0] == 0:
        raise ValueError(f"{name} has no samples")
    return array == 1.0  # NaN == 1 is False


def _prf(prefix: str, tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> dict[str, float]:
    """Mean over rows of precision/recall/F1 (one row for micro, one per sample for example-based)."""
    values = _prf_arrays(tp, fp, fn)
    return {f"ce_{prefix}_{name}": float(v.mean()) for name, v in values.items()}


def _prf_arrays(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "precision": _safe_ratio(tp, tp + fp),
        "recall": _safe_ratio(tp, tp + fn),
        "f1": _safe_ratio(2 * tp, 2 * tp + fp + fn),
    }


def _safe_ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """Elementwise numerator / denominator with 0 / 0 = 0."""
    numerator = np.asarray(numerator, dtype=np.float64)
    denominator = np.asarray(denominator, dtype=np.float64)
    out = np.zeros_like(numerator)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out


def label_with(backend: str, reports: list[str], chexbert_mode: str = "paper") -> np.ndarray:
    """[N, 14] labels from the chosen CE backend (1 pos, 0 neg, -1 uncertain, nan blank)."""
    if backend == "chexbert":
        return label_reports_chexbert(reports, mode=chexbert_mode)
    # lazy: tests replace label_reports at its source, read at call time
    from rewards.chexpert import label_reports

    return label_reports(reports)


def findings_scores(hyp_reports: list[str], ref_labels: np.ndarray, backend: str = "rules",
                    chexbert_mode: str = "paper", hyp_labels: np.ndarray | None = None) -> dict:
    """Findings of generated reports (labeled by `backend`) against the references' labels, positive = 1.

    findings_acc: share of (sample, observation) pairs where presence agrees; findings_exact: share of
    samples whose 14 presence flags all agree; plus the CE micro/macro/example P/R/F1 and per-label scores.
    `hyp_labels`: the hypotheses' labels when already computed (else labelled here).
    """
    hyp = label_with(backend, hyp_reports, chexbert_mode) if hyp_labels is None else hyp_labels
    hp, rp = hyp == 1, ref_labels == 1
    out = {"findings_acc": float((hp == rp).mean()), "findings_exact": float((hp == rp).all(axis=1).mean()),
           "ce_backend": backend}
    out.update(ce_scores(hyp, ref_labels))
    return out
