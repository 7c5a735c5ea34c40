"""Published numbers of the papers (facts, with their source table), read from `published.json`.

Tables: REVA-PO Tables 1-4 and S5, its Supp. A.3 probabilities, and MRG-R1's headline CE numbers as its
text states them. DiTPO/DEER's SFT+RL rows are not in the stored paper text, so none are copied (the JSON's
`missing` entry says so).

Metric keys in the JSON: BLEU_1..BLEU_4, ROUGE_L, METEOR; P, R, F1 (CheXpert precision / recall / F1 with
labels binarised, positive = 1); RG (RadGraph F1); P_sign, P_top1. `OUR_METRIC` maps them onto the keys of
this project's eval rows (`harness.scoring.evaluation`, `harness.stages.evaluate`). The papers do not say which
average their CheXpert P/R/F1 use; we compare with the micro average (pooled over samples x observations),
and `our_metric_key(..., ce_average=...)` picks another.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

PUBLISHED_JSON = Path(__file__).with_name("published.json")

NLG_METRICS = ("BLEU_1", "BLEU_2", "BLEU_3", "BLEU_4", "ROUGE_L", "METEOR")
CE_METRICS = ("P", "R", "F1", "RG")

# Short column names as the paper prints them.
SHORT_NAMES = {"BLEU_1": "B-1", "BLEU_2": "B-2", "BLEU_3": "B-3", "BLEU_4": "B-4", "ROUGE_L": "R-L",
               "METEOR": "MTR", "P": "P", "R": "R", "F1": "F1", "RG": "RG", "CIDEr": "CIDEr",
               "entity_f1": "EntF1", "findings_acc": "FindAcc", "gold_f1": "GoldF1", "gold_exact": "GoldEM",
               "labeler_gold_disagree": "LblGoldDis", "P_sign": "P_sign", "P_top1": "P_top1"}


def our_metric_key(published_key: str, ce_average: str = "micro", radgraph_level: str = "partial") -> str:
    """The key of this project's eval rows that a published metric is compared with."""
    if published_key in ("P", "R", "F1"):
        if ce_average not in ("micro", "macro", "example"):
            raise ValueError(f"ce_average must be micro, macro or example, got {ce_average!r}")
        return f"ce_{ce_average}_" + {"P": "precision", "R": "recall", "F1": "f1"}[published_key]
    if published_key == "RG":
        return f"radgraph_{radgraph_level}"
    return published_key


@lru_cache(maxsize=4)
def _load(path: str) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def load_published(path: str | Path | None = None) -> dict:
    """The whole published.json: {"papers", "tables": {name: {paper, source, caption, metrics, rows}}, ...}."""
    data = _load(str(path or PUBLISHED_JSON))
    return json.loads(json.dumps(data))  # a copy: callers may edit it


def published_table(name: str, dataset: str | None = None, path: str | Path | None = None) -> dict:
    """One table by id (e.g. "revapo_table4", "revapo_table_s5", "revapo_supp_a3", "mrg_r1"; the ids that
    studies name in `reproduces`), rows filtered to `dataset` if given."""
    tables = load_published(path)["tables"]
    if name not in tables:
        raise KeyError(f"no published table '{name}'; have: {', '.join(sorted(tables))}")
    table = tables[name]
    if dataset is not None:
        table["rows"] = [r for r in table["rows"] if r.get("dataset") == dataset]
    return table


def published_row(table: str, arm: str, dataset: str | None = None, path: str | Path | None = None) -> dict | None:
    """The published row of `table` whose `arm` or `label` is `arm` (a study arm's name or its `published_row`),
    or None."""
    for row in published_table(table, dataset, path)["rows"]:
        if row.get("arm") == arm or row.get("label") == arm:
            return row
    return None
