"""Optuna figures (optional): the optimisation history of a study the harness opened and handed over
(harness/search/stored.py finds and opens the storages; reports/ only reads the study)."""

from __future__ import annotations

import warnings
from pathlib import Path

from reports.figures.common import plt, save_figure


def fig_optuna(study, out_dir) -> list[Path]:
    """The optimisation history of one optuna.Study ([] when it has no complete trial or cannot be drawn)."""
    try:
        # lazy: start-up cost (optuna)
        from optuna.visualization.matplotlib import plot_optimization_history
    except ImportError:
        return []
    if not any(t.state.name == "COMPLETE" for t in study.trials):
        return []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # optuna marks its matplotlib plots experimental
            ax = plot_optimization_history(study)
        fig = ax.figure
        fig.set_size_inches(6, 3.6)
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in study.study_name)
        return save_figure(fig, out_dir, f"fig_optuna_{safe}")
    except Exception:  # noqa: BLE001 - a study that cannot be drawn is left out of the page
        plt.close("all")
        return []
