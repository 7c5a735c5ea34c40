"""Leaks by content (issue 49): an image file of one split that has the same bytes as an image of another split
under another name (a test image copied into the training data) is a leak the path check cannot see.

Cheap at scale: only files whose sizes agree across splits are read, first their head (4 KB), then, where the
heads agree too, the whole file (sha256); a MIMIC-CXR-sized set costs a stat per image and a few reads."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path

HEAD_BYTES = 4096

Entry = tuple[str, str, Path]  # split, study id, image path


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read(HEAD_BYTES)).digest()


def _whole(path: Path) -> bytes:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").digest()


def _cross_split_groups(entries: Iterable[Entry], key: Callable[[Path], object]) -> list[list[Entry]]:
    """Entries grouped by key(path), only the groups that span two splits or more (in first-seen order)."""
    groups: dict[object, list[Entry]] = {}
    for e in entries:
        try:
            k = key(e[2])
        except OSError:  # a missing image is the image check's to report
            continue
        groups.setdefault(k, []).append(e)
    return [g for g in groups.values() if len({e[0] for e in g}) > 1]


def first_content_leak(splits: dict[str, list]) -> tuple[Entry, Entry] | None:
    """The first two images of different splits with the same bytes (in data order), or None."""
    entries = [(split, s.id, Path(p)) for split, samples in splits.items() for s in samples for p in s.image_paths]
    for same_size in _cross_split_groups(entries, lambda p: os.stat(p).st_size):
        for same_head in _cross_split_groups(same_size, _head):
            for same in _cross_split_groups(same_head, _whole):
                first = same[0]
                return first, next(e for e in same if e[0] != first[0])
    return None


def check_content_leak(splits: dict[str, list], path: str | Path) -> None:
    """ValueError naming both images, their splits and studies, and the fix."""
    found = first_content_leak(splits)
    if found is None:
        return
    (s1, id1, p1), (s2, id2, p2) = found
    raise ValueError(f"{path}: image '{p2}' of the {s2} split (study {id2!r}) has the same bytes as '{p1}' of the "
                     f"{s1} split (study {id1!r}) (a leak: a copy of an image under another name); remove one of "
                     "them, or set data.leak_check=path to compare paths only")
