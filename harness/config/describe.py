"""A config as YAML with each field's help as a comment above it (`regbench config show`); the text loads back
(`regbench train STAGE file.yaml`) to the same config."""

from __future__ import annotations

import dataclasses
import textwrap

import yaml

from harness.config.yaml12 import parse_yaml

WIDTH = 116


def field_help(section: type) -> dict[str, str]:
    """name -> help text of every field of a config dataclass."""
    return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(section)}


def _scalar(value) -> str:
    """One value as a flow-style YAML text on one line that loads back as the same value."""
    for readable in (True, False):
        text = yaml.safe_dump(value, default_flow_style=True, width=10**9, allow_unicode=readable).strip()
        text = text.removesuffix("\n...").removesuffix("...").strip()
        if readable and parse_yaml(text) != value:
            continue  # e.g. U+0085 (NEL) written raw is read back as a line break: escape non-ASCII instead
        return text
    return text


def _comment(text: str, indent: str) -> list[str]:
    # Not at hyphens: a help's "warm-up" or "Medical-MAE" stays one word (the lines join back with spaces).
    return [f"{indent}# {line}" for line in textwrap.wrap(text, WIDTH - len(indent) - 2, break_on_hyphens=False)]


def commented_yaml(cfg, header: str | None = None) -> str:
    """Every field of `cfg` (a config dataclass, sections nested) as `key: value` under its help comment."""
    lines = _comment(header, "") if header else []
    _emit(cfg, "", lines)
    return "\n".join(lines) + "\n"


def _emit(obj, indent: str, lines: list[str]) -> None:
    helps = field_help(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and not indent:
            lines.append("")  # a blank line before each section
        lines.extend(_comment(helps[f.name], indent))
        if dataclasses.is_dataclass(value):
            lines.append(f"{indent}{f.name}:")
            _emit(value, indent + "  ", lines)
        else:
            lines.append(f"{indent}{f.name}: {_scalar(value)}")
