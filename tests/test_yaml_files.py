"""Every YAML file the project ships (presets, studies, searches, the official-keys table) has no duplicate key:
PyYAML keeps the last of two equal keys without a word, so a second `prompt:` line in a preset silently replaced
the whole section (a merge did exactly that once)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted([*ROOT.glob("experiments/**/*.yaml"), *ROOT.glob("docs/*.yaml")])


class _NoDuplicates(yaml.SafeLoader):
    pass


def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    twice = sorted({str(k) for k in keys if keys.count(k) > 1})
    if twice:
        raise yaml.constructor.ConstructorError(None, None, f"duplicate key(s) {twice}", node.start_mark)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_NoDuplicates.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_no_duplicate_keys(path):
    yaml.load(path.read_text(encoding="utf-8"), Loader=_NoDuplicates)  # noqa: S506 - a SafeLoader subclass


def test_the_check_sees_a_duplicate(tmp_path):
    with pytest.raises(yaml.constructor.ConstructorError, match="prompt"):
        yaml.load("common:\n  prompt: {a: 1}\n  prompt: {b: 2}\n", Loader=_NoDuplicates)  # noqa: S506
