"""Decoded images kept on disk for the epochs after the first (issue 27): a uint8 memory-mapped file per data set.

A stage that streams its images (harness/data/streaming.py) decodes every image again each epoch: PNG decode, pad
to square, resize. `PixelCache` stores each image's decoded, resized RGB pixels (exactly what
harness/data/datasets.py `load_image` returns) in one file, `[n, size, size, 3]` uint8 plus one ready flag per
image, filled the first time an image is read and read back after. The pixels come back as the same PIL image,
so every number downstream is unchanged. Memory stays flat in the data set's size: the file's pages belong to the
page cache (reclaimable, shared by the DataLoader workers that map it), not to the process's heap.

The file is opened lazily in each process (a pickled cache reopens it), so worker processes, forked or spawned,
share one file; two processes that decode the same image write the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image


class PixelCache:
    """Decoded `size` x `size` RGB images of `paths` (slot k = paths[k]) in `folder/pixels-<size>-<hash>.u8` (the
    hash of the path list: data sets sharing a folder get their own files)."""

    def __init__(self, folder: str | Path, size: int, paths: Sequence[str | Path]):
        self.slots = {str(p): k for k, p in enumerate(dict.fromkeys(str(p) for p in paths))}
        self.size = size
        digest = hashlib.sha256("\n".join(self.slots).encode()).hexdigest()[:12]
        self.path = Path(folder) / f"pixels-{size}-{digest}.u8"
        self._pixels: np.memmap | None = None
        self._ready: np.memmap | None = None
        Path(folder).mkdir(parents=True, exist_ok=True)
        n = max(1, len(self.slots))
        nbytes = n * (size * size * 3 + 1)
        if not self.path.is_file() or self.path.stat().st_size != nbytes:
            self._create(nbytes)

    def _create(self, nbytes: int) -> None:
        """The empty file (sparse: blocks are allocated as images are written), made under a temporary name and
        then linked in: a process that finds no file never truncates one that another process has just created
        and is writing through its mapping (two evaluations of one test split start at the same moment)."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.truncate(nbytes)
        try:
            if self.path.is_file() and self.path.stat().st_size != nbytes:
                os.replace(tmp, self.path)  # a stale file of another layout; a process mapping it keeps its inode
            else:
                os.link(tmp, self.path)
        except FileExistsError:
            pass  # another process created it first: use theirs
        finally:
            tmp.unlink(missing_ok=True)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_pixels": None, "_ready": None}

    def _open(self) -> None:
        n, s = max(1, len(self.slots)), self.size
        self._pixels = np.memmap(self.path, dtype=np.uint8, mode="r+", shape=(n, s, s, 3))
        self._ready = np.memmap(self.path, dtype=np.uint8, mode="r+", shape=(n,), offset=n * s * s * 3)

    def get(self, path: str | Path, decode) -> Image.Image:
        """The image at `path`: from the file when it is there, else `decode(path)` (an RGB PIL image of
        size x size), stored for the next read. Paths outside the cache are decoded every time."""
        slot = self.slots.get(str(path))
        if slot is None:
            return decode(path)
        if self._pixels is None:
            self._open()
        if self._ready[slot]:
            return Image.fromarray(np.array(self._pixels[slot]), mode="RGB")
        image = decode(path)
        if image.mode != "RGB" or image.size != (self.size, self.size):
            return image
        self._pixels[slot] = np.asarray(image)
        self._ready[slot] = 1
        return image


def stage_pixel_folder(run_dir: str | Path) -> tempfile.TemporaryDirectory:
    """A folder inside a stage run for the pixels its epochs read again (`.name`; warm-up, SFT, RL prompts): each
    image decoded once per run, not once per epoch. Removed by `.cleanup()` when the stage ends, or when the
    object is collected (a stage that fails or is preempted); each process of a data-parallel run has its own."""
    return tempfile.TemporaryDirectory(prefix="pixels-", dir=run_dir)
