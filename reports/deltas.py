"""REVA-PO Table 3's ΔNLG / ΔCE: the relative change of a row's summed metric group against the stage-1 (S1) row.

ΔNLG = sum(B-1, B-2, B-3, B-4, R-L, MTR) / the same sum of S1 - 1; ΔCE likewise over (P, R, F1, RG). This is the
paper's definition ("gains over Stage 1"): it reproduces every printed Δ of Table 3 from the printed numbers to
the 0.1% it rounds to (tests/reports/test_deltas.py). Keys are the published table's (reports/published.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

NLG_GROUP = ("BLEU_1", "BLEU_2", "BLEU_3", "BLEU_4", "ROUGE_L", "METEOR")
CE_GROUP = ("P", "R", "F1", "RG")


def group_delta(row: Mapping, base: Mapping, keys: Sequence[str]) -> float:
    """sum(row[k]) / sum(base[k]) - 1 over `keys`; NaN when a value is missing in either row."""
    values = [(row.get(k), base.get(k)) for k in keys]
    if not keys or any(not _finite(a) or not _finite(b) for a, b in values):
        return math.nan
    denominator = sum(float(b) for _, b in values)
    return sum(float(a) for a, _ in values) / denominator - 1 if denominator else math.nan


def format_delta(delta: float) -> str:
    """As the paper prints it: signed percent with one decimal."""
    return "–" if not math.isfinite(delta) else f"{100 * delta:+.1f}%"


def _finite(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(float(v))
