"""Within one seed: the paired bootstrap over test reports.

Both arms decoded the same test reports. A resample draws N report ids with replacement (one multiset per
resample, the same for both arms), rescores each arm's corpus metrics on it and takes the difference. Corpus
metrics are never averaged per report where the corpus score is not a mean: they are recomputed from sums of
per-report sufficient statistics, so one matrix product `W @ X` (W: [B, N] resample multiplicities) rescores
all resamples at once:

- BLEU-n: pycocoevalcap's corpus formula on the summed clipped matches, hypothesis n-grams, hypothesis and
  closest-reference lengths (`harness.scoring.evaluation.nlg_report_scores`); equal to `nlg_scores` on the full set.
- CE micro P/R/F1: from summed TP/FP/FN; macro: per label from summed counts, then the mean over labels;
  example-based: the mean of per-report values (as `harness.scoring.evaluation.ce_scores`).
- ROUGE-L, entity F1, findings accuracy: means of per-report values (their corpus definitions).
- Gold (the phantom's gold reader against the image truth, harness/data/phantom/gold_reader.py): micro P/R/F1
  from summed TP/FP/FN of reported presence (stated or hedged) against what was drawn; `gold_exact` and
  `gold_acc`: means of per-report values.
- CIDEr: the mean of per-report CIDEr-D with the document frequencies of the full test set held fixed.
- METEOR: the mean of METEOR segment scores (METEOR's corpus score pools its statistics; the segment mean
  is what is resampled, and its difference is what the interval and p describe).

Interval: the percentile interval of the B resampled differences. p-value (two-sided): the shifted-null
bootstrap test, p = (1 + #{|d*_b - d| >= |d|}) / (B + 1), where d is the full-set difference.
`se` is the std of the resampled differences; its minimum detectable difference is `stats.mdd_normal(se)`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from harness.constants import BLEU_COUNT_KEYS, NUM_OBSERVATIONS

DEFAULT_B = 2000
MEAN_METRICS = ("ROUGE_L", "CIDEr", "METEOR", "entity_f1", "findings_acc")
CE_METRICS = tuple(f"ce_{avg}_{m}" for avg in ("micro", "macro", "example") for m in ("precision", "recall", "f1"))
BLEU_METRICS = ("BLEU_1", "BLEU_2", "BLEU_3", "BLEU_4")
GOLD_METRICS = ("gold_precision", "gold_recall", "gold_f1", "gold_exact", "gold_acc")
NOTES = {"METEOR": "METEOR segment mean", "CIDEr": "document frequencies of the full set"}


@dataclass
class ReportData:
    """Per-report sufficient statistics of one arm's test decoding (rows in `ids` order)."""

    ids: list[str]
    bleu: np.ndarray | None = None  # [N, 10] in BLEU_COUNT_KEYS order
    means: dict[str, np.ndarray] | None = None  # metric -> [N] per-report values (MEAN_METRICS)
    hyp_pos: np.ndarray | None = None  # [N, 14] bool: label == 1 in the hypothesis
    ref_pos: np.ndarray | None = None  # [N, 14] bool
    gold_pos: np.ndarray | None = None  # [N, 14] bool: the gold reader's reported presence (stated or hedged)
    truth_pos: np.ndarray | None = None  # [N, 14] bool: drawn (the phantom's image truth)

    def metrics(self) -> list[str]:
        out = list(BLEU_METRICS) if self.bleu is not None else []
        out += [m for m in MEAN_METRICS if m in (self.means or {})]
        if self.hyp_pos is not None and self.ref_pos is not None:
            out += list(CE_METRICS) + ["findings_acc"]
        if self.gold_pos is not None and self.truth_pos is not None:
            out += list(GOLD_METRICS)
        return list(dict.fromkeys(out))

    def take(self, ids: Sequence[str]) -> ReportData:
        """The rows of `ids`, in that order."""
        pos = {k: i for i, k in enumerate(self.ids)}
        idx = np.array([pos[k] for k in ids], dtype=np.int64)
        return ReportData(list(ids), None if self.bleu is None else self.bleu[idx],
                          {k: v[idx] for k, v in (self.means or {}).items()},
                          None if self.hyp_pos is None else self.hyp_pos[idx],
                          None if self.ref_pos is None else self.ref_pos[idx],
                          None if self.gold_pos is None else self.gold_pos[idx],
                          None if self.truth_pos is None else self.truth_pos[idx])


def _matrix(rows: list, name: str, source: str) -> np.ndarray:
    arr = np.array([[math.nan if v is None else float(v) for v in r] for r in rows], dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != NUM_OBSERVATIONS:
        raise ValueError(f"{source}: field '{name}' must hold {NUM_OBSERVATIONS} labels per report, got shape "
                         f"{arr.shape}")
    return arr


def _positives(rows: list, name: str, source: str) -> np.ndarray:
    return _matrix(rows, name, source) == 1.0


def report_data_from_rows(rows: list[dict], source: str = "predictions") -> ReportData | None:
    """ReportData from predictions rows (harness/stages/evaluate.py): `id`, `nlg` (per-report NLG statistics),
    `hyp_labels` / `ref_labels` (14 labels, null = not mentioned), `entity_f1`. Rows without them give None."""
    if not rows or not all("id" in r for r in rows):
        return None
    ids = [str(r["id"]) for r in rows]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{source}: report ids are not unique")
    data = ReportData(ids, means={})
    if all(isinstance(r.get("nlg"), dict) for r in rows):
        try:
            data.bleu = np.array([[float(r["nlg"][k]) for k in BLEU_COUNT_KEYS] for r in rows])
        except KeyError as error:
            raise ValueError(f"{source}: field 'nlg' lacks {error.args[0]!r}") from error
        for m in ("ROUGE_L", "CIDEr", "METEOR"):
            if all(m in r["nlg"] for r in rows):
                data.means[m] = np.array([float(r["nlg"][m]) for r in rows])
    if all("entity_f1" in r for r in rows):
        data.means["entity_f1"] = np.array([float(r["entity_f1"]) for r in rows])
    if all("hyp_labels" in r and "ref_labels" in r for r in rows):
        data.hyp_pos = _positives([r["hyp_labels"] for r in rows], "hyp_labels", source)
        data.ref_pos = _positives([r["ref_labels"] for r in rows], "ref_labels", source)
    if all("gold_labels" in r and "present" in r for r in rows):
        gold = _matrix([r["gold_labels"] for r in rows], "gold_labels", source)
        data.gold_pos = (gold == 1.0) | (gold == -1.0)
        data.truth_pos = _matrix([r["present"] for r in rows], "present", source) == 1.0
    return data if data.metrics() else None


# ------------------------------------------------------------------------------------------- corpus scores


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    out = np.zeros(np.broadcast(num, den).shape)
    np.divide(num, den, out=out, where=den > 0)
    return out


def _prf(tp, fp, fn) -> dict[str, np.ndarray]:
    return {"precision": _ratio(tp, tp + fp), "recall": _ratio(tp, tp + fn), "f1": _ratio(2 * tp, 2 * tp + fp + fn)}


def bleu_from_counts(sums: np.ndarray) -> np.ndarray:
    """[..., 4] corpus BLEU-1..4 from summed counts [..., 10] (BLEU_COUNT_KEYS order), pycocoevalcap's formula
    (including its tiny / small guards and the brevity penalty on total lengths)."""
    tiny, small = 1e-15, 1e-9
    correct, guess = sums[..., 0:4], sums[..., 4:8]
    testlen, reflen = sums[..., 8], sums[..., 9]
    prod = np.cumprod((correct + tiny) / (guess + small), axis=-1)
    bleu = prod ** (1.0 / np.arange(1, 5))
    ratio = (testlen + tiny) / (reflen + small)
    penalty = np.where(ratio < 1, np.exp(1 - 1 / np.minimum(ratio, 1.0)), 1.0)
    return bleu * penalty[..., None]


def corpus_scores(data: ReportData, weights: np.ndarray, metrics: Iterable[str]) -> dict[str, np.ndarray]:
    """metric -> [B] corpus scores of the B weighted report sets (weights: [B, N] multiplicities, rows sum to
    the set size; a row of ones is the full set)."""
    w = np.asarray(weights, dtype=np.float64)
    total = w.sum(axis=1)
    wanted = list(metrics)
    out: dict[str, np.ndarray] = {}
    if any(m in BLEU_METRICS for m in wanted):
        bleu = bleu_from_counts(w @ data.bleu)
        for k, m in enumerate(BLEU_METRICS):
            out[m] = bleu[:, k]
    if any(m in CE_METRICS for m in wanted):
        hp, rp = data.hyp_pos, data.ref_pos
        tp, fp, fn = (hp & rp).astype(float), (hp & ~rp).astype(float), (~hp & rp).astype(float)
        for name, v in _prf(w @ tp.sum(1), w @ fp.sum(1), w @ fn.sum(1)).items():
            out[f"ce_micro_{name}"] = v
        for name, v in _prf(w @ tp, w @ fp, w @ fn).items():
            out[f"ce_macro_{name}"] = v.mean(axis=1)
        for name, v in _prf(tp.sum(1), fp.sum(1), fn.sum(1)).items():
            out[f"ce_example_{name}"] = (w @ v) / total
    if any(m in GOLD_METRICS for m in wanted):
        hp, tp_ = data.gold_pos, data.truth_pos
        tp, fp, fn = (hp & tp_).astype(float), (hp & ~tp_).astype(float), (~hp & tp_).astype(float)
        for name, v in _prf(w @ tp.sum(1), w @ fp.sum(1), w @ fn.sum(1)).items():
            out[f"gold_{name}"] = v
        out["gold_exact"] = (w @ (hp == tp_).all(axis=1).astype(float)) / total
        out["gold_acc"] = (w @ (hp == tp_).mean(axis=1)) / total
    means = dict(data.means or {})
    if "findings_acc" not in means and data.hyp_pos is not None and data.ref_pos is not None:
        means["findings_acc"] = (data.hyp_pos == data.ref_pos).mean(axis=1)
    for m in wanted:
        if m in means:
            out[m] = (w @ means[m]) / total
    missing = [m for m in wanted if m not in out]
    if missing:
        raise KeyError(f"no per-report data for {missing}")
    return {m: out[m] for m in wanted}


@lru_cache(maxsize=4)
def resample_weights(n: int, B: int = DEFAULT_B, seed: int = 0) -> np.ndarray:
    """[B, n] multiplicities of n ids drawn with replacement, B times (seeded; cached and read-only, so every
    comparison of a table resamples the same report ids)."""
    if B < 1 or n < 1:
        raise ValueError(f"need B >= 1 and n >= 1, got B={B}, n={n}")
    idx = np.random.default_rng(seed).integers(0, n, size=(B, n))
    flat = (idx + np.arange(B)[:, None] * n).ravel()
    weights = np.bincount(flat, minlength=B * n).reshape(B, n).astype(np.float64)
    weights.setflags(write=False)
    return weights


@dataclass
class BootResult:
    metric: str
    n_reports: int
    diff: float  # full-set arm - baseline
    lo: float
    hi: float
    p: float
    se: float
    B: int
    note: str = ""


def paired_bootstrap(arm: ReportData, baseline: ReportData, metrics: Iterable[str] | None = None,
                     B: int = DEFAULT_B, seed: int = 0, level: float = 0.95,
                     weights: np.ndarray | None = None) -> dict[str, BootResult]:
    """Paired bootstrap of arm - baseline over their shared report ids (see the module docstring)."""
    ids = [k for k in baseline.ids if k in set(arm.ids)]
    if not ids:
        raise ValueError("the two arms share no test report id")
    a, r = arm.take(ids), baseline.take(ids)
    have = set(a.metrics()) & set(r.metrics())
    wanted = [m for m in (metrics or a.metrics()) if m in have]
    w = resample_weights(len(ids), B, seed) if weights is None else np.asarray(weights, dtype=np.float64)
    full = np.ones((1, len(ids)))
    fa, fr = corpus_scores(a, full, wanted), corpus_scores(r, full, wanted)
    ba, br = corpus_scores(a, w, wanted), corpus_scores(r, w, wanted)
    out = {}
    q = (1 - level) / 2
    for m in wanted:
        d = float(fa[m][0] - fr[m][0])
        dist = ba[m] - br[m]
        lo, hi = np.quantile(dist, [q, 1 - q])
        tol = 1e-12 * max(1.0, abs(d))
        p = (1 + int(np.sum(np.abs(dist - d) >= abs(d) - tol))) / (w.shape[0] + 1)
        out[m] = BootResult(m, len(ids), d, float(lo), float(hi), min(1.0, p), float(dist.std(ddof=1)),
                            int(w.shape[0]), NOTES.get(m, ""))
    return out
