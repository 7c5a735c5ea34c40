"""Run configuration: dataclasses, YAML loading, dotted overrides and validation.

One `RunConfig` describes any stage; each stage reads the sections it needs. Every field documents where its
default comes from (REVA-PO Supp. D.2 = the paper's hyperparameters; DESIGN.md = the project's own choice).
A YAML file may set any subset of fields; `a.b=value` overrides are applied on top, values parsed as YAML.
Unknown keys and values of the wrong type are errors that name the key and the file.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError  # noqa: F401 - raised here, and importable from here as before


@dataclass
class DataConfig:
    # "phantom" (the project's synthetic set), "iu_xray" or "mimic_cxr" (R2Gen annotation.json).
    dataset: str = "phantom"
    # Path to annotation.json (R2Gen format or REVA-PO's annotation_with_categories.json).
    # For the phantom set, left empty: the set is synthesized into `synth_dir` on first use.
    annotation: str | None = None
    image_dir: str | None = None
    # Image paths in the annotation must stay inside image_dir (no absolute path, no `..`): a file copied from
    # elsewhere cannot make a run read arbitrary files. true lifts that for an annotation file you trust.
    allow_outside_image_dir: bool = False
    # Views per study: null = the data set's default (every view for IU-Xray, 1-5 per study, as REVA-PO's
    # official loader; the first for MIMIC-CXR, as R2Gen's and the official loader); N = at most the first N.
    views: int | None = None
    synth_dir: str = "runs/data/phantom"
    synth_n: int = 1500
    synth_seed: int = 0
    synth_image_size: int = 128
    # Cap on samples per split (None = all); handy for smoke runs.
    max_train: int | None = None
    max_val: int | None = None
    max_test: int | None = None
    # The REVA-PO RL subset (Supp. D.2): "discard reports that are shorter than 30 tokens ... randomly sample
    # 10k". train_min_tokens drops training reports with fewer whitespace tokens (the cleaned report's words
    # and punctuation; the paper does not say which tokenizer); train_subset "random" draws max_train of the
    # rest at random with train_subset_seed (fixed, so every run seed trains on the same subset; kept in
    # data order), "first" takes the first max_train.
    train_min_tokens: int | None = None
    train_subset: str = "first"
    train_subset_seed: int = 0


@dataclass
class ModelConfig:
    # "tiny" builds a small Qwen2.5-VL from a config; "qwen2.5-vl-3b"/"qwen2.5-vl-7b" load `path`.
    preset: str = "tiny"
    # Local folder (or hub id when the network allows) of the base model; tiny: built by stage 0.
    path: str | None = None
    # Base weights' dtype: null = the preset's (harness/models/presets.py: tiny float32; 3B/7B bfloat16, this
    # project's choice for GPUs with bf16; float16 as on the paper's V100s).
    dtype: str | None = None
    # Where the VLM runs: "auto" = the local GPU (cuda:$LOCAL_RANK under a distributed launch) when CUDA is
    # available, else the CPU; or "cpu", "cuda", "cuda:N". Not part of any run's key: the same run on another
    # device is the same experiment.
    device: str = "auto"
    # Square image side fed to the VLM: null = the preset's (official code: pad to square, resize to 336 for
    # the 3B/7B presets; tiny: 112).
    image_size: int | None = None
    # LoRA of stage 2/3 (REVA-PO Supp. D.2: r = alpha = 32, dropout 0.1) on all linear layers of the
    # vision encoder and the LLM; the merger trains fully.
    lora_r: int = 32
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    # Tiny preset sizes (DESIGN.md: text hidden ~64, 2 layers; vision ~32 wide, 1 block).
    tiny_text_hidden: int = 64
    tiny_text_layers: int = 2
    tiny_vision_hidden: int = 64
    tiny_vision_depth: int = 2
    tiny_vocab_size: int = 1200
    # Recompute activations in the backward pass (transformers' gradient checkpointing, non-reentrant) in the
    # model stages: less memory for more compute (this project; off by default).
    gradient_checkpointing: bool = False

    def __post_init__(self) -> None:
        # The preset owns image size and dtype unless they are set (an unknown preset is left to `validate`).
        from harness.models.presets import PRESETS

        preset = PRESETS.get(self.preset)
        owned = set()
        for key in ("image_size", "dtype"):
            if preset is not None and getattr(self, key) is None:
                setattr(self, key, getattr(preset, key))
                owned.add(key)
        # Not a field (so not in to_dict): which values came from the preset, i.e. may yield to a checkpoint's.
        self._preset_owned = frozenset(owned)


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
    # Samples per forward/backward pass in warm-up and SFT (gradient accumulation up to each process's share of
    # batch_size; the step equals the one-pass step). null = the whole share in one pass (this project).
    micro_batch_size: int | None = None
    # Learning-rate multiplier for the vision tower and merger (1 = the paper's single lr).
    vision_lr_mult: float = 1.0
    # Stop after this many optimizer steps (None = run all epochs).
    max_steps: int | None = None
    log_every: int = 10
    # Checkpoint every k optimizer steps (0 = only at the end); a rerun of the same command resumes from it.
    checkpoint_every: int = 50
    # Under a torchrun / accelerate launch (harness/distributed.py, this project): the timeout of the training
    # collectives, and of the wait while rank 0 loads first (stage 0, data checks, the model). Seconds.
    dist_timeout_s: float = 1800.0
    dist_load_timeout_s: float = 86400.0
    deepspeed: str = field(default="", metadata={"help": (
        "DeepSpeed config JSON (e.g. experiments/deepspeed/zero1.json) for warm-up, SFT and RL under a launch: "
        "ZeRO-1/2 through accelerate's DeepSpeedPlugin (harness/zero.py; the paper trains with DeepSpeed "
        "ZeRO-1, Supp. D.2); its gradient_clipping is set to train.grad_clip. Empty = DDP (this project).")})


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
    # Pooling of the ViT's tokens: "avg" (Medical-MAE fine-tuning, and it trains far better from scratch on the
    # tiny preset) or "token" (CLS).
    global_pool: str = "avg"
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
    epochs: float = 8.0
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 20
    vision_lr_mult: float = 1.0
    # Share of extra "list the findings" examples mixed into stage 0 (a stand-in for the visual question
    # answering a real LVLM is pretrained on; it makes the base look at the image). 0 = reports only.
    findings_task_fraction: float = 1.0
    # Share of extra report examples whose instruction names (noisy) findings, in stage 2's prompt format.
    hint_task_fraction: float = 1.0


@dataclass
class RLConfig:
    """Stage 3 (REVA-PO Sec. 3.3, Algorithm 1). Defaults: the paper's MIMIC-CXR settings (Supp. D.2) and the
    official code where the paper is silent (DESIGN.md "RL objective")."""

    # Regularizer (regularizers/): none | constant | adaptive | rer.
    regularizer: str = "rer"
    # RER bounds, Eq. 7-9 (MIMIC-CXR 0.05/0.10/0.12; IU-Xray 0.05/0.10/0.15). `constant` uses beta_base.
    beta_min: float = 0.05
    beta_base: float = 0.10
    beta_max: float = 0.12
    # Adaptive PPO controller (Ziegler et al. 2019, Sec. 2.2): initial beta = beta_base; kl_target in per-token
    # nats of the loop's KL estimate (their 6 nats per sequence over ~120 report tokens = 0.05; a project choice,
    # regularizers/adaptive.py); kl_horizon in samples, > 0.2 x prompts_per_step x group_size so beta stays > 0.
    kl_target: float = 0.05
    kl_horizon: int = 10000
    # Reference strategy (regularizers/reference/): static | ema | vapr.
    reference: str = "vapr"
    ema_rate: float = 0.01
    ema_period: int = 1
    # VAPR: reset reference, current and old policies to the best every M epochs (M = 3, Supp. D.2).
    reset_every_epochs: int = 3
    # Optional validation every K optimizer steps in addition to each epoch end (None = epoch ends only).
    val_every_steps: int | None = None
    # Old policy synced to the current one every N optimizer steps (N = 16, Supp. D.2). old_sync: "per_epoch"
    # counts N within each epoch and re-syncs at each epoch start (Algorithm 1 lines 4 and 10: `step` runs
    # 1..S in every epoch; the official code does the same); "global" counts optimizer steps over the whole run.
    old_sync_every: int = 16
    old_sync: str = "per_epoch"
    # Which RL policy is saved and tested, the same rule for every arm: "best_val" (the policy with the best
    # validation score s_val, Eq. 10, as the official runner tests) or "final" (the last policy). The run
    # records the step it came from (metrics.json: selected_step). best_includes_start: whether the starting
    # policy (validation at step 0) may be "best"; official: no (best starts at -inf, so VAPR's first reset
    # always lands on a trained policy). Both also define VAPR's anchor (harness/grpo/selection.py).
    select: str = "best_val"
    best_includes_start: bool = False
    # Rollouts: G candidates per prompt from the old policy (G 4, T 0.7, top-p 0.9, top-k off).
    group_size: int = 4
    prompts_per_step: int = 8
    temperature: float = 0.7
    top_p: float = 0.9
    top_k: int = 0
    max_new_tokens: int = 160
    min_new_tokens: int = 80
    repetition_penalty: float = 1.03
    # Surrogate (Eq. 3-5): asymmetric clip (DAPO) and the official code's dual clip c = 10.
    eps_low: float = 0.2
    eps_high: float = 0.28
    dual_clip: float | None = 10.0
    # KL estimator per token (k3 = Eq. 6) and loss aggregation (harness/grpo/core.py aggregate): token_mean
    # (all tokens of the step; the official code, DAPO), group_token_mean (Eq. 3 as written: per group, then the
    # mean over groups), seq_mean_token_mean (original GRPO), dr_grpo (Liu et al. 2025: token sum / (N x
    # max_new_tokens); needs advantage_scale none, as Dr. GRPO also drops the std division).
    kl_estimator: str = "k3"
    aggregation: str = "token_mean"
    # Advantage scale (Eq. 2): "std" divides by the group's std (+1e-6); "none" keeps R - mean (Dr. GRPO).
    advantage_scale: str = "std"
    # Entropy bonus (0 for MIMIC-CXR, 0.001 for IU-Xray).
    entropy_coef: float = 0.0
    # Temperature of the logits used for log-probs/KL/entropy; None = the sampling temperature (official
    # code); 1.0 = the paper's literal equations.
    logprob_temperature: float | None = None
    # Groups whose rewards are all equal: keep (their tokens still count in the denominators and the KL
    # term, official code) or drop (removed from the loss).
    zero_std_groups: str = "keep"
    # Reward (rewards/registry.py).
    reward: str = "bleu4"
    # Options of a registered regularizer / reference strategy that RLConfig has no field for (a plug-in's own
    # knobs, by the class's field names; e.g. {scale: 0.5}). Fields RLConfig has are passed by name already.
    regularizer_args: dict[str, Any] = field(default_factory=dict)
    reference_args: dict[str, Any] = field(default_factory=dict)
    # Validation score: paper Eq. 10 (sum(M) + lambda RG) / (|M| + 1), or official mean(M) + lambda RG,
    # M = BLEU-1..4, METEOR, ROUGE-L; lambda = 0.1. RG from `val_rg_metric`: the paper uses RadGraph F1
    # (radgraph-xl, partial: `radgraph`, needs its weights); the default is the offline clinical-entity F1
    # (`entity_f1`, rewards/entity.py), which runs anywhere; `none` requires lambda = 0.
    val_score: str = "paper"
    val_lambda: float = 0.1
    val_rg_metric: str = "entity_f1"
    val_max_samples: int | None = None
    # Write sampled candidates with rewards/advantages/betas to samples.jsonl every k steps (0 = never).
    samples_every: int = 10
    # DiTPO-style token weighting of the advantages (rewards/token_weights.py): none | tfidf | gradient.
    token_weighting: str = "none"
    token_weight_boost: float = 2.0
    token_weight_max: float | None = None
    # Logit positions upcast to fp32 at once in token_logprobs / token_entropy (None: sized for ~16 MiB).
    logprob_chunk_positions: int | None = None
    # Responses per forward/backward pass (this project): the frozen (old/ref) log-prob passes and the policy's
    # backward run over micro-batches of this many responses, the rollouts over micro-batches of
    # max(1, micro_batch_size // group_size) prompts; the loss normalisers stay those of the whole step, so the
    # gradient equals the one-batch gradient. null = each process's whole share in one pass.
    micro_batch_size: int | None = None
    # A step whose loss or gradient is not finite is skipped (no optimizer step), logged and counted; after this
    # many in a row the run stops with an error naming the first cause, leaving a resumable checkpoint (this
    # project; issue 13).
    max_nonfinite_steps: int = 5


@dataclass
class GenerationConfig:
    # Evaluation decodes greedily (official code); sampling options are for RL rollouts.
    max_new_tokens: int = 100
    min_new_tokens: int = 0
    repetition_penalty: float = 1.0
    batch_size: int = 32
    # Decoding loop of RL rollouts, validation and test (issue 15): "hf" = transformers' `generate`; "lean" =
    # harness/lean_decode.py, the same tokens (tests/harness/test_lean_decode.py: every sampling setting of
    # experiments/, eager and sdpa, fp32 and bf16; on CPU) without generate's per-step overhead; "vllm" =
    # harness/vllm_rollout.py, a colocated vLLM engine on a GPU (other tokens; not yet run on a GPU).
    backend: str = "lean"


@dataclass
class EvalConfig:
    # CE labels: "rules" (rewards/chexpert.py, offline) or "chexbert" (f1chexbert with its real weights).
    ce_backend: str = "rules"
    # "paper": only positive counts (REVA-PO / R2Gen protocol); "rrg": uncertain counts as positive too.
    chexbert_mode: str = "paper"
    # RadGraph F1: "auto" (reported when the weights are present, else marked missing), "off", or required.
    radgraph: str = "auto"
    radgraph_model: str = "radgraph-xl"


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
    rl: RLConfig = field(default_factory=RLConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


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


def read_yaml_mapping(path: str | Path, what: str = "config file") -> dict:
    """A YAML file whose top level is a mapping, with errors naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
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


def _deep_update(dst: dict, src: dict) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _deep_update(dst[k], v)
        else:
            dst[k] = v


PRESET_KEYS = ("preset", "description", "common", "stages")


def stage_view(doc: dict, stage: str | None, source: str) -> dict:
    """A RunConfig mapping from an experiments/ preset file (`common` deep-merged with `stages.<stage>`)."""
    if not any(k in doc for k in ("common", "stages")):
        return doc
    if stage is None:
        raise ConfigError(f"{source} is an experiments preset (common/stages sections); use it with a stage "
                          "command (regbench train STAGE, classifier train, eval) or `regbench experiment run`")
    unknown = sorted(set(doc) - set(PRESET_KEYS))
    if unknown:
        raise ConfigError(f"{source}: unknown key '{unknown[0]}' in a preset; valid: {', '.join(PRESET_KEYS)}")
    data = dict(doc.get("common") or {})
    _deep_update(data, dict((doc.get("stages") or {}).get(stage) or {}))
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None, cls: type = RunConfig,
                stage: str | None = None):
    """Defaults <- YAML file (optional; a plain RunConfig mapping, or an experiments/ preset read for `stage`)
    <- dotted overrides; validated."""
    data = stage_view(load_yaml(path), stage, str(path)) if path else {}
    source = str(path) if path else "<overrides>"
    overrides = list(overrides or [])
    if path and overrides:
        from_dict(cls, data, source=source)  # the file's own errors name the file, not the overrides
    # A bad value set on the command line is blamed on that override, not on the file it overrides.
    sources = {}
    for item in overrides:
        apply_overrides(data, [item])
        sources[item.split("=", 1)[0].strip()] = f"override '{item}'"
        from_dict(cls, data, source=f"override '{item}'")  # valid before this item: an error is this item's
    if stage and cls is RunConfig and "out_dir" not in data:
        data["out_dir"] = f"runs/{stage}"  # stages never share a default run folder
    cfg = from_dict(cls, data, source=source)
    validate(cfg, source, sources)
    return cfg


def _source_of(key: str, source: str, sources: dict[str, str] | None) -> str:
    """The override that set `key` (or one of the keys of a joint check such as 'rl.beta_min/beta_base'), else
    the file."""
    if not sources:
        return source
    if key in sources:
        return sources[key]
    section, _, names = key.rpartition(".")
    for name in names.split("/"):
        full = f"{section}.{name}" if section else name
        if full in sources:
            return sources[full]
    return source


def _check_plugin_names(rl: RLConfig, need) -> None:
    """Names against the registries (regularizers/, regularizers/reference/, rewards/; the message lists the
    registered ones), so a typo fails when the config loads, before any stage runs."""
    from regularizers.registry import available_references, available_regularizers
    from rewards.registry import available_rewards

    for key, value, names in (("rl.regularizer", rl.regularizer, available_regularizers()),
                              ("rl.reference", rl.reference, available_references()),
                              ("rl.reward", rl.reward, available_rewards())):
        need(value in names, key, value, f"is not registered; registered: {', '.join(names)}")


def _trial_build(rl: RLConfig, where) -> None:
    """Build the regularizer and the reference strategy from this config once: what the class refuses (its own
    bounds, a plug-in option it lacks) fails at load time. Runs after the config's own range checks, whose
    messages name the exact key."""
    from regularizers.registry import reference_from_config, regularizer_from_config

    for key, build in (("rl.regularizer", regularizer_from_config), ("rl.reference", reference_from_config)):
        try:
            build(rl)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where(key)}: '{key}' = {getattr(rl, key[3:])!r} cannot be built from this "
                              f"config: {e}") from e


def validate(cfg: RunConfig, source: str = "<config>", sources: dict[str, str] | None = None) -> None:
    """Range and name checks of every field (`sources`: key -> the command-line override that set it)."""
    def need(cond: bool, key: str, value: Any, why: str) -> None:
        if not cond:
            raise ConfigError(f"{_source_of(key, source, sources)}: '{key}' = {value!r} {why}")

    # Every number: floats finite (an inf learning rate or clip range is never meant), counts and seeds >= 0.
    for key, value in _numeric_fields(cfg):
        if isinstance(value, float):
            need(math.isfinite(value), key, value, "must be a finite number")
        else:
            need(value >= 0, key, value, "must be >= 0")
    if isinstance(cfg, RunConfig):
        # The preset first: an unknown one leaves the preset-owned fields (image size, dtype) unset.
        need(cfg.model.preset in ("tiny", "qwen2.5-vl-3b", "qwen2.5-vl-7b"), "model.preset", cfg.model.preset,
             "must be tiny, qwen2.5-vl-3b or qwen2.5-vl-7b")
        _check_ranges(cfg, need)
        need(cfg.data.dataset in ("phantom", "iu_xray", "mimic_cxr"), "data.dataset", cfg.data.dataset,
             "must be phantom, iu_xray or mimic_cxr")
        need(cfg.data.dataset == "phantom" or cfg.data.annotation is not None, "data.annotation",
             cfg.data.annotation, "is required for real data sets")
        need(cfg.data.views is None or cfg.data.views >= 1, "data.views", cfg.data.views, "must be >= 1 or null")
        need(cfg.data.synth_n >= 10, "data.synth_n", cfg.data.synth_n, "must be >= 10")
        need(cfg.data.train_subset in ("first", "random"), "data.train_subset", cfg.data.train_subset,
             "must be first or random")
        need(cfg.data.train_min_tokens is None or cfg.data.train_min_tokens >= 1, "data.train_min_tokens",
             cfg.data.train_min_tokens, "must be >= 1 or null")
        for split in ("train", "val", "test"):
            cap = getattr(cfg.data, f"max_{split}")
            need(cap is None or cap >= 1, f"data.max_{split}", cap, "must be >= 1 or null")
        need(re.fullmatch(r"auto|cpu|cuda(:\d+)?", cfg.model.device) is not None, "model.device", cfg.model.device,
             "must be auto, cpu, cuda or cuda:N")
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
        need(cfg.train.micro_batch_size is None or cfg.train.micro_batch_size > 0, "train.micro_batch_size",
             cfg.train.micro_batch_size, "must be > 0 or null")
        need(cfg.train.max_steps is None or cfg.train.max_steps > 0, "train.max_steps", cfg.train.max_steps,
             "must be > 0 or null")
        rl = cfg.rl
        _check_plugin_names(rl, need)
        need(0 <= rl.beta_min <= rl.beta_base <= rl.beta_max, "rl.beta_min/beta_base/beta_max",
             (rl.beta_min, rl.beta_base, rl.beta_max), "must satisfy 0 <= beta_min <= beta_base <= beta_max")
        need(rl.group_size >= 2, "rl.group_size", rl.group_size, "must be >= 2 (advantages are group-relative)")
        need(rl.prompts_per_step >= 1, "rl.prompts_per_step", rl.prompts_per_step, "must be >= 1")
        need(rl.old_sync_every >= 1, "rl.old_sync_every", rl.old_sync_every, "must be >= 1")
        need(rl.reset_every_epochs >= 1, "rl.reset_every_epochs", rl.reset_every_epochs, "must be >= 1")
        need(0 <= rl.ema_rate <= 1, "rl.ema_rate", rl.ema_rate, "must be in [0, 1]")
        need(rl.temperature > 0, "rl.temperature", rl.temperature, "must be > 0")
        need(0 < rl.top_p <= 1, "rl.top_p", rl.top_p, "must be in (0, 1]")
        need(rl.min_new_tokens <= rl.max_new_tokens, "rl.min_new_tokens", rl.min_new_tokens,
             "must be <= rl.max_new_tokens")
        need(rl.kl_estimator in ("k1", "k2", "k3"), "rl.kl_estimator", rl.kl_estimator, "must be k1, k2 or k3")
        need(rl.aggregation in ("token_mean", "group_token_mean", "seq_mean_token_mean", "dr_grpo"), "rl.aggregation",
             rl.aggregation, "must be token_mean, group_token_mean, seq_mean_token_mean or dr_grpo")
        need(rl.advantage_scale in ("std", "none"), "rl.advantage_scale", rl.advantage_scale, "must be std or none")
        need(rl.aggregation != "dr_grpo" or rl.advantage_scale == "none", "rl.advantage_scale", rl.advantage_scale,
             "must be none with rl.aggregation=dr_grpo (Liu et al.'s Dr. GRPO also drops the std division)")
        need(rl.select in ("best_val", "final"), "rl.select", rl.select, "must be best_val or final")
        need(rl.old_sync in ("per_epoch", "global"), "rl.old_sync", rl.old_sync, "must be per_epoch or global")
        need(rl.kl_target > 0, "rl.kl_target", rl.kl_target, "must be > 0")
        samples = rl.prompts_per_step * rl.group_size
        need(rl.regularizer != "adaptive" or rl.kl_horizon > 0.2 * samples, "rl.kl_horizon", rl.kl_horizon,
             f"must exceed 0.2 x prompts_per_step x group_size = {0.2 * samples:g}, or one adaptive update "
             "could make beta negative")
        need(rl.zero_std_groups in ("keep", "drop"), "rl.zero_std_groups", rl.zero_std_groups,
             "must be keep or drop")
        need(rl.val_score in ("paper", "official"), "rl.val_score", rl.val_score, "must be paper or official")
        need(rl.val_rg_metric != "none" or rl.val_lambda == 0, "rl.val_lambda", rl.val_lambda,
             "needs rl.val_rg_metric (entity_f1 or radgraph); with val_rg_metric none set val_lambda=0")
        need(rl.token_weighting in ("none", "tfidf", "gradient"), "rl.token_weighting", rl.token_weighting,
             "must be none, tfidf or gradient")
        need(rl.dual_clip is None or rl.dual_clip > 1, "rl.dual_clip", rl.dual_clip, "must be > 1 or null")
        need(cfg.eval.ce_backend in ("rules", "chexbert"), "eval.ce_backend", cfg.eval.ce_backend,
             "must be rules or chexbert")
        need(cfg.eval.chexbert_mode in ("paper", "rrg"), "eval.chexbert_mode", cfg.eval.chexbert_mode,
             "must be paper or rrg")
        need(cfg.eval.radgraph in ("auto", "off", "required"), "eval.radgraph", cfg.eval.radgraph,
             "must be auto, off or required")
        need(cfg.eval.radgraph_model in ("radgraph", "radgraph-xl"), "eval.radgraph_model", cfg.eval.radgraph_model,
             "must be radgraph or radgraph-xl")
        need(cfg.generation.max_new_tokens > 0, "generation.max_new_tokens", cfg.generation.max_new_tokens,
             "must be > 0")
        need(cfg.generation.min_new_tokens <= cfg.generation.max_new_tokens, "generation.min_new_tokens",
             cfg.generation.min_new_tokens, "must be <= generation.max_new_tokens")
        need(cfg.generation.backend in ("hf", "lean", "vllm"), "generation.backend", cfg.generation.backend,
             "must be hf, lean or vllm")
        _trial_build(cfg.rl, lambda key: _source_of(key, source, sources))


def _numeric_fields(obj, prefix: str = ""):
    """(dotted key, value) of every int/float field of a config dataclass, nested sections included."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _numeric_fields(value, f"{prefix}{f.name}.")
        elif isinstance(value, int | float) and not isinstance(value, bool):
            yield f"{prefix}{f.name}", value


def _check_ranges(cfg: RunConfig, need) -> None:
    """Ranges beyond "finite" and ">= 0": what each knob means (the message names the key and the bound)."""
    def at_least(key: str, bound: float, strict: bool = False, optional: bool = False) -> None:
        section, _, name = key.rpartition(".")
        value = getattr(getattr(cfg, section) if section else cfg, name)
        if value is None and optional:
            return
        ok = value > bound if strict else value >= bound
        need(ok, key, value, f"must be {'>' if strict else '>='} {bound:g}" + (" or null" if optional else ""))

    def within(key: str, lo: float, hi: float, hi_open: bool = False) -> None:
        section, _, name = key.rpartition(".")
        value = getattr(getattr(cfg, section), name)
        ok = lo <= value < hi if hi_open else lo <= value <= hi
        need(ok, key, value, f"must be in [{lo:g}, {hi:g}{')' if hi_open else ']'}")

    at_least("data.synth_image_size", 28)
    at_least("model.image_size", 28)
    for key in ("model.lora_alpha", "model.tiny_text_hidden", "model.tiny_text_layers", "model.tiny_vision_hidden",
                "model.tiny_vision_depth", "model.tiny_vocab_size", "train.log_every", "prompt.max_report_tokens",
                "classifier.img_size", "classifier.epochs", "classifier.batch_size", "pretrain.n",
                "pretrain.batch_size", "rl.kl_horizon", "rl.ema_period", "rl.max_new_tokens",
                "generation.batch_size"):
        at_least(key, 1)
    for key in ("train.grad_clip", "train.vision_lr_mult", "classifier.weight_decay", "pretrain.weight_decay",
                "pretrain.vision_lr_mult", "pretrain.findings_task_fraction", "pretrain.hint_task_fraction",
                "rl.eps_high", "rl.entropy_coef", "rl.val_lambda"):
        at_least(key, 0)
    for key in ("classifier.lr", "pretrain.lr", "pretrain.epochs", "rl.kl_target", "rl.repetition_penalty",
                "rl.token_weight_boost", "generation.repetition_penalty"):
        at_least(key, 0, strict=True)
    at_least("rl.max_nonfinite_steps", 1)
    for key in ("rl.val_every_steps", "rl.val_max_samples", "rl.logprob_chunk_positions", "rl.micro_batch_size"):
        at_least(key, 1, optional=True)
    for key in ("rl.logprob_temperature", "rl.token_weight_max"):
        at_least(key, 0, strict=True, optional=True)
    within("rl.eps_low", 0, 1, hi_open=True)  # the ratio's lower clip 1 - eps_low must stay above 0
    within("classifier.adam_beta2", 0, 1, hi_open=True)
    need(cfg.rl.val_rg_metric in ("none", "entity_f1", "radgraph"), "rl.val_rg_metric", cfg.rl.val_rg_metric,
         "must be none, entity_f1 or radgraph")
    need(cfg.seed < 2**63, "seed", cfg.seed, "must be < 2**63")
