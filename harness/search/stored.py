"""The Optuna studies stored beside an experiment, opened for reading (the report's Optuna figures).

Found: SQLite `*.db` files in the experiment folder that carry Optuna's `studies` table (a foreign file is never
touched: Optuna would create its tables in it), and the file journal `optuna.journal` in the folder, one level
below it, or one above it (a `search confirm` experiment lives inside its search folder). The harness opens them
and hands reports/ the studies; reports/ only plots them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path


def _is_optuna_db(path: Path) -> bool:
    """True if `path` is an SQLite file with Optuna's `studies` table (opened read-only)."""
    try:
        con = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
        try:
            return con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='studies'").fetchone() \
                is not None
        finally:
            con.close()
    except sqlite3.Error:
        return False


def storage_files(experiment_dir: str | Path) -> list[Path]:
    """The candidate storage files of an experiment, in a fixed order (duplicates removed)."""
    root = Path(experiment_dir)
    found = [*sorted(root.glob("*.db")), *sorted(root.glob("optuna.journal")), *sorted(root.glob("*/optuna.journal")),
             *sorted(root.parent.glob("optuna.journal")), *sorted(root.parent.glob("optuna.db"))]
    return list(dict.fromkeys(p.resolve() for p in found if p.is_file()))


def _storage(path: Path):
    if path.name.endswith(".journal"):
        # lazy: start-up cost (optuna)
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        return JournalStorage(JournalFileBackend(str(path)))
    if not _is_optuna_db(path):
        return None
    return f"sqlite:///{path}"


def experiment_studies(experiment_dir: str | Path) -> list[tuple[Path, object]]:
    """(storage file, optuna.Study) for every study with a complete trial in the experiment's storages; a file
    Optuna cannot read (foreign, corrupt, or Optuna not installed) is skipped."""
    try:
        # lazy: start-up cost (optuna)
        import optuna
    except ImportError:
        return []
    out = []
    for path in storage_files(experiment_dir):
        try:
            storage = _storage(path)
            if storage is None:
                continue
            for summary in optuna.get_all_study_summaries(storage):
                study = optuna.load_study(study_name=summary.study_name, storage=storage)
                if any(t.state.name == "COMPLETE" for t in study.trials):
                    out.append((path, study))
        except Exception:  # noqa: BLE001 - a foreign or corrupt file is simply not plotted
            continue
    return out
