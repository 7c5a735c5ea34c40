"""Config YAML read with YAML 1.2's booleans: only true/false.

PyYAML follows YAML 1.1, where yes/no/on/off are booleans too; string fields that take such words as values
(`eval.radgraph: off`) were read as False and refused as "must be a string".
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class _Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader, but only true/false are booleans (YAML 1.2's core schema). YAML 1.1 also reads
    yes/no/on/off as booleans, which turned string values such as `eval.radgraph=off` into False."""


_BOOL_TAG = "tag:yaml.org,2002:bool"
_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def parse_yaml(text: str) -> Any:
    """One YAML document, booleans as in YAML 1.2 (only true/false): every config file and override reads this way."""
    return yaml.load(text, Loader=_Yaml12Loader)  # noqa: S506 (a SafeLoader subclass)
