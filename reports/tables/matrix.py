"""The matrix layout (regularizer x reference, ...) for studies whose arms vary in two factors."""

from __future__ import annotations

import pandas as pd

from reports.experiment import Experiment
from reports.tables.cells import md_table, our_cell


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
            cell = our_cell(rec, digits, int(rec.n))
            cell += f" (n={rec.n})" if rec.n else ""
            if arms[0] == exp.baseline_arm:
                cell += " (baseline)"
            line.append(cell)
        grid.append(line)
    col = df[df.metric == metric].column.iloc[0] if (df.metric == metric).any() else metric
    head = [f"{rows_by} \\ {cols_by}"] + cvals
    return f"### {col}: {rows_by} x {cols_by}\n\n" + md_table(head, grid) + "\n"
