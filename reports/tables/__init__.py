"""Tables from an experiment: our numbers (mean and 95% t-interval over seeds, n per cell) beside the
published ones, differences to the baseline arm with a paired test and a within-noise flag.

`results_frame` builds one long pandas DataFrame (one row per arm x metric) holding every number; the
renderers lay it out wide, one row per arm ("ours") plus one row per matching published row ("paper"):
  - `to_markdown(...)`, `to_latex(...)` (booktabs), `to_csv(...)` (the long frame itself);
  - `differences_markdown(...)`: arm - baseline per metric, with interval, p, Holm-adjusted p and the flag.
Cells read `mean [lo, hi]`; `≈` marks a non-baseline arm whose difference to the baseline arm is within
noise: Holm-Bonferroni-adjusted p (over every comparison of the table) >= 0.05. A comparison over >= 2 shared
seeds is the paired t-test (reports/stats.py); over one shared seed it is the paired bootstrap over test reports
(reports/bootstrap.py) when both runs wrote per-report outputs. The last row gives each metric's minimum
detectable difference (alpha 0.05, power 0.8) at the table's n. `n=k` is added to a cell whose n differs from
its arm's.

Modules: ``frame`` (the long frame and the published rows it is compared with), ``cells`` (formatting), ``wide``
(the wide table, its notes, Markdown / LaTeX / CSV), ``differences``, ``matrix``.
"""

from reports.tables.cells import latex_escape
from reports.tables.differences import DIFFERENCES_NOTE, differences_markdown, differences_rows
from reports.tables.frame import (
    DEFAULT_METRICS,
    MATCH_FACTORS,
    MDD_LABEL,
    NOISE_MARK,
    TableSpec,
    column_name,
    default_spec,
    match_published_row,
    mdd_by_metric,
    n_comparisons,
    published_dataset,
    published_id,
    results_frame,
)
from reports.tables.matrix import matrix_factors, matrix_markdown
from reports.tables.wide import DELTA_TABLES, notes, published_apart_rows, to_csv, to_latex, to_markdown, wide_rows

__all__ = [
    "DEFAULT_METRICS",
    "DELTA_TABLES",
    "DIFFERENCES_NOTE",
    "MATCH_FACTORS",
    "MDD_LABEL",
    "NOISE_MARK",
    "TableSpec",
    "column_name",
    "default_spec",
    "differences_markdown",
    "differences_rows",
    "latex_escape",
    "match_published_row",
    "matrix_factors",
    "matrix_markdown",
    "mdd_by_metric",
    "n_comparisons",
    "notes",
    "published_apart_rows",
    "published_dataset",
    "published_id",
    "results_frame",
    "to_csv",
    "to_latex",
    "to_markdown",
    "wide_rows",
]
