"""Search storage and cooperating drivers (harness/search/storage.py, harness/search/run.py): where the study lives,
stale trials (dead driver, lost heartbeat) enqueued again with their values, two driver processes on one SQLite
storage, invalid points recorded as failed trials, and spaces refused at load time.

Stage runs are the fake ones of tests/harness/search/test_run.py (fake_rl's final validation score is a known
function of the trial's values).
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from harness.config import ConfigError
from harness.runs.lock import me
from harness.runs.records import read_json
from harness.search.file import load_search
from harness.search.optuna_study import open_study
from harness.search.run import run_search
from harness.search.space import suggest
from harness.search.storage import (
    DRIVER_ATTR,
    HEARTBEAT_ATTR,
    Heartbeat,
    display,
    fail_stale,
    stamp,
    storage_url,
)
from tests.harness.search.test_run import SEARCH_FAKES, expected_objective, fake_rl, write_search

ROOT = Path(__file__).resolve().parents[3]
DEAD = f"{socket.gethostname()} 999999999 1"  # a driver of this host whose process is gone


def _quiet(_: str) -> None:
    pass


# ---------------------------------------------------------------------------------------------------------
# Storage specs


def test_storage_specs_resolve_to_urls(tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert storage_url(None, out) == f"sqlite:///{out.resolve()}/optuna.db"
    assert storage_url("sqlite", out) == f"sqlite:///{out.resolve()}/optuna.db"
    assert storage_url("journal", out) == f"journal:{out.resolve()}/optuna.journal"
    monkeypatch.chdir(tmp_path)
    assert storage_url("journal:shared/s.journal", out) == f"journal:{tmp_path.resolve()}/shared/s.journal"
    assert storage_url("sqlite:///shared/s.db", out) == "sqlite:///shared/s.db"
    assert "secret" not in display("postgresql://me:secret@db.lab/optuna")
    try:  # a database URL is passed on as written when its driver is installed, else refused naming the package
        import psycopg  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match=r"postgresql://me:\*\*\*@db\.lab/optuna': the postgresql driver is not "
                                              r"installed .*pip install 'psycopg\[binary\]'"):
            storage_url("postgresql://me:secret@db.lab/optuna", out)
    else:
        assert storage_url("postgresql://me:secret@db.lab/optuna", out) == "postgresql://me:secret@db.lab/optuna"
    # A folder made before the option existed keeps its journal.
    out.mkdir()
    (out / "optuna.journal").write_text("")
    assert storage_url(None, out) == f"journal:{out.resolve()}/optuna.journal"
    for bad, message in (("optuna.db", "not sqlite, journal"), ("journal:", "needs a file path"),
                         ("", "must be a string")):
        with pytest.raises(ConfigError, match=message):
            storage_url(bad, out)


def test_a_bad_storage_in_the_search_file_names_the_file(tmp_path):
    text = write_search(tmp_path).read_text() + "storage: my.db\n"
    path = write_search(tmp_path, text, name="bad")
    with pytest.raises(ConfigError, match="bad.yaml: storage 'my.db' is not sqlite"):
        load_search(path)


def test_a_search_runs_on_a_database_url_and_a_journal(tmp_path, calls):
    url = f"sqlite:///{tmp_path / 'elsewhere' / 'studies.db'}"
    res = run_search(write_search(tmp_path, n_trials=2), tmp_path / "a", storage=url, functions=SEARCH_FAKES,
                     log=_quiet)
    assert [t["state"] for t in res.summary["trials"]] == ["complete", "complete"]
    assert res.summary["storage"] == url and not (tmp_path / "a" / "optuna.db").exists()
    assert len(optuna.load_study(study_name="toy", storage=url).trials) == 2
    text = write_search(tmp_path, n_trials=2).read_text() + "storage: journal\n"
    res = run_search(write_search(tmp_path, text, name="toy"), tmp_path / "b", functions=SEARCH_FAKES, log=_quiet)
    assert (tmp_path / "b" / "optuna.journal").is_file() and len(res.summary["trials"]) == 2
    # The report finds the study through search.json.
    from harness.cli.search_commands import search_report

    assert (search_report(tmp_path / "a") / "trials.csv").is_file()


def test_an_older_journal_folder_is_continued(tmp_path, calls):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    out = tmp_path / "out"
    out.mkdir()
    old = JournalStorage(JournalFileBackend(str(out / "optuna.journal")))
    study = optuna.create_study(study_name="toy", storage=old, direction="maximize")
    study.add_trial(optuna.create_trial(params={"rl.beta_base": 0.1, "rl.beta_min": 0.02, "rl.beta_max": 0.2},
                                        distributions=_distributions(), value=0.5))
    res = run_search(write_search(tmp_path, n_trials=3), out, functions=SEARCH_FAKES, log=_quiet)
    assert [t["state"] for t in res.summary["trials"]] == ["complete"] * 3
    assert res.summary["storage"].startswith("journal:") and not (out / "optuna.db").exists()


def _distributions():
    from optuna.distributions import FloatDistribution

    return {"rl.beta_base": FloatDistribution(0.02, 0.3, log=True), "rl.beta_min": FloatDistribution(0.0, 0.1),
            "rl.beta_max": FloatDistribution(0.1, 0.5)}


def test_another_search_on_the_same_study_is_refused_naming_the_keys(tmp_path, calls):
    out = tmp_path / "out"
    run_search(write_search(tmp_path, n_trials=1), out, functions=SEARCH_FAKES, log=_quiet)
    text = write_search(tmp_path).read_text().replace("seeds: [0]", "seeds: [0, 1]")
    with pytest.raises(ConfigError, match=r"started by another search \(seeds: \[0\] in the study, \[0, 1\] here"):
        run_search(write_search(tmp_path, text, name="toy"), out, functions=SEARCH_FAKES, log=_quiet)


# ---------------------------------------------------------------------------------------------------------
# Stale trials


def _ask(study, storage, search, driver: str | None):
    trial = study.ask()
    values = suggest(trial, search.params)
    if driver:
        tid = stamp(storage, study, trial.number)
        storage.set_trial_system_attr(tid, DRIVER_ATTR, driver)
    return trial, values


def test_only_trials_of_gone_drivers_are_failed_and_enqueued_again(tmp_path):
    search = load_search(write_search(tmp_path))
    study, storage = open_study(tmp_path / "out", search)
    dead, dead_values = _ask(study, storage, search, DEAD)
    live, _ = _ask(study, storage, search, me().line())  # this process: alive
    remote, _ = _ask(study, storage, search, "another-host 1234 99")  # a fresh heartbeat: alive
    unstamped, _ = _ask(study, storage, search, None)  # asked a moment ago by a driver about to stamp it
    lines = []
    assert fail_stale(study, storage, Heartbeat(), lines.append) == [dead.number]
    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials[:4]] == [TrialState.FAIL, TrialState.RUNNING, TrialState.RUNNING,
                                             TrialState.RUNNING]
    again = trials[4]
    assert again.state == TrialState.WAITING and again.system_attrs["failed_trial"] == dead.number
    assert DRIVER_ATTR not in again.system_attrs  # the new trial does not look stale to the next driver
    asked = study.ask()
    assert asked.number == again.number and suggest(asked, search.params) == pytest.approx(dead_values)
    assert "is gone" in lines[0]
    # A second look (e.g. another driver) changes nothing.
    assert fail_stale(study, storage, Heartbeat(), lines.append) == []


def test_a_lost_heartbeat_fails_the_trial_in_a_database(tmp_path):
    search = load_search(write_search(tmp_path))
    beat = Heartbeat(interval=1, grace_period=1)
    study, storage = open_study(tmp_path / "out", search, heartbeat=beat)
    trial, values = _ask(study, storage, search, "another-host 1234 99")
    # The other host's driver stopped beating: its last heartbeat lies 1,000 s back on the database's clock (which
    # decides), far past the 1 s grace period; no waiting for the clock to get there.
    tid = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name("toy"), trial.number)
    with sqlite3.connect(tmp_path / "out" / "optuna.db") as db:
        moved = db.execute("UPDATE trial_heartbeats SET heartbeat = datetime(heartbeat, '-1000 seconds') "
                           "WHERE trial_id = ?", (tid,)).rowcount
    assert moved == 1  # the trial had a heartbeat row
    fail_stale(study, storage, beat, _quiet)
    trials = study.get_trials(deepcopy=False)
    assert trials[trial.number].state == TrialState.FAIL
    assert trials[-1].state == TrialState.WAITING and trials[-1].system_attrs["failed_trial"] == trial.number


def test_a_lost_heartbeat_fails_the_trial_in_a_journal(tmp_path):
    text = write_search(tmp_path).read_text() + "storage: journal\n"
    search = load_search(write_search(tmp_path, text, name="toy"))
    study, storage = open_study(tmp_path / "out", search)
    old, _ = _ask(study, storage, search, "another-host 1234 99")
    fresh, _ = _ask(study, storage, search, "another-host 1235 99")
    tid = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name("toy"), old.number)
    storage.set_trial_system_attr(tid, HEARTBEAT_ATTR, time.time() - 1000.5)
    fail_stale(study, storage, Heartbeat(interval=60, grace_period=180), _quiet)
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert states == [TrialState.FAIL, TrialState.RUNNING, TrialState.WAITING]


# ---------------------------------------------------------------------------------------------------------
# Invalid points


def test_an_invalid_point_is_a_failed_trial_and_the_search_goes_on(tmp_path, calls):
    # The case: beta_base proposed below the preset's beta_min (0.05). The load-time check refuses such a
    # range, so widen it after loading, as a space whose invalid region cannot be decided at load time would be.
    body = write_search(tmp_path).read_text().split("space:")[0] + (
        "space:\n  rl.beta_base: {type: float, low: 0.06, high: 0.12}\n")
    search = load_search(write_search(tmp_path, body, name="low"))
    search.params[0].low = 0.02
    out = tmp_path / "out"
    res = run_search(search, out, n_trials=8, functions=SEARCH_FAKES, log=_quiet)
    trials = res.summary["trials"]
    assert len(trials) == 8
    invalid = [t for t in trials if t["values"]["rl.beta_base"] < 0.05]
    valid = [t for t in trials if t not in invalid]
    assert invalid and valid
    for t in invalid:
        assert t["state"] == "fail" and t["invalid"] and t["objective"] is None
        assert "invalid point" in t["error"] and "beta_min <= beta_base" in t["error"]
    for t in valid:
        assert t["state"] == "complete" and not t["invalid"]
        assert t["objective"] == pytest.approx(1.0 - (t["values"]["rl.beta_base"] - 0.1) ** 2 - 0.05, abs=1e-12)
    # Invalid points never ran and are not arms of the experiment.
    assert sum(r["stage"] == "rl" for r in calls()) == len(valid)
    assert [a["name"] for a in read_json(out / "index.json")["arms"]] == [t["arm"] for t in valid]


def test_a_bound_outside_the_validated_range_is_refused_at_load_time(tmp_path):
    # The preset's beta_min is 0.05 and beta_max 0.12: beta_base below or above them is never valid.
    body = write_search(tmp_path).read_text().split("space:")[0] + (
        "space:\n  rl.beta_base: {type: float, low: 0.01, high: 0.1}\n")
    with pytest.raises(ConfigError, match=r"space.rl.beta_base: the value 0.01 allowed by its range gives an "
                                          r"invalid config .*beta_min <= beta_base"):
        load_search(write_search(tmp_path, body, name="bad"))
    body = write_search(tmp_path).read_text().split("space:")[0] + (
        "space:\n  rl.eps_low: {type: float, low: -0.3, high: 0.3}\n")
    with pytest.raises(ConfigError, match=r"space.rl.eps_low: the value -0.3 .*'rl.eps_low' = -0.3"):
        load_search(write_search(tmp_path, body, name="bad"))


def test_a_corner_of_two_free_ranges_is_checked(tmp_path):
    # Each range is valid with the other at its middle; beta_min 0.1 with beta_base 0.05 (a corner) is not.
    body = write_search(tmp_path).read_text().split("space:")[0] + (
        "space:\n  rl.beta_max: {type: float, low: 0.25, high: 0.5}\n"
        "  rl.beta_min: {type: float, low: 0.0, high: 0.1}\n"
        "  rl.beta_base: {type: float, low: 0.05, high: 0.2}\n")
    with pytest.raises(ConfigError, match=r"space: the corner .*beta_min=0.1, rl.beta_base=0.05 gives an invalid"):
        load_search(write_search(tmp_path, body, name="bad"))


# ---------------------------------------------------------------------------------------------------------
# Two driver processes on one SQLite storage (one search folder)


def _wait_for(done, what: str, deadline_s: float = 300.0) -> None:
    """Poll `done()` until true; the deadline only turns a hang into a failure, it orders nothing."""
    give_up = time.monotonic() + deadline_s
    while not done():
        if time.monotonic() > give_up:
            raise TimeoutError(f"gave up after {deadline_s:.0f}s waiting for {what}")
        time.sleep(0.05)


def overlapping_rl(cfg, progress=False):
    """fake_rl, but each driver's first RL trial waits until the other driver has started one too: the two
    drivers provably run trials at the same time (a marker file per driver in REGBENCH_TEST_SYNC)."""
    sync = Path(os.environ["REGBENCH_TEST_SYNC"])
    (sync / f"rl-started.{os.environ['REGBENCH_TEST_DRIVER']}").touch()
    _wait_for(lambda: len(list(sync.glob("rl-started.*"))) >= 2, "the other driver to start an RL trial")
    return fake_rl(cfg, progress)


DRIVER = """import os, sys
os.environ.setdefault("REGBENCH_TEST_DRIVER", str(os.getpid()))  # the driver's pid (its workers inherit it)
from harness import experiments
from tests.harness.search.test_run import SEARCH_FAKES
experiments.DEFAULT_FUNCTIONS.update({**SEARCH_FAKES, "rl": "tests.harness.search.test_drivers:overlapping_rl"})
from harness.cli import main
if __name__ == "__main__":  # (spawned workers import this file too)
    sys.exit(main(sys.argv[1:]))
"""


def test_two_drivers_on_one_sqlite_storage_finish_n_trials_none_lost_or_twice(tmp_path, calls):
    n = 6
    path = write_search(tmp_path, n_trials=n)
    out = tmp_path / "out"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    sync = tmp_path / "sync"
    sync.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REGBENCH_TEST_SYNC": str(sync)}
    env.pop("REGBENCH_TEST_DRIVER", None)
    cmd = [sys.executable, str(driver), "search", "run", str(path), "--out", str(out), "--no-report"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    try:
        outputs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], outputs
    study = optuna.load_study(study_name="toy", storage=f"sqlite:///{out / 'optuna.db'}")
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    counted = [t for t in trials if not t.user_attrs.get("surplus")]
    assert len(complete) == len(counted) == n  # none lost, none failed, no extra trial counted
    for t in complete:
        assert t.value == pytest.approx(expected_objective(t.params), abs=1e-12)
    drivers = {t.system_attrs[DRIVER_ATTR].split()[1] for t in complete}
    assert len(drivers) == 2, outputs  # both drivers ran trials
    rows = calls()
    rl_dirs = [r["out_dir"] for r in rows if r["stage"] == "rl"]
    assert len(rl_dirs) == len(set(rl_dirs)) == n  # every trial's RL ran once, none twice
    assert sum(r["stage"] == "sft" for r in rows) == 1  # the shared SFT: one driver ran it, the other waited
    summary = read_json(out / "search.json")
    assert sorted(t["number"] for t in summary["trials"] if t["state"] == "complete") == \
        sorted(t.number for t in complete)
    assert not list(out.rglob(".regbench.lock"))


def _open_at_once(url, barrier, results):
    from harness.search.storage import open_storage

    barrier.wait()
    try:
        open_storage(url)
        results.put("ok")
    except Exception as e:  # noqa: BLE001 - reported to the test
        results.put(f"{type(e).__name__}: {e}"[:200])


def test_drivers_opening_a_new_sqlite_store_at_once_all_succeed(tmp_path):
    # Two drivers started together both created Optuna's schema; the loser failed on alembic_version's unique
    # key (6 of 32 openers failed here before the creation lock).
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    outcomes = []
    for round_ in range(4):
        url = f"sqlite:///{tmp_path / f'r{round_}' / 'optuna.db'}"
        barrier, results = ctx.Barrier(4), ctx.Queue()
        procs = [ctx.Process(target=_open_at_once, args=(url, barrier, results)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        outcomes += [results.get(timeout=10) for _ in procs]
    assert outcomes == ["ok"] * 16, [o for o in outcomes if o != "ok"][:3]
