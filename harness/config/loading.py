"""Building configs: YAML files (with `base:` chains and experiments/ presets), dotted overrides, nested dicts.

A YAML file may set any subset of fields; `a.b=value` overrides are applied on top, values parsed as YAML.
Unknown keys and values of the wrong type are errors that name the key and the file.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from harness.config.retired import check_retired, strip_retired
from harness.config.run import RunConfig
from harness.config.validation import validate
from harness.config.yaml12 import parse_yaml
from harness.errors import ConfigError

# ---------------------------------------------------------------------------------------------------------
# Building dataclasses from nested dicts, with errors that name the key.


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str, source: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key, source)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{source}: '{key}' = {value!r} does not fit type {tp}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: '{key}' must be a mapping, got {value!r}")
        return from_dict(tp, value, source=source, prefix=f"{key}.")
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{source}: '{key}' must be a list, got {value!r}")
        (inner,) = typing.get_args(tp)[:1] or (Any,)
        return [_coerce(v, inner, f"{key}[{i}]", source) for i, v in enumerate(value)]
    if origin is dict or tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{source}: '{key}' must be true/false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{source}: '{key}' must be an integer, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            # YAML 1.1 reads "1e-3" (no dot) as a string; accept any float literal.
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{source}: '{key}' must be a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{source}: '{key}' must be a string, got {value!r}")
    raise ConfigError(f"{source}: '{key}' has unsupported type {_type_name(tp)}")


def from_dict(cls: type, data: dict, source: str = "<config>", prefix: str = ""):
    """Build dataclass `cls` from a nested dict; unknown keys are errors naming the key and valid ones."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    data = strip_retired(data, prefix)
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"{source}: unknown key '{prefix}{unknown[0]}'; valid keys here: {', '.join(sorted(names))}"
        )
    kwargs = {k: _coerce(v, hints[k], prefix + k, source) for k, v in data.items()}
    return cls(**kwargs)


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply `a.b.c=value` overrides (value parsed as YAML) to a nested dict, in place."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like key.sub=value")
        key, raw = item.split("=", 1)
        try:
            value = parse_yaml(raw) if raw != "" else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"override '{item}': value is not valid YAML ({e})") from e
        set_key(data, key.strip(), value, f"override '{item}'")
    return data


def set_key(data: dict, key: str, value: Any, where: str) -> None:
    """Set dotted `key` (a.b.c) of a nested dict in place, making the sections on the way."""
    node = data
    parts = key.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{where}: '{p}' is not a section")
    node[parts[-1]] = value


def read_yaml_mapping(path: str | Path, what: str = "config file") -> dict:
    """A YAML file whose top level is a mapping, with errors naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} not found: {path}")
    try:
        data = parse_yaml(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}); save the file as UTF-8") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return data


def load_yaml(path: str | Path, _chain: tuple[Path, ...] = ()) -> dict:
    path = Path(path)
    if path.resolve() in _chain:
        names = " -> ".join(str(p) for p in (*_chain, path.resolve()))
        raise ConfigError(f"{path}: 'base:' cycle ({names}); remove one of these base: lines")
    data = read_yaml_mapping(path)
    # `base:` names another YAML (relative to this file) whose values this one overrides.
    base = data.pop("base", None)
    if base is not None and not isinstance(base, str):
        raise ConfigError(f"{path}: 'base' = {base!r} must be a file name")
    if base:
        merged = load_yaml(path.parent / base, (*_chain, path.resolve()))
        _deep_update(merged, data)
        data = merged
    return data


def build_config(data: dict, sets: dict[str, Any] | None = None, source: str = "<config>", cls: type = RunConfig):
    """The validated config `cls` of a nested mapping, with dotted `sets` (key -> value, e.g. {"seed": 1,
    "data.synth_dir": "/x"}) on top; no text round trip. Errors name `source` and the key."""
    data = check_retired(expand_dotted(data, source), source)
    for key, value in (sets or {}).items():
        set_key(data, key, value, source)
    cfg = from_dict(cls, data, source=source)
    validate(cfg, source)
    return cfg


def expand_dotted(data: dict, where: str) -> dict:
    """A new nested dict in which every `a.b: v` key (at any depth; a study may write `common: {data.max_test: 6}`)
    is the section path {a: {b: v}}; keys apply in order, a later one overriding an earlier one's leaves."""
    out: dict = {}
    for key, value in data.items():
        if isinstance(value, dict):
            value = expand_dotted(value, where)
        # A key with a colon is a name, never a section path: `rl.reward: {my_pkg.rewards:fn: 0.5}`.
        *parents, last = [str(key)] if ":" in str(key) else str(key).split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{where}: '{p}' is not a section")
        if isinstance(value, dict) and isinstance(node.get(last), dict):
            _deep_update(node[last], value)
        else:
            node[last] = copy.deepcopy(value)
    return out


def _deep_update(dst: dict, src: dict) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _deep_update(dst[k], v)
        else:
            dst[k] = v


# `resources:` is what each stage run asks a Slurm cluster for (harness/experiments/resources.py); a single stage
# command ignores it.
PRESET_KEYS = ("preset", "description", "common", "stages", "resources")


def preset_overrides(doc: dict, source: str) -> dict:
    """The RunConfig sections and fields set at the top level of a file over a preset (`base: presets/tiny.yaml`
    then `rl: {reward: ...}`): the file's own values, which override the preset's for every stage that reads
    them. Any other key outside PRESET_KEYS is refused, naming both forms that work."""
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    unknown = sorted(set(doc) - set(PRESET_KEYS) - fields)
    if unknown:
        raise ConfigError(f"{source}: unknown key '{unknown[0]}' in a preset; valid: {', '.join(PRESET_KEYS)}, or a "
                          f"config section over every stage ({', '.join(sorted(fields))}), e.g. `rl: {{reward: "
                          "bleu4}` or `stages: {rl: {rl: {reward: bleu4}}}` for one stage")
    return {k: v for k, v in doc.items() if k in fields}


def stage_view(doc: dict, stage: str | None, source: str) -> dict:
    """A RunConfig mapping from an experiments/ preset file (`common` deep-merged with `stages.<stage>`, then the
    file's own top-level sections: `base: presets/tiny.yaml` with `rl: {reward: ...}` sets rl.reward)."""
    if not any(k in doc for k in ("common", "stages")):
        return doc
    if stage is None:
        raise ConfigError(f"{source} is an experiments preset (common/stages sections); use it with a stage "
                          "command (regbench train STAGE, classifier train, eval) or `regbench experiment run`")
    top = preset_overrides(doc, source)
    data = copy.deepcopy(dict(doc.get("common") or {}))
    _deep_update(data, copy.deepcopy(dict((doc.get("stages") or {}).get(stage) or {})))
    _deep_update(data, copy.deepcopy(top))
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None, cls: type = RunConfig,
                stage: str | None = None):
    """Defaults <- YAML file (optional; a plain RunConfig mapping, or an experiments/ preset read for `stage`)
    <- dotted overrides; validated."""
    source = str(path) if path else "<overrides>"
    data = check_retired(stage_view(load_yaml(path), stage, str(path)), source) if path else {}
    overrides = list(overrides or [])
    if path and overrides:
        from_dict(cls, data, source=source)  # the file's own errors name the file, not the overrides
    # A bad value set on the command line is blamed on that override, not on the file it overrides.
    sources = {}
    for item in overrides:
        apply_overrides(data, [item])
        data = check_retired(data, f"override '{item}'")
        sources[item.split("=", 1)[0].strip()] = f"override '{item}'"
        from_dict(cls, data, source=f"override '{item}'")  # valid before this item: an error is this item's
    if stage and cls is RunConfig and "out_dir" not in data:
        data["out_dir"] = f"runs/{stage}"  # stages never share a default run folder
    cfg = from_dict(cls, data, source=source)
    validate(cfg, source, sources)
    return cfg


