"""Config fields that were removed because nothing read them (issue 47), and the value each held then.

A removed field still enters the two hashes of a resolved config (harness/experiments/resolve.py: config_key, the
stage run's key; harness/runs/state.py: config_hash, the manifest's) at that value, so every earlier run keeps its
key. A config file or override that still sets one gets one line: at the old value it is accepted with a
FutureWarning (the field never changed anything, so the run is the one it always was); at any other value it is
refused, since the run it asks for (a field that does something) does not exist. A stored record (a run's
manifest.json, a job file) that holds one is read without a word: from_dict leaves it out.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

from harness.errors import ConfigError

# dotted field -> the value it held (its default) when it was removed, and why it went
RETIRED: dict[str, tuple[Any, str]] = {
    "train.log_every": (10, "read by nothing: no loop logs by it"),
}


def check_retired(data: dict, source: str) -> dict:
    """A copy of a config mapping (nested sections) as a user wrote it, without the retired fields: one at its old
    value is dropped with a FutureWarning, one at another value is a ConfigError naming the key and the value."""
    out = copy.deepcopy(data)
    for dotted, (old, why) in RETIRED.items():
        *parents, last = dotted.split(".")
        node = out
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if not isinstance(node, dict) or last not in node:
            continue
        value = node.pop(last)
        if value != old:
            raise ConfigError(f"{source}: '{dotted}' = {value!r}: the field was removed ({why}); delete the key")
        warnings.warn(f"{source}: '{dotted}' was removed ({why}); the key is ignored, delete it", FutureWarning,
                      stacklevel=3)
    return out


def strip_retired(section: dict, prefix: str) -> dict:
    """One section of a stored record (a manifest's config, a job file: `prefix` is its dotted path and a dot)
    without the retired fields, whatever their value: what earlier runs wrote is read as it was."""
    return {k: v for k, v in section.items() if prefix + k not in RETIRED}


def with_retired(record: dict) -> dict:
    """A copy of a resolved config's record (harness.config.to_dict) with each retired field at its old value: what
    the hashes of a run read, so that they are the ones the field's removal found."""
    out = copy.deepcopy(record)
    for dotted, (old, _) in RETIRED.items():
        *parents, last = dotted.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node.setdefault(last, old)
    return out
