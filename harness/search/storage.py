"""Where a search's Optuna study lives, and how the drivers sharing it tell a dead driver's trials from live ones.

Storage (`storage:` in the search file, `--storage` on the command line):
- `sqlite` (the default): an SQLite file `<out>/optuna.db`;
- a database URL that SQLAlchemy reads (`sqlite:///path.db`, `postgresql://user@host/db`, `mysql://...`):
  Optuna's RDB storage, shared by drivers on several machines;
- `journal` (`<out>/optuna.journal`) or `journal:PATH`: Optuna's file journal, for a disk shared over NFS where
  SQLite's locking is not safe. A folder made before this option existed keeps its `optuna.journal`.
Relative paths (in a URL or after `journal:`) are relative to the current directory, as SQLAlchemy reads them.

Several drivers (`regbench search run` processes) can work on one study. Each stamps the trials it runs with its
identity (host, PID, process start time) and records a heartbeat for them every `interval` seconds (Optuna's
heartbeat table in an RDB storage, a system attribute in a journal). A RUNNING trial is stale, i.e. its driver
is gone, when
- its driver ran on this host and that process no longer exists (found at once, e.g. after kill -9), or
- its last heartbeat is older than `grace_period` (a driver on another host), or
- it has neither stamp and started longer than `grace_period` ago (left by a version without stamps).
A stale trial is failed and enqueued again with the same values (Optuna's RetryHeartbeatStaleTrialCallback);
the FAIL transition is the arbiter, so of several drivers finding it only one enqueues it. Live drivers' trials
are never touched.
"""

from __future__ import annotations

import contextlib
import fcntl
import re
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timezone
from pathlib import Path

from harness.config import ConfigError
from harness.runs.lock import HOST, Holder, holder_alive, me

DEFAULT_DB = "optuna.db"
JOURNAL = "optuna.journal"
JOURNAL_PREFIX = "journal:"
DRIVER_ATTR = "regbench_driver"        # "host pid start" of the driver running the trial
HEARTBEAT_ATTR = "regbench_heartbeat"  # unix time of the last heartbeat (journal storages)
LEGACY_REQUEUED = "regbench_requeued"  # a trial failed and enqueued again by an earlier version


@dataclass(frozen=True)
class Heartbeat:
    """Heartbeat timing (this project's choice: a driver's trials last minutes to hours, so a minute is cheap
    and a few minutes of grace absorb a slow disk or a busy database)."""

    interval: int = 60        # seconds between a driver's heartbeats of its running trials
    grace_period: int = 180   # seconds without a heartbeat after which a trial is stale

    def __post_init__(self) -> None:
        if self.interval < 1 or self.grace_period < self.interval:
            raise ConfigError(f"heartbeat: need interval >= 1 and grace_period >= interval, got {self}")


HEARTBEAT = Heartbeat()


def storage_url(spec: str | None, out: Path) -> str:
    """The storage a search folder uses: `spec` (file or command line) made explicit, see the module docstring."""
    out = Path(out)
    if spec is None:
        legacy = out / JOURNAL
        return JOURNAL_PREFIX + str(legacy.resolve()) if legacy.is_file() else _sqlite(out / DEFAULT_DB)
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"storage must be a string (sqlite, journal, journal:PATH or a database URL), got {spec!r}")
    spec = spec.strip()
    if spec == "sqlite":
        return _sqlite(out / DEFAULT_DB)
    if spec == "journal":
        return JOURNAL_PREFIX + str((out / JOURNAL).resolve())
    if spec.startswith(JOURNAL_PREFIX):
        path = spec[len(JOURNAL_PREFIX):]
        if not path:
            raise ConfigError("storage 'journal:' needs a file path, e.g. journal:/shared/searches/rer.journal")
        _check_file_path(Path(path), spec)
        return JOURNAL_PREFIX + str(Path(path).resolve())
    if "://" not in spec:
        raise ConfigError(f"storage {spec!r} is not sqlite, journal, journal:PATH or a database URL such as "
                          "sqlite:///searches.db or postgresql://user@host/optuna")
    check_database_url(spec)
    return spec


# The pip package of each database driver SQLAlchemy imports (module name -> what to install).
DRIVER_PACKAGES = {"psycopg": "psycopg[binary]", "psycopg2": "psycopg2-binary", "asyncpg": "asyncpg",
                   "pg8000": "pg8000", "MySQLdb": "mysqlclient", "pymysql": "pymysql",
                   "mysql": "mysql-connector-python", "oracledb": "oracledb", "pyodbc": "pyodbc"}


def check_database_url(spec: str) -> None:
    """A database URL SQLAlchemy can open: it parses, names a known database, its driver is installed, and an
    SQLite file is an SQLite database in a folder (not under a file). Reads only; the error names the URL
    (without its password) and the fix, in one line."""
    # lazy: start-up cost (sqlalchemy)
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    shown = display(spec)
    try:
        url = make_url(spec)
    except (ArgumentError, ValueError) as e:
        raise ConfigError(f"storage {shown!r}: not a database URL ({e}); write it as "
                          "dialect://user:password@host:port/database, e.g. postgresql://user@host:5432/optuna or "
                          "sqlite:///searches.db") from e
    try:
        dialect = url.get_dialect()
    except NoSuchModuleError as e:
        raise ConfigError(f"storage {shown!r}: SQLAlchemy knows no database {url.drivername!r}; use sqlite:///PATH, "
                          "postgresql://..., mysql://... (or journal:PATH for a shared disk)") from e
    try:
        dialect.import_dbapi()
    except ImportError as e:
        module = (getattr(e, "name", None) or "").split(".")[0]
        package = DRIVER_PACKAGES.get(module, module or "the driver")
        raise ConfigError(f"storage {shown!r}: the {url.get_backend_name()} driver is not installed ({e}); install it "
                          f"(pip install '{package}') or use sqlite / journal:PATH") from e
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        _check_file_path(Path(url.database), shown)
        _check_sqlite_file(Path(url.database), shown)


def _check_file_path(path: Path, shown: str) -> None:
    """The storage file's folder can exist: no part of it is a file; the path itself is not a folder."""
    if path.is_dir():
        raise ConfigError(f"storage {shown!r}: '{path}' is a folder; name a file in it, e.g. {path / DEFAULT_DB}")
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"storage {shown!r}: '{parent}' is a file, so '{path}' cannot be created under it; "
                                  "choose another path")
            return


SQLITE_HEADER = b"SQLite format 3\x00"


def _check_sqlite_file(path: Path, shown: str) -> None:
    """An existing, non-empty file must be an SQLite database (its 16-byte header), or SQLite refuses it later
    with "file is not a database" and no path."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb") as fh:
        head = fh.read(len(SQLITE_HEADER))
    if head != SQLITE_HEADER:
        raise ConfigError(f"storage {shown!r}: '{path}' exists and is not an SQLite database; give another file "
                          "name (a new file is created) or move that file away")


def _sqlite(path: Path) -> str:
    return "sqlite:///" + str(path.resolve())


def display(url: str) -> str:
    """The URL without its password (for logs and search.json)."""
    if url.startswith(JOURNAL_PREFIX) or "://" not in url:
        return url
    # lazy: start-up cost (sqlalchemy)
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL is shown as written, any password masked
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def open_storage(url: str, heartbeat: Heartbeat = HEARTBEAT):
    """The Optuna storage at `url` (from `storage_url`); an RDB one with Optuna's heartbeat and retry callback."""
    # lazy: start-up cost (optuna)
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    if url.startswith(JOURNAL_PREFIX):
        path = Path(url[len(JOURNAL_PREFIX):])
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    engine, db = {}, ""
    if url.startswith("sqlite"):
        db = url.split(":///", 1)[1] if ":///" in url else ""
        db = "" if db == ":memory:" else db
        if db:
            Path(db).parent.mkdir(parents=True, exist_ok=True)
        engine = {"connect_args": {"timeout": 120}}  # drivers take turns writing; wait rather than fail
    # Two drivers opening a new database at once would both create Optuna's schema; the loser's
    # `alembic_version` insert fails. A file lock orders them for an SQLite file; for a server database the loser
    # tries again and finds the schema made.
    for attempt in range(3):
        try:
            with _creation_lock(db), warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, engine_kwargs=engine, heartbeat_interval=heartbeat.interval,
                                                  grace_period=heartbeat.grace_period,
                                                  heartbeat_stale_trial_callback=requeue)
        except Exception as e:  # noqa: BLE001 - SQLAlchemy's IntegrityError; anything else is raised at once
            if attempt == 2 or "alembic_version" not in str(e):
                raise


@contextlib.contextmanager
def _creation_lock(db: str):
    """An exclusive lock on `<db>.lock` while the storage opens (none for a server database)."""
    if not db:
        yield
        return
    with open(db + ".lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def requeue(study, trial) -> None:
    """Enqueue a stale trial again with the same values (Optuna's retry callback), without the dead driver's
    stamps: the new trial must not look stale to another driver the moment it is asked for."""
    # lazy: start-up cost (optuna)
    import optuna
    from optuna.storages import RetryHeartbeatStaleTrialCallback

    clean = trial.system_attrs.copy()
    clean.pop(DRIVER_ATTR, None)
    clean.pop(HEARTBEAT_ATTR, None)
    trial.system_attrs = clean
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        RetryHeartbeatStaleTrialCallback()(study, trial)


def retried_numbers(trials) -> set[int]:
    """Numbers of the failed trials that were enqueued again (they do not count as finished)."""
    out = {t.number for t in trials if t.system_attrs.get(LEGACY_REQUEUED)}
    for t in trials:
        out.update(t.system_attrs.get("retry_history") or [])
    return out


# ---------------------------------------------------------------------------------------------------------
# Driver identity and heartbeats


def driver_id() -> str:
    return me().line()


def trial_id(storage, study, number: int) -> int:
    return storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study.study_name), number)


def stamp(storage, study, number: int) -> int:
    """Mark trial `number` (just asked for) as run by this driver, with a first heartbeat; returns its id."""
    tid = trial_id(storage, study, number)
    storage.set_trial_system_attr(tid, DRIVER_ATTR, driver_id())
    beat(storage, tid)
    return tid


def beat(storage, trial_id: int) -> None:
    # lazy: start-up cost (optuna)
    from optuna.storages._heartbeat import BaseHeartbeat

    if isinstance(storage, BaseHeartbeat):
        storage.record_heartbeat(trial_id)
    else:
        storage.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())


@contextlib.contextmanager
def heartbeats(storage, trial_ids: list[int], interval: int):
    """Record a heartbeat for `trial_ids` every `interval` seconds while the block runs."""
    # lazy: start-up cost (optuna)
    import optuna

    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            for tid in trial_ids:
                with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError, KeyError):
                    beat(storage, tid)

    thread = threading.Thread(target=loop, name="regbench-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


# ---------------------------------------------------------------------------------------------------------
# Stale trials


def _dead_local_driver(stamp_line: str | None) -> bool:
    holder = Holder.parse(stamp_line) if stamp_line else None
    return holder is not None and holder.host == HOST and not holder_alive(holder)


def stale_reason(trial, grace_period: int, now: float | None = None, rdb: bool = False) -> str | None:
    """Why a RUNNING trial's driver is gone, or None if it may be alive (RDB heartbeats are Optuna's to judge)."""
    now = time.time() if now is None else now
    driver = trial.system_attrs.get(DRIVER_ATTR)
    if driver:
        if _dead_local_driver(driver):
            return f"its driver ({driver.split()[0]} pid {driver.split()[1]}) is gone"
        last = trial.system_attrs.get(HEARTBEAT_ATTR)
        if not rdb and isinstance(last, int | float) and now - last > grace_period:
            return f"no heartbeat for {now - last:.0f}s (grace period {grace_period}s)"
        return None
    start = trial.datetime_start
    if start is not None and now - start.replace(tzinfo=start.tzinfo or timezone.utc).timestamp() > grace_period:
        return "left running by an earlier version's driver"
    return None


def fail_stale(study, storage, heartbeat: Heartbeat, log: Callable[[str], None]) -> list[int]:
    """Fail every stale RUNNING trial of `study` (in `storage`) and enqueue it again; returns the numbers of
    the trials this driver failed."""
    # lazy: start-up cost (optuna)
    import optuna
    from optuna.storages._heartbeat import BaseHeartbeat
    from optuna.trial import TrialState

    rdb = isinstance(storage, BaseHeartbeat)
    done = []
    for t in study.get_trials(deepcopy=True, states=(TrialState.RUNNING,)):
        why = stale_reason(t, heartbeat.grace_period, rdb=rdb)
        if why is None:
            continue
        try:
            if storage.set_trial_state_values(trial_id(storage, study, t.number), TrialState.FAIL) is False:
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another driver failed it first (and enqueued it)
        requeue(study, t)
        done.append(t.number)
        log(f"trial {t.number}: {why}; enqueued again with the same values")
    if rdb:
        n_before = len(study.get_trials(deepcopy=False))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)  # heartbeat older than the grace period (any host)
        n_new = len(study.get_trials(deepcopy=False)) - n_before
        if n_new > 0:
            log(f"{n_new} trial(s) had no heartbeat for {heartbeat.grace_period}s: enqueued again with the same "
                "values")
    return done
