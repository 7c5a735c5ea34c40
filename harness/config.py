"""Run configuration: dataclasses, YAML loading, dotted overrides and validation.

One `RunConfig` describes any stage; each stage reads the sections it needs. Every field documents where its
default comes from (REVA-PO Supp. D.2 = the paper's hyperparameters; DESIGN.md = the project's own choice).
A YAML file may set any subset of fields; `a.b=value` overrides are applied on top, values parsed as YAML.
Unknown keys and values of the wrong type are errors that name the key and the file.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names it."""


@dataclass
class DataConfig:
    # "phantom" (the project's synthetic set), "iu_xray" or "mimic_cxr" (R2Gen annotation.json).
    dataset: str = "phantom"
    # Path to annotation.json (R2Gen format or REVA-PO's annotation_with_categories.json).
    # For the phantom set, left empty: the set is synthesized into `synth_dir` on first use.
    annotation: str | None = None
    image_dir: str | None = None
    synth_dir: str = "runs/data/phantom"
    synth_n: int = 1500
    synth_seed: int = 0
    synth_image_size: int = 128
    # Cap on samples per split (None = all); handy for smoke runs.
    max_train: int | None = None
    max_val: int | None = None
    max_test: int | None = None


@dataclass
class ModelConfig:
    # "tiny" builds a small Qwen2.5-VL from a config; "qwen2.5-vl-3b"/"qwen2.5-vl-7b" load `path`.
    preset: str = "tiny"
    # Local folder (or hub id when the network allows) of the base model; tiny: built by stage 0.
    path: str | None = None
    dtype: str = "float32"
    # Square image side fed to the VLM (official code: pad to square, resize to 336; tiny: 112).
    image_size: int = 112
    # LoRA of stage 2/3 (REVA-PO Supp. D.2: r = alpha = 32, dropout 0.1) on all linear layers of the
    # vision encoder and the LLM; the merger trains fully.
    lora_r: int = 32
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    # Tiny preset sizes (DESIGN.md: text hidden ~64, 2 layers; vision ~32 wide, 1 block).
    tiny_text_hidden: int = 64
    tiny_text_layers: int = 2
    tiny_vision_hidden: int = 32
    tiny_vision_depth: int = 1
    tiny_vocab_size: int = 1200


@dataclass
class TrainConfig:
    epochs: float = 1.0
    batch_size: int = 16
    lr: float = 1e-3
    weight_decay: float = 0.0
    # "cosine" (stage 1, Supp. D.2), "constant", "warmup_constant" (stage 3, official code).
    scheduler: str = "cosine"
    warmup_steps: int = 0
    grad_clip: float = 1.0
    # Stop after this many optimizer steps (None = run all epochs).
    max_steps: int | None = None
    log_every: int = 10
    # Checkpoint every k optimizer steps (0 = only at the end); used to resume.
    checkpoint_every: int = 0


@dataclass
class PromptConfig:
    instruction: str = "Write the findings section of the chest X-ray report."
    # Stage 2 (REVA-PO Sec. 3.2): predicted positive disease names are inserted into the instruction.
    disease_template: str = "The classifier suggests: {diseases}."
    max_report_tokens: int = 100


@dataclass
class ClassifierConfigSection:
    # Folder written by `regbench classifier train` (classifier.safetensors + classifier.json).
    dir: str | None = None
    arch: str = "tiny_vit"
    img_size: int = 112
    epochs: int = 20
    batch_size: int = 64
    lr: float = 6.25e-5
    weight_decay: float = 0.05
    adam_beta2: float = 0.999
    pretrained_path: str | None = None


@dataclass
class PretrainConfig:
    """Stage 0, tiny preset only: a full-parameter pretrain that stands in for the pretrained LVLM.

    It uses its own synthetic set (a different seed from the task data) so that stages 1-2 still have work.
    The result is cached under `cache_dir` by a hash of this section and the tiny model sizes.
    """

    n: int = 2000
    data_seed: int = 1000
    epochs: float = 4.0
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 20


@dataclass
class GenerationConfig:
    # Evaluation decodes greedily (official code); sampling options are for RL rollouts.
    max_new_tokens: int = 100
    min_new_tokens: int = 0
    repetition_penalty: float = 1.0
    batch_size: int = 32


@dataclass
class RunConfig:
    seed: int = 0
    # Run directory; records and checkpoints go here.
    out_dir: str = "runs/run"
    # Stage checkpoint to start from (a folder written by an earlier stage); None = the base model.
    init_from: str | None = None
    # Cache for stage 0 (tiny base pretraining), keyed by config hash.
    cache_dir: str | None = None
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    classifier: ClassifierConfigSection = field(default_factory=ClassifierConfigSection)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)


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
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"override '{item}': value is not valid YAML ({e})") from e
        node = data
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override '{item}': '{p}' is not a section")
        node[parts[-1]] = value
    return data


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    # `base:` names another YAML (relative to this file) whose values this one overrides.
    base = data.pop("base", None)
    if base:
        merged = load_yaml(path.parent / base)
        _deep_update(merged, data)
        data = merged
    return data


def _deep_update(dst: dict, src: dict) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _deep_update(dst[k], v)
        else:
            dst[k] = v


def load_config(path: str | Path | None = None, overrides: list[str] | None = None, cls: type = RunConfig):
    """Defaults <- YAML file (optional) <- dotted overrides; validated."""
    data = load_yaml(path) if path else {}
    apply_overrides(data, list(overrides or []))
    source = str(path) if path else "<overrides>"
    cfg = from_dict(cls, data, source=source)
    validate(cfg, source)
    return cfg


def validate(cfg: RunConfig, source: str = "<config>") -> None:
    def need(cond: bool, key: str, value: Any, why: str) -> None:
        if not cond:
            raise ConfigError(f"{source}: '{key}' = {value!r} {why}")

    if isinstance(cfg, RunConfig):
        need(cfg.data.dataset in ("phantom", "iu_xray", "mimic_cxr"), "data.dataset", cfg.data.dataset,
             "must be phantom, iu_xray or mimic_cxr")
        need(cfg.data.dataset == "phantom" or cfg.data.annotation is not None, "data.annotation",
             cfg.data.annotation, "is required for real data sets")
        need(cfg.data.synth_n >= 10, "data.synth_n", cfg.data.synth_n, "must be >= 10")
        need(cfg.model.preset in ("tiny", "qwen2.5-vl-3b", "qwen2.5-vl-7b"), "model.preset", cfg.model.preset,
             "must be tiny, qwen2.5-vl-3b or qwen2.5-vl-7b")
        need(cfg.model.dtype in ("float32", "bfloat16", "float16"), "model.dtype", cfg.model.dtype,
             "must be float32, bfloat16 or float16")
        need(cfg.model.image_size % 28 == 0, "model.image_size", cfg.model.image_size,
             "must be a multiple of 28 (patch 14 x merge 2)")
        need(cfg.model.lora_r > 0, "model.lora_r", cfg.model.lora_r, "must be > 0")
        need(0 <= cfg.model.lora_dropout < 1, "model.lora_dropout", cfg.model.lora_dropout, "must be in [0, 1)")
        need(cfg.train.epochs > 0, "train.epochs", cfg.train.epochs, "must be > 0")
        need(cfg.train.batch_size > 0, "train.batch_size", cfg.train.batch_size, "must be > 0")
        need(cfg.train.lr > 0, "train.lr", cfg.train.lr, "must be > 0")
        need(cfg.train.weight_decay >= 0, "train.weight_decay", cfg.train.weight_decay, "must be >= 0")
        need(cfg.train.scheduler in ("cosine", "constant", "warmup_constant"), "train.scheduler",
             cfg.train.scheduler, "must be cosine, constant or warmup_constant")
        need(cfg.train.max_steps is None or cfg.train.max_steps > 0, "train.max_steps", cfg.train.max_steps,
             "must be > 0 or null")
        need(cfg.generation.max_new_tokens > 0, "generation.max_new_tokens", cfg.generation.max_new_tokens,
             "must be > 0")
        need(cfg.generation.min_new_tokens <= cfg.generation.max_new_tokens, "generation.min_new_tokens",
             cfg.generation.min_new_tokens, "must be <= generation.max_new_tokens")
