"""Tables from an experiment: our numbers (mean and 95% t-interval over seeds, n per cell) beside the
published ones, differences to the reference arm with a paired test and a within-noise flag.

`results_frame` builds one long pandas DataFrame (one row per arm x metric) holding every number; the
renderers lay it out wide, one row per arm ("ours") plus one row per matching published row ("paper"):
  - `to_markdown(...)`, `to_latex(...)` (booktabs), `to_csv(...)` (the long frame itself);
  - `differences_markdown(...)`: arm - reference per metric, with interval, p, Holm-adjusted p and the flag.
Cells read `mean [lo, hi]`; `≈` marks a non-reference arm whose difference to the reference arm is within
noise: Holm-Bonferroni-adjusted p (over every comparison of the table) >= 0.05. A comparison over >= 2 shared
seeds is the paired t-test (reports/stats.py); over one shared seed it is the paired bootstrap over test reports
(reports/bootstrap.py) when both runs wrote per-report outputs. The last row gives each metric's minimum
detectable difference (alpha 0.05, power 0.8) at the table's n. `n=k` is added to a cell whose n differs from
its arm's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.records_schema import IndexKey
from reports.bootstrap import DEFAULT_B, paired_bootstrap
from reports.deltas import CE_GROUP, NLG_GROUP, format_delta, group_delta
from reports.experiment import Experiment, is_number
from reports.protocol import arm_tested_at, protocol_issue
from reports.published import CE_METRICS, NLG_METRICS, SHORT_NAMES, load_published, our_metric_key
from reports.stats import ALPHA, POWER, holm, mdd_normal, mdd_paired_t, paired_comparison, summarize

DEFAULT_METRICS = ("BLEU_1", "BLEU_2", "BLEU_3", "BLEU_4", "METEOR", "ROUGE_L", "CIDEr", "ce_micro_precision",
                   "ce_micro_recall", "ce_micro_f1", "radgraph_partial", "entity_f1", "findings_acc")
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
    return TableSpec(metrics, table, published_dataset(exp, table), ce_average, B, seed)


def _published_lookup(spec: TableSpec) -> tuple[list[dict], str | None, float]:
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


def _published_value(row: dict | None, metric: str, spec: TableSpec, scale: float) -> float | None:
    if row is None:
        return None
    for pub in row:
        if pub in NLG_METRICS + CE_METRICS and our_metric_key(pub, spec.ce_average) == metric:
            v = row[pub]
            return None if v is None else float(v) * scale
    return None


def _single_seed_bootstrap(exp: Experiment, arm: str, ref: str, seed: int, spec: TableSpec) -> dict:
    """metric -> BootResult of arm - reference over the test reports of their one shared seed ({} if either
    run wrote no per-report outputs)."""
    runs = {r.arm: r for r in (*exp.runs_of(arm), *exp.runs_of(ref)) if r.seed == seed}
    a, r = runs.get(arm), runs.get(ref)
    if a is None or r is None or a.report_data is None or r.report_data is None:
        return {}
    return paired_bootstrap(a.report_data, r.report_data, spec.metrics, spec.B, spec.seed)


def results_frame(exp: Experiment, spec: TableSpec | None = None) -> pd.DataFrame:
    """Long frame: one row per (arm, metric) with our mean/interval/n, the published value and the paired
    comparison with the reference arm (Holm-Bonferroni over all comparisons of the table)."""
    spec = spec or default_spec(exp)
    pub_rows, source, scale = _published_lookup(spec)
    ref = exp.reference_arm if exp.reference_arm in {a.name for a in exp.arms} else None
    records = []
    for arm in exp.arms:
        prow, unmatched = match_published_row(exp, arm, pub_rows)
        boot = None
        issue = protocol_issue(exp, arm.name, ref) if ref is not None and arm.name != ref else None
        tested = arm_tested_at(exp, arm.name)
        for metric in spec.metrics:
            vals = exp.values(arm.name, metric)
            s = summarize(list(vals.values()))
            rec = {"arm": arm.name, "label": arm.label, "metric": metric,
                   "column": column_name(metric, spec.ce_average), "mean": s.mean, "ci_lo": s.lo, "ci_hi": s.hi,
                   "std": s.std, "n": s.n, "seeds": " ".join(str(k) for k in sorted(vals)),
                   "published": _published_value(prow, metric, spec, scale),
                   "published_row": (prow or {}).get("label"), "published_source": source if prow else None,
                   "published_unmatched": unmatched, "tested_at": tested, "protocol_issue": issue,
                   "reference_arm": ref, "diff": math.nan, "diff_lo": math.nan, "diff_hi": math.nan,
                   "p_value": math.nan, "p_holm": math.nan, "test": None, "n_paired": 0, "n_reports": 0,
                   "sd_diff": math.nan, "se_diff": math.nan, "within_noise": None}
            if issue is not None:
                rec.update(test=f"refused: {issue}")
            elif ref is not None and arm.name != ref:
                c = paired_comparison(vals, exp.values(ref, metric))
                rec.update(diff=c.diff, diff_lo=c.lo, diff_hi=c.hi, p_value=c.p, test=c.test, n_paired=c.n,
                           sd_diff=c.sd)
                if c.n == 1:
                    if boot is None:
                        boot = _single_seed_bootstrap(exp, arm.name, ref, c.seeds[0], spec)
                    b = boot.get(metric)
                    if b is not None:
                        rec.update(diff=b.diff, diff_lo=b.lo, diff_hi=b.hi, p_value=b.p, n_reports=b.n_reports,
                                   se_diff=b.se, test=f"paired bootstrap over test reports (B = {b.B})")
            records.append(rec)
    df = pd.DataFrame.from_records(records)
    if len(df):
        df["p_holm"] = holm(df.p_value.to_numpy(dtype=float))
        df["within_noise"] = [None if not math.isfinite(p) else bool(p >= ALPHA) for p in df.p_holm]
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


# ------------------------------------------------------------------------------------------------------
# Wide layouts


def _fmt(v, digits: int) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


def _fmt_p(p: float) -> str:
    return "–" if not math.isfinite(p) else (f"{p:.3f}" if p >= 0.01 else f"{p:.1e}")


def _arm_n(df: pd.DataFrame, arm: str) -> int:
    sub = df[df.arm == arm]
    return int(sub.n.max()) if len(sub) else 0


def _our_cell(rec, digits: int, arm_n: int, latex: bool = False) -> str:
    if rec.n == 0:
        return "–"
    cell = _fmt(rec["mean"], digits)
    if rec.n > 1:
        cell += f" [{_fmt(rec.ci_lo, digits)}, {_fmt(rec.ci_hi, digits)}]"
    if rec.n != arm_n:
        cell += f" (n={rec.n})"
    if rec.within_noise is True:
        cell += r" $\approx$" if latex else f" {NOISE_MARK}"
    return cell


DELTA_TABLES = ("revapo_table3",)  # published tables that print ΔNLG / ΔCE (reports/deltas.py)


def _stage1_arm(df: pd.DataFrame) -> str | None:
    """The arm Table 3's Δ columns are relative to: the one beside (or named) the paper's S1 row."""
    for arm, label, prow in zip(df.arm, df.label, df.published_row, strict=True):
        if prow == "S1" or str(arm).lower() == "s1" or label == "S1":
            return arm
    return None


def _our_deltas(df: pd.DataFrame, arm: str, base: str | None, spec: TableSpec) -> list[str]:
    """[ΔNLG, ΔCE] of our arm against our stage-1 arm (means over seeds); ΔCE without RG is marked `*`."""
    if base is None:
        return ["–", "–"]
    means = {a: dict(zip(sub.metric, sub["mean"], strict=True)) for a, sub in df.groupby("arm")}

    def keyed(a: str) -> dict:
        return {k: means[a].get(our_metric_key(k, spec.ce_average)) for k in (*NLG_GROUP, *CE_GROUP)}

    row, ref = keyed(arm), keyed(base)
    ce = group_delta(row, ref, CE_GROUP)
    mark = ""
    if not math.isfinite(ce):
        ce, mark = group_delta(row, ref, CE_GROUP[:3]), "*"
    return [format_delta(group_delta(row, ref, NLG_GROUP)), format_delta(ce) + (mark if math.isfinite(ce) else "")]


def wide_rows(df: pd.DataFrame, spec: TableSpec, latex: bool = False) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the wide table: per arm an "ours" row and, if published, a "paper" row."""
    metrics = list(dict.fromkeys(df.metric))
    cols = [df[df.metric == m].column.iloc[0] for m in metrics]
    deltas = spec.published in DELTA_TABLES
    header = ["Arm", "Source", "n", "Tested at"] + cols + (["ΔNLG", "ΔCE"] if deltas else [])
    base = _stage1_arm(df) if deltas else None
    pub_by_label = {r.get("label"): r for r in _published_lookup(spec)[0]}

    def paper_deltas(label) -> list[str]:
        r = pub_by_label.get(label) or {}
        return [r.get("delta_nlg") or "–", r.get("delta_ce") or "–"] if deltas else []

    rows = []
    pub_digits = 3 if spec.published != "mrg_r1" else 4
    for arm in dict.fromkeys(df.arm):
        sub = df[df.arm == arm].set_index("metric")
        label = sub.label.iloc[0]
        n = _arm_n(df, arm)
        ref = sub.reference_arm.iloc[0]
        tag = " (reference)" if arm == ref else ""
        rows.append([f"{label}{tag}", "ours", str(n), sub.tested_at.iloc[0]]
                    + [_our_cell(sub.loc[m], spec.digits, n, latex) for m in metrics]
                    + (_our_deltas(df, arm, base, spec) if deltas else []))
        if sub.published_source.notna().any():
            src = sub.published_source.dropna().iloc[0]
            prow = sub.published_row.dropna().iloc[0]
            rows.append([f"{prow}", f"paper: {src}", "–", "–"] + [_fmt(sub.loc[m]["published"], pub_digits)
                                                              for m in metrics] + paper_deltas(prow))
    rows += [r + paper_deltas(r[0]) for r in _paper_block(df, spec, metrics, pub_digits)]
    mdd = mdd_by_metric(df)
    if mdd:
        bases = sorted({b for _, b in mdd.values()})
        rows.append([MDD_LABEL, "; ".join(bases), "–", "–"] + [_fmt(mdd[m][0], spec.digits) if m in mdd else "–"
                                                          for m in metrics] + (["–", "–"] if deltas else []))
    return header, rows


def _paper_block(df: pd.DataFrame, spec: TableSpec, metrics: list[str], digits: int) -> list[list[str]]:
    """The shown paper rows that sit beside none of our arms, under the paper's own row names."""
    rows, source, scale = _published_lookup(spec)
    placed = set(df.published_row.dropna())
    out = []
    for r in rows:
        label = r.get("label") or r.get("arm")
        if label in placed:
            continue
        out.append([label, f"paper: {source}", "–", "–"] + [_fmt(_published_value(r, m, spec, scale), digits)
                                                       for m in metrics])
    return out


def notes(exp: Experiment, df: pd.DataFrame, spec: TableSpec) -> list[str]:
    """The statements every table carries: seeds, n, what a cell is, the test, the flag, the MDD, the sources."""
    seeds = sorted({int(s) for ss in df.seeds for s in str(ss).split() if s})
    ns = ", ".join(f"{a} {_arm_n(df, a)}" for a in dict.fromkeys(df.arm))
    n_reports = sorted({int(k) for k in df.n_reports if k})
    out = [f"Seeds: {', '.join(map(str, seeds)) or 'none'}; n (seeds with scores) per arm: {ns}. "
           f"Cells: mean over seeds [95% t-interval of the mean]; `(n=k)` marks a cell with fewer seeds than "
           f"its arm."]
    ref = exp.reference_arm
    if ref:
        tests = _tests(df)
        out.append(f"Reference arm: `{ref}`. Every comparison (arm - reference) is in the differences table with "
                   f"its interval and p: {'; '.join(tests) or 'none (no shared seed)'}"
                   + (f", over n = {', '.join(map(str, n_reports))} test reports" if n_reports else "")
                   + f". {NOISE_MARK} = within noise: p after Holm-Bonferroni over the {n_comparisons(df)} "
                   f"comparisons of this table >= {ALPHA}.")
    out.append("Tested at: the checkpoint each arm's test scores come from (RL: the step rl.select chose / the "
               "last step, and the rule; other arms: the end of their last stage), per seed when they differ.")
    refused = sorted({f"{a}: {i}" for a, i in zip(df.arm, df.protocol_issue, strict=True)
                      if isinstance(i, str)})
    if refused:
        out.append("Comparisons refused (arms not scored the same way as the reference arm): " + "; ".join(refused)
                   + ".")
    mdd = mdd_by_metric(df)
    if mdd:
        out.append(f"{MDD_LABEL}: the smallest true difference a single comparison detects with probability "
                   f"{POWER} at this table's n (seeds: paired t-test, pooled std of the paired differences; "
                   f"one seed: bootstrap standard error over test reports); a smaller difference marked "
                   f"{NOISE_MARK} is not ruled out.")
    if spec.published in DELTA_TABLES:
        out.append("ΔNLG / ΔCE: relative change of the summed NLG metrics (B-1..4, R-L, MTR) / CE metrics (P, R, "
                   "F1, RG) against the stage-1 row (ours: our S1 arm's means; paper: as printed); `*`: without RG "
                   "(RadGraph missing), over P, R, F1.")
    if spec.published:
        t = load_published()["tables"][spec.published]
        out.append(f"Paper rows: {t['source']} ({spec.dataset}; {t['caption']}) — published numbers under the "
                   f"paper's own row names, not rerun here; ours are on data set `{exp.dataset}`, preset "
                   f"`{exp.preset}`. A paper row sits right under one of our arms only when its data set and its "
                   f"regularizer, reference and reward all match that arm's; the others follow our rows. CheXpert "
                   f"P/R/F1 are compared with our {spec.ce_average}-averaged CE scores; RG with RadGraph F1 "
                   f"(partial) when its weights were available (else –).")
        unmatched = sorted({f"{a}: {u}" for a, u in zip(df.arm, df.published_unmatched, strict=True)
                            if isinstance(u, str)})  # pandas holds a missing reason as NaN, which is truthy
        if unmatched:
            out.append("Named paper rows not placed beside an arm: " + "; ".join(unmatched) + ".")
    return out + list(spec.notes)


def _tests(df: pd.DataFrame) -> list[str]:
    return sorted({str(t) for t in df.test.dropna() if not str(t).startswith(("none", "refused"))})


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in [header] + rows]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    return "\n".join(lines)


def to_markdown(exp: Experiment, df: pd.DataFrame, spec: TableSpec, title: str | None = None) -> str:
    header, rows = wide_rows(df, spec)
    parts = [f"### {title}\n" if title else "", _md_table(header, rows), ""]
    parts += [f"- {n}" for n in notes(exp, df, spec)]
    return "\n".join(parts).strip() + "\n"


_LATEX_ESC = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
              "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}", "–": "--"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_ESC.get(ch, ch) for ch in str(text))


def to_latex(exp: Experiment, df: pd.DataFrame, spec: TableSpec, caption: str | None = None,
             label: str | None = None) -> str:
    header, rows = wide_rows(df, spec, latex=True)

    def cell(c: str) -> str:
        # keep the $\approx$ mark as math, escape the rest
        mark = r" $\approx$"
        if c.endswith(mark):
            return latex_escape(c[: -len(mark)]) + mark
        return latex_escape(c)

    lines = [r"\begin{table}[t]", r"\centering", r"\scriptsize", r"\begin{tabular}{ll" + "r" * (len(header) - 2) + "}",
             r"\toprule", " & ".join(latex_escape(h) for h in header) + r" \\", r"\midrule"]
    lines += [" & ".join(cell(c) for c in r) + r" \\" for r in rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    cap = ((caption + " " if caption else "") + " ".join(notes(exp, df, spec))).replace("`", "")
    lines.append(r"\caption{" + latex_escape(cap).replace(latex_escape(NOISE_MARK), r"$\approx$") + "}")
    if label:
        lines.append(r"\label{" + label + "}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def to_csv(df: pd.DataFrame, path: str | Path | None = None) -> str:
    text = df.to_csv(index=False, float_format="%.6g")
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text


def differences_rows(df: pd.DataFrame, digits: int = 4) -> tuple[list[str], list[list[str]]]:
    """(header, rows): arm - reference per metric as `diff [lo, hi] p=… pH=… ≈`."""
    sub = df[df.reference_arm.notna() & (df.arm != df.reference_arm)]
    metrics = list(dict.fromkeys(df.metric))
    header = ["Arm", "n paired (seeds)", "n reports"] + [df[df.metric == m].column.iloc[0] for m in metrics]
    rows = []
    for arm in dict.fromkeys(sub.arm):
        a = sub[sub.arm == arm].set_index("metric")
        cells = []
        for m in metrics:
            r = a.loc[m]
            if str(r.test).startswith("refused"):
                cells.append("refused")
                continue
            if r.n_paired == 0:
                cells.append("–")
                continue
            c = f"{r['diff']:+.{digits}f}"
            if math.isfinite(r.diff_lo):
                c += f" [{r.diff_lo:+.{digits}f}, {r.diff_hi:+.{digits}f}]"
            if math.isfinite(r.p_value):
                c += f" p={_fmt_p(r.p_value)} pH={_fmt_p(r.p_holm)}"
            c += f" {NOISE_MARK}" if r.within_noise is True else (" (no test)" if r.within_noise is None else "")
            cells.append(c)
        n_rep = int(a.n_reports.max())
        rows.append([a.label.iloc[0], str(int(a.n_paired.max())), str(n_rep) if n_rep else "–"] + cells)
    return header, rows


DIFFERENCES_NOTE = (f"Cells: difference arm - reference [95% interval] p = two-sided p-value, pH = the same after "
                    f"Holm-Bonferroni over every comparison of the table; {NOISE_MARK}: pH >= {ALPHA} (within "
                    f"noise). Over >= 2 shared seeds: mean paired difference, t-interval, paired t-test (sign-flip "
                    f"permutation when all differences are equal). Over one shared seed: full-set difference, "
                    f"percentile interval and shifted-null p of the paired bootstrap over test reports (same "
                    f"resampled report ids for both arms, corpus metrics recomputed per resample; METEOR as the "
                    f"mean of its segment scores, CIDEr with the full set's document frequencies). (no test): one "
                    f"shared seed and no per-report outputs. refused: the two arms' test models were chosen by "
                    f"different rl.select rules or decoded with different settings (reports/protocol.py).")


def differences_markdown(exp: Experiment, df: pd.DataFrame, spec: TableSpec) -> str:
    if not exp.reference_arm or df.reference_arm.isna().all():
        return ""
    header, rows = differences_rows(df, spec.digits)
    if not rows:
        return ""
    tests = _tests(df)
    text = [f"### Differences to the reference arm `{exp.reference_arm}`\n", _md_table(header, rows), "",
            f"- {DIFFERENCES_NOTE} Tests used: {'; '.join(tests) or 'none'}."]
    return "\n".join(text) + "\n"


# ------------------------------------------------------------------------------------------------------
# Matrix layout (regularizer x reference, ...) for studies whose arms vary in two factors


def matrix_factors(exp: Experiment, min_fill: float = 0.75) -> tuple[str, str] | None:
    """The two factors a matrix study varies (each with >= 2 values across arms), if exactly two do and the
    arms fill at least `min_fill` of their grid (a reward list with one extra variant is not a matrix)."""
    facs = {a.name: exp.factors(a.name) for a in exp.arms}
    keys = [k for k in dict.fromkeys(k for f in facs.values() for k in f)
            if len({str(f.get(k)) for f in facs.values()}) >= 2 and all(k in f for f in facs.values())]
    if len(keys) != 2:
        return None
    cells = {(str(f[keys[0]]), str(f[keys[1]])) for f in facs.values()}
    size = len({c[0] for c in cells}) * len({c[1] for c in cells})
    return (keys[0], keys[1]) if len(cells) >= min_fill * size else None


def matrix_markdown(exp: Experiment, df: pd.DataFrame, metric: str, rows_by: str, cols_by: str,
                    digits: int = 4) -> str:
    facs = {a.name: exp.factors(a.name) for a in exp.arms}
    rvals = list(dict.fromkeys(str(f[rows_by]) for f in facs.values()))
    cvals = list(dict.fromkeys(str(f[cols_by]) for f in facs.values()))
    sub = df[df.metric == metric].set_index("arm")
    grid = []
    for rv in rvals:
        line = [rv]
        for cv in cvals:
            arms = [a for a, f in facs.items() if str(f[rows_by]) == rv and str(f[cols_by]) == cv]
            if not arms or arms[0] not in sub.index:
                line.append("–")
                continue
            rec = sub.loc[arms[0]]
            cell = _our_cell(rec, digits, int(rec.n))
            cell += f" (n={rec.n})" if rec.n else ""
            if arms[0] == exp.reference_arm:
                cell += " (ref)"
            line.append(cell)
        grid.append(line)
    col = df[df.metric == metric].column.iloc[0] if (df.metric == metric).any() else metric
    head = [f"{rows_by} \\ {cols_by}"] + cvals
    return f"### {col}: {rows_by} x {cols_by}\n\n" + _md_table(head, grid) + "\n"
