"""Reading a W&B offline run folder back in the tests: the history rows its `run-<id>.wandb` file holds.

wandb (0.31) ships no Python reader of that file (`wandb sync` reads it in its Go core), so this reads the
container: a 7-byte file header, then LevelDB-log blocks of 32 KiB whose records (4-byte checksum, 2-byte length,
1-byte type: full, first, middle, last) carry serialized `wandb_internal_pb2.Record`s.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[bytes]:
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B run file"
    out, buf, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < HEADER:  # the block's tail is padding
            pos += room
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if pos + HEADER + length > len(data):  # a record still being written
            break
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind == FULL:
            out.append(chunk)
        elif kind == FIRST:
            buf = chunk
        elif kind == MIDDLE:
            buf += chunk
        elif kind == LAST:
            out.append(buf + chunk)
            buf = b""
    return out


def parsed(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2 as pb

    out = []
    for raw in records(path):
        rec = pb.Record()
        rec.ParseFromString(raw)
        out.append(rec)
    return out


def finished_records(path: Path, timeout_s: float = 300.0) -> list:
    """The records of a run file once W&B's writer has written the run's `exit` record (its last). `run.finish()`
    returns when the service has the exit, not when its writer process has put every record on disk, so a read right
    after it can miss rows on a loaded machine (issue 46); the wait is bounded, and a file that never finishes
    fails with what it holds."""
    deadline = time.monotonic() + timeout_s
    while True:
        recs = parsed(path)
        if recs and recs[-1].WhichOneof("record_type") == "exit":
            return recs
        if time.monotonic() > deadline:
            kinds = [r.WhichOneof("record_type") for r in recs]
            raise AssertionError(f"{path}: no exit record after {timeout_s:.0f} s (records: {kinds})")
        time.sleep(0.2)


def history(run_folder: Path) -> list[dict]:
    """The logged rows of an offline run folder (`wandb/offline-run-*`), each {key: value} with `_step`, read once
    the run's file is complete."""
    (path,) = Path(run_folder).glob("run-*.wandb")
    rows = []
    for rec in finished_records(path):
        if rec.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in rec.history.item})
    return rows


def offline_runs(run_dir: Path) -> list[Path]:
    return sorted((Path(run_dir) / "wandb").glob("offline-run-*"))
