"""The original message of an error raised in a DataLoader worker process.

torch re-raises a worker's exception in the main process as the same type whose message is a wrapper: "Caught
ValueError in DataLoader worker process 0." followed by the worker's whole traceback, so the first line (what the
command line prints) no longer names the file, key or value. `original_message` gives the worker's own message
back (issue 49)."""

from __future__ import annotations

import re

_HEADER = re.compile(r"Caught (\w+) in DataLoader worker process \d+\.?")
_FRAME = '  File "'


def original_message(text: str) -> str | None:
    """The message of the exception a worker raised, from the text of its re-raised wrapper (None when `text` is
    not such a wrapper, or holds no traceback to read it from)."""
    lines = text.split("\n")
    head = _HEADER.match(lines[0].strip())
    if head is None:
        return None
    frames = [i for i, line in enumerate(lines) if line.startswith(_FRAME)]
    if not frames:
        return None
    i = frames[-1] + 1
    while i < len(lines) and lines[i].startswith("    "):  # the frame's source line and its ^^^ markers
        i += 1
    if i >= len(lines):
        return None
    name, sep, message = lines[i].partition(":")
    if name.rsplit(".", 1)[-1] != head.group(1):
        return None
    return "\n".join([message.strip(), *lines[i + 1:]]).strip() if sep else ""
