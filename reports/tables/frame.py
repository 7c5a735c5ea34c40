"""The long results frame: one row per arm x metric with our numbers, the published ones, the paired test
and the within-noise flag; which published table and rows an experiment is compared with; the MDD per metric."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from harness.runs.schema import IndexKey
from reports.bootstrap import DEFAULT_B, paired_bootstrap
from reports.experiment import Experiment, is_number
from reports.protocol import arm_tested_at, protocol_issue
from reports.published import CE_METRICS, NLG_METRICS, SHORT_NAMES, load_published, our_metric_key
from reports.stats import ALPHA, POWER, holm, mdd_normal, mdd_paired_t, paired_comparison, summarize

DEFAULT_METRICS = ("BLEU_1", "BLEU_2", "BLEU_3", "BLEU_4", "METEOR", "ROUGE_L", "CIDEr", "ce_micro_precision",
                   "ce_micro_recall", "ce_micro_f1", "radgraph_partial", "entity_f1", "findings_acc", "gold_f1",
                   "gold_exact", "labeler_gold_disagree")
NOISE_MARK = "≈"
MDD_LABEL = f"MDD (alpha {ALPHA}, power {POWER})"


def column_name(metric: str, ce_average: str = "micro") -> str:
    """Short display name of one of our metric keys (paper names where the paper has the metric)."""
    for pub in NLG_METRICS + CE_METRICS:
        if our_metric_key(pub, ce_average) == metric:
            return SHORT_NAMES[pub]
    return SHORT_NAMES.get(metric, metric)


@dataclass
class TableSpec:
    """What one results table shows."""

    metrics: list[str]
    published: str | None = None  # published-table id (reports/published.json)
    dataset: str | None = None  # published rows of this data set
    ce_average: str = "micro"
    B: int = DEFAULT_B  # resamples of the paired bootstrap over test reports (single-seed comparisons)
    seed: int = 0
    digits: int = 4
    notes: list[str] = field(default_factory=list)
    ours_dataset: str | None = None  # the experiment's data set: paper rows of another one are not beside ours

    @property
    def comparable(self) -> bool:
        """Whether the published rows are on our data set (then they may sit beside our rows)."""
        return self.ours_dataset is None or self.dataset == self.ours_dataset


DATASET_NAMES = {"mimic_cxr": "MIMIC-CXR", "iu_xray": "IU-Xray", "phantom": "phantom (synthetic)"}


def dataset_name(dataset: str | None) -> str:
    return DATASET_NAMES.get(dataset, str(dataset))


def published_id(exp: Experiment) -> str | None:
    """The published table the experiment reproduces, if reports/published.json has it."""
    tables = load_published()["tables"]
    return exp.reproduces if exp.reproduces in tables else None


def published_dataset(exp: Experiment, table: str | None) -> str | None:
    """Which data set's published rows to show: ours if the table has it, else MIMIC-CXR (REVA-PO's ablations)."""
    if table is None:
        return None
    rows = load_published()["tables"][table]["rows"]
    have = {r.get("dataset") for r in rows}
    ds = exp.dataset
    if ds in have:
        return ds
    if exp.index.get(IndexKey.PUBLISHED_DATASET) in have:  # a study on synthetic data names the table it stands for
        return exp.index[IndexKey.PUBLISHED_DATASET]
    return "mimic_cxr" if "mimic_cxr" in have else next(iter(have), None)


def default_spec(exp: Experiment, metrics: list[str] | None = None, ce_average: str = "micro",
                 B: int = DEFAULT_B, seed: int = 0) -> TableSpec:
    """The published table's metrics (mapped to our keys) when the study reproduces one, plus our extra
    metrics; only metrics that some run or the published table has are kept."""
    table = published_id(exp)
    if metrics is None:
        metrics = list(DEFAULT_METRICS)
        if table is not None:
            pub = [our_metric_key(m, ce_average) for m in load_published()["tables"][table]["metrics"]]
            metrics = pub + [m for m in DEFAULT_METRICS if m not in pub]
    have = {k for r in exp.runs for k, v in r.scores.items() if is_number(v)}
    pub_have = set()
    if table is not None:
        for m in load_published()["tables"][table]["metrics"]:
            pub_have.add(our_metric_key(m, ce_average))
    metrics = [m for m in metrics if m in have or m in pub_have]
    return TableSpec(metrics, table, published_dataset(exp, table), ce_average, B, seed, ours_dataset=exp.dataset)


def published_lookup(spec: TableSpec) -> tuple[list[dict], str | None, float]:
    """The published table's rows of the shown data set, its source and its number scale."""
    if spec.published is None:
        return [], None, 1.0
    t = load_published()["tables"][spec.published]
    rows = [r for r in t["rows"] if spec.dataset is None or r.get("dataset") == spec.dataset]
    return rows, t["source"], float(t.get("scale", 1.0))


MATCH_FACTORS = ("regularizer", "reference", "reward")


def match_published_row(exp: Experiment, arm, rows: list[dict]) -> tuple[dict | None, str | None]:
    """(the paper row that sits beside `arm`, None) or (None, why the named row does not).

    The row is the one named by the arm's `published_row` (or its name) among the paper's `arm` ids and row
    labels; it is placed only when its data set is the experiment's and every factor the row states
    (regularizer, reference, reward; published.json `factors`) equals the arm's."""
    names = [n for n in (arm.published_row, arm.name) if n]
    row = next((r for n in names for r in rows if n in (r.get("arm"), r.get("label"))), None)
    if row is None:
        return None, None
    label = row.get("label") or row.get("arm")
    if row.get("dataset") != exp.dataset:
        return None, f"{label!r}: data set {row.get('dataset')} ≠ ours ({exp.dataset})"
    ours = exp.factors(arm.name)
    for key in MATCH_FACTORS:
        if key in (row.get("factors") or {}) and ours.get(key) != row["factors"][key]:
            return None, f"{label!r}: {key} {row['factors'][key]} ≠ ours ({ours.get(key)})"
    return row, None


def published_value(row: dict | None, metric: str, spec: TableSpec, scale: float) -> float | None:
    if row is None:
        return None
    for pub in row:
        if pub in NLG_METRICS + CE_METRICS and our_metric_key(pub, spec.ce_average) == metric:
            v = row[pub]
            return None if v is None else float(v) * scale
    return None


def _single_seed_bootstrap(exp: Experiment, arm: str, baseline: str, seed: int, spec: TableSpec) -> dict:
    """metric -> BootResult of arm - baseline over the test reports of their one shared seed ({} if either
    run wrote no per-report outputs)."""
    runs = {r.arm: r for r in (*exp.runs_of(arm), *exp.runs_of(baseline)) if r.seed == seed}
    a, r = runs.get(arm), runs.get(baseline)
    if a is None or r is None or a.report_data is None or r.report_data is None:
        return {}
    return paired_bootstrap(a.report_data, r.report_data, spec.metrics, spec.B, spec.seed)


def results_frame(exp: Experiment, spec: TableSpec | None = None) -> pd.DataFrame:
    """Long frame: one row per (arm, metric) with our mean/interval/n, the published value and the paired
    comparison with the baseline arm (Holm-Bonferroni over all comparisons of the table)."""
    spec = spec or default_spec(exp)
    pub_rows, source, scale = published_lookup(spec)
    baseline = exp.baseline_arm if exp.baseline_arm in {a.name for a in exp.arms} else None
    records = []
    for arm in exp.arms:
        prow, unmatched = match_published_row(exp, arm, pub_rows)
        boot = None
        issue = protocol_issue(exp, arm.name, baseline) if baseline is not None and arm.name != baseline else None
        tested = arm_tested_at(exp, arm.name)
        for metric in spec.metrics:
            vals = exp.values(arm.name, metric)
            s = summarize(list(vals.values()))
            rec = {"arm": arm.name, "label": arm.label, "metric": metric,
                   "column": column_name(metric, spec.ce_average), "mean": s.mean, "ci_lo": s.lo, "ci_hi": s.hi,
                   "std": s.std, "n": s.n, "seeds": " ".join(str(k) for k in sorted(vals)),
                   "published": published_value(prow, metric, spec, scale),
                   "published_row": (prow or {}).get("label"), "published_source": source if prow else None,
                   "published_unmatched": unmatched, "tested_at": tested, "protocol_issue": issue,
                   "baseline_arm": baseline, "diff": math.nan, "diff_lo": math.nan, "diff_hi": math.nan,
                   "p_value": math.nan, "p_holm": math.nan, "test": None, "n_paired": 0, "n_reports": 0,
                   "sd_diff": math.nan, "se_diff": math.nan, "within_noise": None,
                   "report_interval_excludes_0": None}
            if issue is not None:
                rec.update(test=f"refused: {issue}")
            elif baseline is not None and arm.name != baseline:
                c = paired_comparison(vals, exp.values(baseline, metric))
                rec.update(diff=c.diff, diff_lo=c.lo, diff_hi=c.hi, p_value=c.p, test=c.test, n_paired=c.n,
                           sd_diff=c.sd)
                if c.n == 1:
                    if boot is None:
                        boot = _single_seed_bootstrap(exp, arm.name, baseline, c.seeds[0], spec)
                    b = boot.get(metric)
                    if b is not None:
                        rec.update(diff=b.diff, diff_lo=b.lo, diff_hi=b.hi, p_value=b.p, n_reports=b.n_reports,
                                   se_diff=b.se, test=f"paired bootstrap over test reports (B = {b.B})")
            records.append(rec)
    df = pd.DataFrame.from_records(records)
    if len(df):
        df["p_holm"] = holm(df.p_value.to_numpy(dtype=float))
        # within_noise: over >= 2 seeds only (issue 48: one seed's report bootstrap measures test-split noise
        # alone, so a flag from it is no statement about seeds); one-seed rows say what their interval shows
        df["within_noise"] = [None if not math.isfinite(p) or n < 2 else bool(p >= ALPHA)
                              for p, n in zip(df.p_holm, df.n_paired, strict=True)]
        df["report_interval_excludes_0"] = [
            None if n_rep == 0 or not math.isfinite(lo) else bool(lo > 0 or hi < 0)
            for n_rep, lo, hi in zip(df.n_reports, df.diff_lo, df.diff_hi, strict=True)]
    return df


def n_comparisons(df: pd.DataFrame) -> int:
    """How many comparisons the table's Holm-Bonferroni correction runs over."""
    return int(df.p_value.notna().sum()) if len(df) else 0


def mdd_by_metric(df: pd.DataFrame) -> dict[str, tuple[float, str]]:
    """metric -> (minimum detectable difference at alpha 0.05 / power 0.8, what it rests on).

    Over seeds: the paired t-test's MDD at the largest paired n, with the pooled std of the paired differences
    (root mean square over the comparisons); without comparisons, sqrt(2) x the pooled std of the arms (as if
    unpaired). Over reports (single-seed tables): 2.80 x the pooled bootstrap standard error of the difference.
    The MDD is per comparison; Holm-Bonferroni over m comparisons raises it for all but the strongest."""
    out = {}
    for metric, sub in df.groupby("metric", sort=False):
        seeds = sub[(sub.n_paired >= 2) & sub.sd_diff.notna()]
        boot = sub[sub.se_diff.notna()]
        if len(seeds):
            n = int(seeds.n_paired.max())
            sd = float((seeds.sd_diff ** 2).mean() ** 0.5)
            out[metric] = (mdd_paired_t(n, sd), f"seeds n={n}")
        elif len(boot):
            se = float((boot.se_diff ** 2).mean() ** 0.5)
            out[metric] = (mdd_normal(se), f"reports n={int(boot.n_reports.max())}")
        elif (sub.n >= 2).any():
            arms = sub[sub.n >= 2]
            n = int(arms.n.max())
            out[metric] = (mdd_paired_t(n, float(2 * (arms["std"] ** 2).mean()) ** 0.5), f"arm spread n={n}")
    return out
