"""The wide table (one row per arm, paper rows beside): its rows, its notes, and Markdown / LaTeX / CSV."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from reports.deltas import CE_GROUP, NLG_GROUP, format_delta, group_delta
from reports.experiment import Experiment
from reports.protocol import selection_score_note
from reports.published import load_published, our_metric_key
from reports.stats import POWER
from reports.tables.cells import arm_n, fmt, latex_escape, md_table, our_cell, tests_used
from reports.tables.frame import (
    MDD_LABEL,
    NOISE_MARK,
    TableSpec,
    dataset_name,
    mdd_by_metric,
    published_lookup,
    published_value,
)

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
    pub_by_label = {r.get("label"): r for r in published_lookup(spec)[0]}

    def paper_deltas(label) -> list[str]:
        r = pub_by_label.get(label) or {}
        return [r.get("delta_nlg") or "–", r.get("delta_ce") or "–"] if deltas else []

    rows = []
    pub_digits = 3 if spec.published != "mrg_r1" else 4
    for arm in dict.fromkeys(df.arm):
        sub = df[df.arm == arm].set_index("metric")
        label = sub.label.iloc[0]
        n = arm_n(df, arm)
        tag = " (baseline)" if arm == sub.baseline_arm.iloc[0] else ""
        rows.append([f"{label}{tag}", "ours", str(n), sub.tested_at.iloc[0]]
                    + [our_cell(sub.loc[m], spec.digits, n, latex) for m in metrics]
                    + (_our_deltas(df, arm, base, spec) if deltas else []))
        if sub.published_source.notna().any():
            src = sub.published_source.dropna().iloc[0]
            prow = sub.published_row.dropna().iloc[0]
            rows.append([f"{prow}", f"paper: {src} ({dataset_name(spec.dataset)})", "–", "–"]
                        + [fmt(sub.loc[m]["published"], pub_digits) for m in metrics] + paper_deltas(prow))
    if spec.comparable:  # published rows of another data set are not under ours (published_apart_rows)
        rows += [r + paper_deltas(r[0]) for r in _paper_block(df, spec, metrics, pub_digits)]
    mdd = mdd_by_metric(df)
    if mdd:
        bases = sorted({b for _, b in mdd.values()})
        rows.append([MDD_LABEL, "; ".join(bases), "–", "–"] + [fmt(mdd[m][0], spec.digits) if m in mdd else "–"
                                                          for m in metrics] + (["–", "–"] if deltas else []))
    return header, rows


def _paper_block(df: pd.DataFrame, spec: TableSpec, metrics: list[str], digits: int) -> list[list[str]]:
    """The shown paper rows that sit beside none of our arms, under the paper's own row names."""
    rows, source, scale = published_lookup(spec)
    placed = set(df.published_row.dropna())
    out = []
    for r in rows:
        label = r.get("label") or r.get("arm")
        if label in placed:
            continue
        out.append([label, f"paper: {source} ({dataset_name(spec.dataset)})", "–", "–"]
                   + [fmt(published_value(r, m, spec, scale), digits) for m in metrics])
    return out


def published_apart_rows(df: pd.DataFrame, spec: TableSpec) -> tuple[str, list[str], list[list[str]]] | None:
    """(title, header, rows) of the published rows when they are on another data set than ours: a table of their
    own, never under our numbers (None when there are none or they are comparable)."""
    if spec.published is None or spec.comparable:
        return None
    metrics = list(dict.fromkeys(df.metric))
    cols = [df[df.metric == m].column.iloc[0] for m in metrics]
    rows, source, scale = published_lookup(spec)
    if not rows:
        return None
    digits = 3 if spec.published != "mrg_r1" else 4
    body = [[r.get("label") or r.get("arm")] + [fmt(published_value(r, m, spec, scale), digits) for m in metrics]
            for r in rows]
    title = (f"Published numbers: {source}, {dataset_name(spec.dataset)} (not comparable with ours, which are on "
             f"{dataset_name(spec.ours_dataset)})")
    return title, ["Paper row"] + cols, body


def notes(exp: Experiment, df: pd.DataFrame, spec: TableSpec) -> list[str]:
    """The statements every table carries: seeds, n, what a cell is, the test, the flag, the MDD, the sources."""
    seeds = sorted({int(s) for ss in df.seeds for s in str(ss).split() if s})
    ns = ", ".join(f"{a} {arm_n(df, a)}" for a in dict.fromkeys(df.arm))
    n_reports = sorted({int(k) for k in df.n_reports if k})
    out = [f"Seeds: {', '.join(map(str, seeds)) or 'none'}; n (seeds with scores) per arm: {ns}. "
           f"Cells: mean over seeds [95% t-interval of the mean]; `(n=k)` marks a cell with fewer seeds than "
           f"its arm."]
    baseline = exp.baseline_arm
    if baseline:
        tests = tests_used(df)
        out.append(f"Baseline arm: `{baseline}`. Every comparison (arm - baseline) is in the differences table with "
                   f"its interval and p: {'; '.join(tests) or 'none (no shared seed)'}"
                   + (f", over n = {', '.join(map(str, n_reports))} test reports" if n_reports else "")
                   + ". Those differences are exploratory (raw p, no decision); decisions are the declared primary "
                   "contrasts' (Verdicts).")
    out.append("Tested at: the policy each arm's test scores come from (RL: the step of the selected policy, "
               "rl.select's choice or the last step, and the rule; other arms: the end of their last stage), per "
               "seed when they differ.")
    selected_by = selection_score_note(exp, list(dict.fromkeys(df.arm)))
    if selected_by:
        out.append(selected_by)
    refused = sorted({f"{a}: {i}" for a, i in zip(df.arm, df.protocol_issue, strict=True)
                      if isinstance(i, str)})
    if refused:
        out.append("Comparisons refused (arms not scored the same way as the baseline arm): " + "; ".join(refused)
                   + ".")
    mdd = mdd_by_metric(df)
    if mdd:
        out.append(f"{MDD_LABEL}: the smallest true difference a single comparison detects with probability "
                   f"{POWER} at this table's n (seeds: paired t-test, pooled std of the paired differences; "
                   f"one seed: bootstrap standard error over test reports); a smaller difference is not ruled out by "
                   "a non-significant p.")
    if spec.published in DELTA_TABLES:
        out.append("ΔNLG / ΔCE: relative change of the summed NLG metrics (B-1..4, R-L, MTR) / CE metrics (P, R, "
                   "F1, RG) against the stage-1 row (ours: our S1 arm's means; paper: as printed); `*`: without RG "
                   "(RadGraph missing), over P, R, F1.")
    if spec.published:
        t = load_published()["tables"][spec.published]
        where = ("the others follow our rows" if spec.comparable else
                 "on another data set than ours, they are not in this table but in a table of their own")
        out.append(f"Paper rows: {t['source']} ({dataset_name(spec.dataset)}; {t['caption']}) — published numbers "
                   f"under the paper's own row names, not rerun here; ours are on data set `{exp.dataset}`, preset "
                   f"`{exp.preset}`. A paper row sits right under one of our arms only when its data set and its "
                   f"regularizer, reference and reward all match that arm's; {where}. CheXpert "
                   f"P/R/F1 are compared with our {spec.ce_average}-averaged CE scores; RG with RadGraph F1 "
                   f"(partial) when its weights were available (else –).")
        unmatched = sorted({f"{a}: {u}" for a, u in zip(df.arm, df.published_unmatched, strict=True)
                            if isinstance(u, str)})  # pandas holds a missing reason as NaN, which is truthy
        if unmatched:
            out.append("Named paper rows not placed beside an arm: " + "; ".join(unmatched) + ".")
    return out + list(spec.notes)


def to_markdown(exp: Experiment, df: pd.DataFrame, spec: TableSpec, title: str | None = None) -> str:
    header, rows = wide_rows(df, spec)
    parts = [f"### {title}\n" if title else "", md_table(header, rows), ""]
    parts += [f"- {n}" for n in notes(exp, df, spec)]
    return "\n".join(parts).strip() + "\n"


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
