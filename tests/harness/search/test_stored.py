"""harness/search/stored.py: the Optuna storages beside an experiment, opened read-only for the report."""

from __future__ import annotations

import pytest

from harness.search.stored import experiment_studies, storage_files
from tests.reports.conftest import write_journal


def test_a_confirm_experiment_finds_its_search_journal_and_skips_foreign_files(tmp_path):
    pytest.importorskip("optuna")
    search = tmp_path / "search"
    (search / "confirm").mkdir(parents=True)
    journal = write_journal(search / "optuna.journal", n_trials=3)
    foreign = search / "confirm" / "notes.db"
    foreign.write_text("not optuna")
    assert storage_files(search / "confirm") == [foreign.resolve(), journal.resolve()]
    found = experiment_studies(search / "confirm")
    assert [(p, s.study_name, len(s.trials)) for p, s in found] == [(journal.resolve(), "rer_bounds", 3)]
    assert foreign.read_text() == "not optuna"  # never given Optuna's tables


def test_an_sqlite_study_is_opened_and_one_without_complete_trials_is_left_out(tmp_path):
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    db = tmp_path / "study.db"
    done = optuna.create_study(study_name="done", storage=f"sqlite:///{db}")
    done.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    optuna.create_study(study_name="empty", storage=f"sqlite:///{db}")
    (tmp_path / "junk.db").write_bytes(b"not a database")
    assert [s.study_name for _, s in experiment_studies(tmp_path)] == ["done"]
