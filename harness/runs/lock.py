"""Who owns a run folder: a lock file naming the live processes that write it.

The lock (`<run>/.regbench.lock`) holds one line per holder: "host pid start", `start` being the process's
start time from /proc (so a recycled PID does not keep a dead runner's lock alive). A lock is stale only when
every holder of this host is gone; a holder on another host (a shared disk) is trusted, since its process
cannot be checked from here. A process whose ancestor holds the lock (an experiment runner's worker, a torchrun
rank under a runner) joins it as a co-holder instead of being refused, so the folder stays locked for as long
as any of them lives: a runner killed with -9 whose worker still writes leaves the folder locked.

Locks taken inside `scope()` are released when it ends (a worker process runs many stage runs); the others
when the process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from harness.config import ConfigError

LOCK_NAME = ".regbench.lock"
HOST = socket.gethostname()


class RunLocked(ConfigError):
    """Another live process holds the run folder; the message names it and what to do."""


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    start: str | None

    def line(self) -> str:
        return f"{self.host} {self.pid} {self.start or '-'}"

    @classmethod
    def parse(cls, line: str) -> Holder | None:
        parts = line.split()
        if len(parts) not in (2, 3) or not parts[1].isdigit():
            return None
        start = parts[2] if len(parts) == 3 and parts[2] != "-" else None
        return cls(parts[0], int(parts[1]), start)


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (field 3 onwards); None if unreadable."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def process_start(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else None  # field 22: start time in clock ticks


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder_alive(h: Holder) -> bool:
    if h.host != HOST:
        return True
    if h.pid <= 0 or not _pid_alive(h.pid):
        return False
    now = process_start(h.pid)
    return h.start is None or now is None or now == h.start


def _ancestors() -> set[int]:
    """PIDs of this process's parents up to (not including) init."""
    out, pid = set(), os.getppid()
    while pid > 1 and pid not in out:
        out.add(pid)
        fields = _stat_fields(pid)
        if not fields:
            break
        pid = int(fields[1])
    return out


def me() -> Holder:
    return Holder(HOST, os.getpid(), process_start(os.getpid()))


def read_holders(lock: Path) -> list[Holder]:
    try:
        lines = lock.read_text().splitlines()
    except OSError:
        return []
    return [h for h in (Holder.parse(x) for x in lines) if h is not None]


# lock path -> how many times this process took it; the scopes record what they must give back.
_HELD: dict[Path, int] = {}
_SCOPES: list[list[Path]] = []


def write_holders(lock: Path, holders) -> None:
    """Replace the lock's holder lines by `holders` (written beside it and renamed in); no holders: no lock."""
    if holders:
        tmp = lock.with_name(f"{lock.name}.{os.getpid()}.tmp")
        tmp.write_text("".join(h.line() + "\n" for h in holders))
        os.replace(tmp, lock)
    else:
        lock.unlink(missing_ok=True)


def _create(lock: Path, content: str) -> bool:
    """Create `lock` holding `content` in one step (link of a finished temp file): never seen empty."""
    tmp = lock.with_name(f"{lock.name}.{os.getpid()}.tmp")
    tmp.write_text(content)
    try:
        os.link(tmp, lock)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def _busy_message(folder: Path, live: list[Holder]) -> str:
    who = ", ".join(f"{h.host} pid {h.pid}" for h in live)
    lock = folder / LOCK_NAME if folder.is_dir() else folder
    return (f"{folder} is being run by another process ({who}; lock {lock}):"
            " wait for it to finish (a finished run is then reused), give this command another out_dir, or stop "
            "that process first")


def acquire_file(lock: str | Path, wait_s: float = 0.0) -> None:
    """Hold `lock` (a lock file path) for this process; RunLocked if live processes outside this process's
    ancestry hold it (after waiting up to `wait_s` seconds for them)."""
    lock = Path(lock).absolute()
    if lock in _HELD:
        _HELD[lock] += 1
        _note(lock)
        return
    lock.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_s
    while True:
        if _create(lock, me().line() + "\n"):
            break
        holders = read_holders(lock)
        live = [h for h in holders if holder_alive(h)]
        if not live:
            _take_over_stale(lock)
            continue
        family = {os.getpid()} | _ancestors()
        if any(h.host == HOST and h.pid in family for h in live):
            with open(lock, "a", encoding="utf-8") as f:  # a co-holder: a worker of the process holding it
                f.write(me().line() + "\n")
            break
        if time.monotonic() >= deadline:
            raise RunLocked(_busy_message(lock.parent if lock.name == LOCK_NAME else lock, live))
        time.sleep(min(2.0, max(0.05, deadline - time.monotonic())))
    _HELD[lock] = 1
    _note(lock)


def _take_over_stale(lock: Path) -> None:
    """Move a stale lock aside (one process wins the rename); put it back if it turned out to be live."""
    aside = lock.with_name(f"{lock.name}.stale.{os.getpid()}")
    try:
        os.rename(lock, aside)
    except FileNotFoundError:
        return
    if any(holder_alive(h) for h in read_holders(aside)):  # replaced by a live lock meanwhile
        with contextlib.suppress(FileExistsError):
            os.link(aside, lock)
    aside.unlink(missing_ok=True)


def _note(lock: Path) -> None:
    if _SCOPES:
        _SCOPES[-1].append(lock)


def release_file(lock: str | Path) -> None:
    """Give back one hold of `lock`; the last one removes this process's line (and the file when it is empty)."""
    lock = Path(lock).absolute()
    if lock not in _HELD:
        return
    _HELD[lock] -= 1
    if _HELD[lock] > 0:
        return
    del _HELD[lock]
    mine = os.getpid()
    rest = [h for h in read_holders(lock) if not (h.host == HOST and h.pid == mine)]
    try:
        write_holders(lock, rest)
    except OSError:
        pass  # the folder was removed meanwhile (stage 0's work folder)


def check_free(run_dir: str | Path) -> None:
    """RunLocked if live processes outside this process's ancestry hold the folder's lock; reads only (the
    checks a command makes before it writes anything; `acquire` decides)."""
    lock = (Path(run_dir) / LOCK_NAME).absolute()
    if lock in _HELD:
        return
    live = [h for h in read_holders(lock) if holder_alive(h)]
    family = {os.getpid()} | _ancestors()
    if live and not any(h.host == HOST and h.pid in family for h in live):
        raise RunLocked(_busy_message(lock.parent, live))


def acquire(run_dir: str | Path, wait_s: float = 0.0) -> None:
    acquire_file(Path(run_dir) / LOCK_NAME, wait_s)


def release(run_dir: str | Path) -> None:
    release_file(Path(run_dir) / LOCK_NAME)


def holds(run_dir: str | Path) -> bool:
    return (Path(run_dir) / LOCK_NAME).absolute() in _HELD


@contextlib.contextmanager
def scope():
    """Locks taken inside the block are given back when it ends (however it ends)."""
    _SCOPES.append([])
    try:
        yield
    finally:
        for lock in reversed(_SCOPES.pop()):
            release_file(lock)


def release_all() -> None:
    for lock in list(_HELD):
        _HELD[lock] = 1
        release_file(lock)


atexit.register(release_all)
