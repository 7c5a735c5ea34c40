"""The differences table: arm - baseline per metric with interval, p, Holm-adjusted p and the flag."""

from __future__ import annotations

import math

import pandas as pd

from reports.experiment import Experiment
from reports.tables.cells import fmt_p, md_table, tests_used
from reports.tables.frame import (
    TableSpec,
)


def differences_rows(df: pd.DataFrame, digits: int = 4) -> tuple[list[str], list[list[str]]]:
    """(header, rows): arm - baseline per metric as `diff [lo, hi] p=… pH=… ≈`."""
    sub = df[df.baseline_arm.notna() & (df.arm != df.baseline_arm)]
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
                c += f" p={fmt_p(r.p_value)}"
            c += " (no test)" if not math.isfinite(r.p_value) else ""
            cells.append(c)
        n_rep = int(a.n_reports.max())
        rows.append([a.label.iloc[0], str(int(a.n_paired.max())), str(n_rep) if n_rep else "–"] + cells)
    return header, rows


DIFFERENCES_NOTE = ("Exploratory: no difference here is a decision (those are the study's declared primary "
                    "contrasts, in the Verdicts section, with their own correction). Cells: difference arm - baseline "
                    "[95% interval] p = raw two-sided p-value, not corrected for the table's many comparisons. "
                    "Over >= 2 shared seeds: mean paired difference, t-interval, paired t-test (sign-flip "
                    "permutation when all differences are equal). Over one shared seed: full-set difference, "
                    "percentile interval and shifted-null p of the paired bootstrap over test reports (same "
                    "resampled report ids for both arms, corpus metrics recomputed per resample; METEOR as the "
                    "mean of its segment scores, CIDEr with the full set's document frequencies). (no test): one "
                    "shared seed and no per-report outputs. refused: the two arms' test models were chosen by "
                    "different rl.select rules or decoded with different settings (reports/protocol.py).")


def differences_markdown(exp: Experiment, df: pd.DataFrame, spec: TableSpec) -> str:
    if not exp.baseline_arm or df.baseline_arm.isna().all():
        return ""
    header, rows = differences_rows(df, spec.digits)
    if not rows:
        return ""
    tests = tests_used(df)
    text = [f"### Exploratory differences to the baseline arm `{exp.baseline_arm}`\n", md_table(header, rows), "",
            f"- {DIFFERENCES_NOTE} Tests used: {'; '.join(tests) or 'none'}."]
    return "\n".join(text) + "\n"
