"""The verdict's forest plot: each declared contrast's difference and interval in units of its delta, the
± delta band drawn, n seeds and the outcome word beside it."""

from __future__ import annotations

import math
from pathlib import Path

from reports.figures.common import plt, save_figure

OUTCOME_COLORS = {"better": "#1a7f37", "worse": "#cf222e", "equivalent": "#0969da", "undecided": "#6e7781"}


def fig_verdicts(decisions, out_dir, labels: dict[str, str] | None = None) -> list[Path]:
    """One row per decision (harness/stats/decisions.py Decision): x = difference / delta, so the equivalence band is
    [-1, 1] for every metric; the interval is the one the decision used."""
    labels = labels or {}
    n = len(decisions)
    fig, ax = plt.subplots(figsize=(8.5, 0.55 * n + 1.4))
    ax.axvspan(-1, 1, color="#ddf4ff", zorder=0, label="± delta (equivalence band)")
    ax.axvline(0, color="black", lw=0.8, zorder=1)
    ticks = []
    for i, d in enumerate(decisions):
        y = n - 1 - i
        c = d.contrast
        scale = c.delta
        color = OUTCOME_COLORS.get(d.outcome, "black")
        if math.isfinite(d.lo) and math.isfinite(d.hi):
            ax.plot([d.lo / scale, d.hi / scale], [y, y], color=color, lw=2.2, zorder=2)
        if math.isfinite(d.diff):
            ax.plot([d.diff / scale], [y], "o", color=color, zorder=3)
        ticks.append(f"{labels.get(c.arm, c.arm)} - {labels.get(c.baseline, c.baseline)}: {c.metric} "
                     f"(delta {c.delta:g})")
        ax.annotate(f"{d.outcome}, n = {d.n}", xy=(1.0, y), xycoords=("axes fraction", "data"),
                    xytext=(6, 0), textcoords="offset points", va="center", color=color, fontsize=9)
    ax.set_yticks(range(n - 1, -1, -1))
    ax.set_yticklabels(ticks, fontsize=8)
    finite = [abs(v / d.contrast.delta) for d in decisions for v in (d.lo, d.hi) if math.isfinite(v)]
    lim = max([1.5, *[x * 1.1 for x in finite]])
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel("arm - baseline, in units of the contrast's delta")
    ax.set_title("Verdicts: declared primary contrasts")
    ax.legend(loc="lower left", fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return save_figure(fig, out_dir, "fig_verdicts")
