"""Optuna figures (optional): the storages that belong to an experiment and each study's history."""

from __future__ import annotations

import warnings
from pathlib import Path

from reports.figures.common import plt, save_figure


def _is_optuna_db(path: str | Path) -> bool:
    """True if `path` is an SQLite file with optuna's `studies` table (opened read-only)."""
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='studies'").fetchone()
            return row is not None
        finally:
            con.close()
    except sqlite3.Error:
        return False


def optuna_files(experiment_dir: str | Path) -> list[Path]:
    """The Optuna storages that belong to an experiment: SQLite `*.db` files in its folder, and the file journal
    (`optuna.journal`, what `regbench search` wrote before `optuna.db`) in its folder, one level below it, or one
    above it (a `search confirm` experiment lives inside its search folder, next to its `optuna.db`)."""
    root = Path(experiment_dir)
    found = [*sorted(root.glob("*.db")), *sorted(root.glob("optuna.journal")), *sorted(root.glob("*/optuna.journal")),
             *sorted(root.parent.glob("optuna.journal")), *sorted(root.parent.glob("optuna.db"))]
    return list(dict.fromkeys(p.resolve() for p in found if p.is_file()))


def _journal_storage(path: Path):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(path)))


def fig_optuna(storage_file: str | Path, out_dir) -> list[list[Path]]:
    """Optimisation history of every study in an Optuna SQLite file or file journal (empty list if optuna
    cannot read it)."""
    try:
        import optuna
        from optuna.visualization.matplotlib import plot_optimization_history
    except ImportError:
        return []
    if str(storage_file).endswith(".journal"):
        try:
            storage = _journal_storage(Path(storage_file))
        except Exception:  # noqa: BLE001 - a foreign or corrupt file is simply not plotted
            return []
    elif not _is_optuna_db(storage_file):  # never let optuna create its tables in a foreign file
        return []
    else:
        storage = f"sqlite:///{Path(storage_file).resolve()}"
    out = []
    try:
        summaries = optuna.get_all_study_summaries(storage)
    except Exception:  # noqa: BLE001 - a foreign or corrupt file is simply not plotted
        return []
    for s in summaries:
        try:
            study = optuna.load_study(study_name=s.study_name, storage=storage)
            if not any(t.state.name == "COMPLETE" for t in study.trials):
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # optuna marks its matplotlib plots experimental
                ax = plot_optimization_history(study)
            fig = ax.figure
            fig.set_size_inches(6, 3.6)
            safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in s.study_name)
            out.append(save_figure(fig, out_dir, f"fig_optuna_{safe}"))
        except Exception:  # noqa: BLE001
            plt.close("all")
            continue
    return out
