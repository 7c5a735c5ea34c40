"""Bounds in messages equal the bounds enforced: for every integer knob of RunConfig, a refused value's message
states a bound ("must be >= B", "> B", "in [lo, hi]") that the smallest accepted value then satisfies exactly.
Before the fix, `rl.group_size=-1` was told ">= 0" and 0 was then refused with ">= 2" (issue 26); the phantom
set's image size passed the config at 28-31 and was refused by the generator."""

from __future__ import annotations

import dataclasses
import re

import pytest

from harness.config import ConfigError, RunConfig, load_config

# Scanned values: below, at and above every bound the integer knobs have (1, 2, 28, 32, 10, ...).
VALUES = [-3, -1, 0, 1, 2, 3, 9, 10, 27, 28, 31, 32, 33, 56]


def _int_keys(obj=None, prefix: str = "") -> list[str]:
    obj = RunConfig() if obj is None else obj
    keys = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            keys += _int_keys(value, f"{prefix}{f.name}.")
        elif isinstance(value, int) and not isinstance(value, bool):
            keys.append(f"{prefix}{f.name}")
    return keys


def _refusal(key: str, value: int) -> str | None:
    """The message refusing `key=value` when it names `key`, else None (accepted, or refused for another key)."""
    try:
        load_config(None, [f"{key}={value}"])
    except ConfigError as e:
        return str(e) if f"'{key}' = " in str(e) else None
    return None


def _accepts(bound: str, value: int) -> bool:
    """Does `value` satisfy the bound a message states?"""
    m = re.search(r"must be (>=|>) (-?\d+)", bound)
    if m:
        b = int(m.group(2))
        return value >= b if m.group(1) == ">=" else value > b
    m = re.search(r"must be in ([\[(])(-?[\d.]+), (-?[\d.]+)([\])])", bound)
    if m:
        lo, hi = float(m.group(2)), float(m.group(3))
        return (value >= lo if m.group(1) == "[" else value > lo) and (value <= hi if m.group(4) == "]" else
                                                                         value < hi)
    return True  # a relation to another key (min_new_tokens <= max_new_tokens): not a number to compare


KEYS = _int_keys()


def test_there_are_integer_knobs_to_scan():
    assert len(KEYS) >= 40 and "rl.group_size" in KEYS and "data.synth_image_size" in KEYS


@pytest.mark.parametrize("key", KEYS)
def test_the_bound_a_message_states_is_the_bound_enforced(key):
    refused = {v: _refusal(key, v) for v in VALUES}
    for v, message in refused.items():
        if message is None:
            continue
        m = re.search(r"must be [^;(]*", message)
        assert m, message
        stated = m.group(0)
        if not re.search(r"(>=|>) -?\d|in [\[(]", stated):
            continue  # "a multiple of 28", "<= rl.max_new_tokens": no number bound to compare
        assert not _accepts(stated, v), f"{key}={v} refused with '{stated}', which {v} satisfies"
        # every larger scanned value the stated bound admits is accepted (or refused for a relation to another
        # key, whose message states no number)
        for w in VALUES:
            if w > v and _accepts(stated, w) and refused[w] is not None:
                other = re.search(r"must be [^;(]*", refused[w]).group(0)
                assert not re.search(r"(>=|>) -?\d|in [\[(]", other), \
                    f"{key}={v}: '{stated}', but {w} (which that admits) is refused with '{other}'"


def test_group_size_states_its_own_bound_at_once():
    for v in (-1, 0, 1):
        assert "must be >= 2" in _refusal("rl.group_size", v)


def test_synth_image_size_bound_is_the_generators():
    from harness.data.phantom import PhantomConfig
    from harness.data.phantom.config import MIN_IMAGE_SIZE

    assert "must be >= 32" in _refusal("data.synth_image_size", MIN_IMAGE_SIZE - 2)
    assert _refusal("data.synth_image_size", MIN_IMAGE_SIZE) is None
    PhantomConfig(n=10, image_size=MIN_IMAGE_SIZE)  # the generator takes the smallest size the config admits
    with pytest.raises(ValueError, match=">= 32"):
        PhantomConfig(n=10, image_size=MIN_IMAGE_SIZE - 1)
