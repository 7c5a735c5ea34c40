"""`validate`: range and name checks of a built RunConfig; each error names the key, the value and where it was set
(the file, or the command-line override that set it)."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import re
from typing import Any

from harness.config.names import CLASSIFIER_PRETRAINED_FORMATS as PRETRAINED_FORMATS
from harness.config.names import (
    CLASSIFIER_SCHEDULERS,
    COSINE_SCHEDULERS,
    DEEPSPEED_WARMUP_TYPES,
    SCHEDULERS,
    WARMUP_TYPES,
    signal_numbers,
    tracker_names,
)
from harness.config.names import CLASSIFIER_SELECTIONS as SELECTIONS
from harness.config.presets import PRESETS
from harness.config.rl import RLConfig, pass_option_problem
from harness.config.run import RunConfig
from harness.constants import MIN_IMAGE_SIZE
from harness.errors import ConfigError
from rewards.spec import check_reward


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
    registered ones), so a typo fails when the config loads, before any stage runs. The reward may also be a
    user's function (package.module:function) or a weighted sum: imported, signature and weights checked now."""
    # lazy: start-up cost (torch)
    from harness.aggregation import available_aggregations
    from harness.token_weighting.registry import available_token_weightings
    from regularizers.registry import available_references, available_regularizers

    for key, value, names in (("rl.regularizer", rl.regularizer, available_regularizers()),
                              ("rl.reference", rl.reference, available_references()),
                              ("rl.aggregation", rl.aggregation, available_aggregations()),
                              ("rl.token_weighting", rl.token_weighting, available_token_weightings())):
        if key in ("rl.regularizer", "rl.reference") and ":" in str(value) and value not in names:
            need(_importable(key, value) is None, key, value, f"cannot be loaded: {_importable(key, value)}")
            continue
        need(value in names, key, value, f"is not registered; registered: {', '.join(names)}")
    try:  # a registered name, package.module:function, or {name: weight}: every part resolved and checked now
        check_reward(rl.reward)
        problem = None
    except ValueError as e:
        problem = str(e)
    need(problem is None, "rl.reward", rl.reward, f"is not a usable reward: {problem}")


def _importable(key: str, path: str) -> str | None:
    """Why the user's class ``package.module:Class`` for rl.regularizer / rl.reference cannot be used, or None."""
    # lazy: start-up cost (torch)
    from regularizers.registry import _REGISTRIES

    try:
        _REGISTRIES["regularizer" if key == "rl.regularizer" else "reference strategy"].lookup(path)
    except (TypeError, ValueError) as e:
        return str(e)
    return None


def _trial_build(rl: RLConfig, where) -> None:
    """Build the regularizer and the reference strategy from this config once: what the class refuses (its own
    bounds, a plug-in option it lacks) fails at load time. Runs after the config's own range checks, whose
    messages name the exact key."""
    # lazy: start-up cost (torch)
    from regularizers.registry import check_state_contract, reference_from_config, regularizer_from_config

    for key, build in (("rl.regularizer", regularizer_from_config), ("rl.reference", reference_from_config)):
        try:
            plugin = build(rl)  # checks the state contract after construction
            if key == "rl.regularizer":  # and after one step's update (a throw-away instance)
                plugin.after_step(rl.kl_target, rl.prompts_per_step * rl.group_size)
                check_state_contract(plugin, "regularizer")
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where(key)}: '{key}' = {getattr(rl, key[3:])!r} cannot be built from this "
                              f"config: {e}") from e


def validate(cfg: RunConfig, source: str = "<config>", sources: dict[str, str] | None = None) -> None:
    """Range and name checks of every field (`sources`: key -> the command-line override that set it)."""
    def need(cond: bool, key: str, value: Any, why: str) -> None:
        if not cond:
            raise ConfigError(f"{_source_of(key, source, sources)}: '{key}' = {value!r} {why}")

    # Every float finite first (an inf learning rate or clip range is never meant; NaN fails every bound).
    for key, value in _numeric_fields(cfg):
        if isinstance(value, float):
            need(math.isfinite(value), key, value, "must be a finite number")
    if isinstance(cfg, RunConfig):
        # The preset first: an unknown one leaves the preset-owned fields (image size, dtype) unset.
        need(cfg.model.preset in PRESETS, "model.preset", cfg.model.preset, f"must be one of {', '.join(PRESETS)}")
        _check_ranges(cfg, need)
        need(cfg.data.dataset in ("phantom", "iu_xray", "mimic_cxr"), "data.dataset", cfg.data.dataset,
             "must be phantom, iu_xray or mimic_cxr")
        need(cfg.data.dataset == "phantom" or cfg.data.annotation is not None, "data.annotation",
             cfg.data.annotation, "is required for real data sets")
        need(cfg.data.report_cleaning in ("r2gen", "reva_po"), "data.report_cleaning", cfg.data.report_cleaning,
             "must be r2gen or reva_po")
        need(cfg.data.leak_check in ("content", "path"), "data.leak_check", cfg.data.leak_check,
             "must be content or path")
        need(cfg.data.views is None or cfg.data.views >= 1, "data.views", cfg.data.views, "must be >= 1 or null")
        need(cfg.data.synth_n >= 10, "data.synth_n", cfg.data.synth_n, "must be >= 10")
        need(cfg.prompt.output_format in ("plain", "think_report"), "prompt.output_format", cfg.prompt.output_format,
             "must be plain or think_report (harness/prompting/output_format.py)")
        need(not cfg.model.train_format_tokens or cfg.prompt.output_format == "think_report",
             "model.train_format_tokens", cfg.model.train_format_tokens,
             "needs prompt.output_format=think_report (it trains the rows of the <think>/<report> tags' tokens)")
        need(cfg.prompt.disease_list_format in ("comma", "python_list"), "prompt.disease_list_format",
             cfg.prompt.disease_list_format, "must be comma or python_list")
        need(cfg.model.warmup_trainable in ("merger", "merger_mlp"), "model.warmup_trainable",
             cfg.model.warmup_trainable, "must be merger or merger_mlp")
        need(cfg.train.handoff in ("last", "best_val"), "train.handoff", cfg.train.handoff,
             "must be last or best_val")
        need(cfg.data.train_subset in ("first", "random"), "data.train_subset", cfg.data.train_subset,
             "must be first or random")
        need(cfg.data.train_min_tokens is None or cfg.data.train_min_tokens >= 1, "data.train_min_tokens",
             cfg.data.train_min_tokens, "must be >= 1 or null")
        for split in ("train", "val", "test"):
            cap = getattr(cfg.data, f"max_{split}")
            need(cap is None or cap >= 1, f"data.max_{split}", cap, "must be >= 1 or null")
        need(re.fullmatch(r"auto|cpu|cuda(:\d+)?", cfg.model.device) is not None, "model.device", cfg.model.device,
             "must be auto, cpu, cuda or cuda:N")
        need(cfg.model.attn_implementation in ("eager", "sdpa", "flash_attention_2"), "model.attn_implementation",
             cfg.model.attn_implementation, 'must be "eager", "sdpa" or "flash_attention_2"')
        need(cfg.pretrain.patch_embed in ("conv", "matmul"), "pretrain.patch_embed", cfg.pretrain.patch_embed,
             'must be "conv" or "matmul"')
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
        _check_schedule(cfg, need)
        need(cfg.train.micro_batch_size is None or cfg.train.micro_batch_size > 0, "train.micro_batch_size",
             cfg.train.micro_batch_size, "must be > 0 or null")
        need(cfg.train.num_workers >= 0, "train.num_workers", cfg.train.num_workers, "must be >= 0")
        signals = cfg.train.preempt_signals
        need(isinstance(signals, list | tuple), "train.preempt_signals", signals,
             "must be a list of signal names, e.g. [SIGTERM, SIGUSR1] ([] = none)")
        try:
            signal_numbers(signals)
        except ValueError as e:
            need(False, "train.preempt_signals", signals, f"is refused: {e}")
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
        need(rl.kl_estimator in ("k1", "k2", "k3", "k3_is"), "rl.kl_estimator", rl.kl_estimator,
             "must be k1, k2, k3 or k3_is")
        need(rl.kl_placement in ("loss", "reward"), "rl.kl_placement", rl.kl_placement, "must be loss or reward")
        need(rl.kl_placement == "loss" or rl.kl_estimator != "k3_is", "rl.kl_estimator", rl.kl_estimator,
             "needs rl.kl_placement loss (the reward's KL has no gradient for the ratio to correct)")
        need(rl.kl_reward_reduce in ("sum", "mean"), "rl.kl_reward_reduce", rl.kl_reward_reduce,
             "must be sum or mean")
        need(rl.kl_cap is None or rl.kl_cap > 0, "rl.kl_cap", rl.kl_cap, "must be > 0 or null")
        need(rl.advantage_std in ("population", "bessel"), "rl.advantage_std", rl.advantage_std,
             "must be population or bessel")
        need(rl.importance_sampling in ("token", "sequence"), "rl.importance_sampling", rl.importance_sampling,
             "must be token or sequence")
        need(rl.surrogate in ("clip", "cispo", "sapo"), "rl.surrogate", rl.surrogate, "must be clip, cispo or sapo")
        need(rl.surrogate == "clip" or rl.dual_clip is None, "rl.dual_clip", rl.dual_clip,
             f"must be null with rl.surrogate {rl.surrogate} (the dual clip caps the clip surrogate's loss)")
        need(rl.sapo_tau_pos > 0 and rl.sapo_tau_neg > 0, "rl.sapo_tau_pos/sapo_tau_neg",
             (rl.sapo_tau_pos, rl.sapo_tau_neg), "must be > 0")
        need(rl.advantage_scale in ("std", "none"), "rl.advantage_scale", rl.advantage_scale, "must be std or none")
        need(rl.aggregation != "dr_grpo" or rl.advantage_scale == "none", "rl.advantage_scale", rl.advantage_scale,
             "must be none with rl.aggregation=dr_grpo (Liu et al.'s Dr. GRPO also drops the std division)")
        if problem := pass_option_problem(rl):
            need(False, *problem)
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
        need(rl.dual_clip is None or rl.dual_clip > 1, "rl.dual_clip", rl.dual_clip, "must be > 1 or null")
        need(cfg.eval.ce_backend in ("rules", "chexbert"), "eval.ce_backend", cfg.eval.ce_backend,
             "must be rules or chexbert")
        need(cfg.eval.chexbert_mode in ("paper", "rrg"), "eval.chexbert_mode", cfg.eval.chexbert_mode,
             "must be paper or rrg")
        need(cfg.eval.radgraph in ("auto", "off", "required"), "eval.radgraph", cfg.eval.radgraph,
             "must be auto, off or required")
        need(cfg.eval.gold_reader in ("v1", "v2"), "eval.gold_reader", cfg.eval.gold_reader, "must be v1 or v2")
        need(cfg.data.report_variation in ("none", "low", "high"), "data.report_variation",
             cfg.data.report_variation, "must be none, low or high")
        need(cfg.eval.radgraph_model in ("radgraph", "radgraph-xl"), "eval.radgraph_model", cfg.eval.radgraph_model,
             "must be radgraph or radgraph-xl")
        need(cfg.generation.max_new_tokens > 0, "generation.max_new_tokens", cfg.generation.max_new_tokens,
             "must be > 0")
        need(cfg.generation.min_new_tokens <= cfg.generation.max_new_tokens, "generation.min_new_tokens",
             cfg.generation.min_new_tokens, "must be <= generation.max_new_tokens")
        _check_trackers(cfg, need)
        need(cfg.generation.backend in ("hf", "lean", "fused", "vllm"), "generation.backend", cfg.generation.backend,
             "must be hf, lean, fused or vllm")
        need(cfg.generation.vllm_dtype in (None, "bfloat16", "float16", "float32"), "generation.vllm_dtype",
             cfg.generation.vllm_dtype, "must be null, bfloat16, float16 or float32")
        need(0 < cfg.generation.vllm_gpu_memory_utilization <= 1, "generation.vllm_gpu_memory_utilization",
             cfg.generation.vllm_gpu_memory_utilization, "must be in (0, 1]")
        need(cfg.generation.vllm_sleep_level in (0, 1, 2), "generation.vllm_sleep_level",
             cfg.generation.vllm_sleep_level, "must be 0, 1 or 2")
    # Then every other count and seed >= 0, after the knobs' own bounds: a message states the bound that the
    # value is then held to (rl.group_size=-1 is told ">= 2", not ">= 0" and then ">= 2").
    for key, value in _numeric_fields(cfg):
        if not isinstance(value, float):
            need(value >= 0, key, value, "must be >= 0")
    if isinstance(cfg, RunConfig):
        _trial_build(cfg.rl, lambda key: _source_of(key, source, sources))


def _check_trackers(cfg: RunConfig, need) -> None:
    """train.report_to: known tracker names ("none" alone), and W&B installed when it is asked for."""
    try:
        names, problem = tracker_names(cfg.train.report_to), None
    except ValueError as e:
        names, problem = [], str(e)
    need(problem is None, "train.report_to", cfg.train.report_to, f"is not valid: {problem}")
    need("wandb" not in names or importlib.util.find_spec("wandb") is not None, "train.report_to",
         cfg.train.report_to, "asks for wandb, which is not installed here (pip install wandb)")


def _check_schedule(cfg: RunConfig, need) -> None:
    """train.scheduler and its warm-up / cosine fields (harness/training/schedule.py): known names, ratios in [0, 1],
    and no field set that the chosen schedule would ignore."""
    t = cfg.train
    need(t.scheduler in SCHEDULERS, "train.scheduler", t.scheduler, f"must be {', '.join(SCHEDULERS)}")
    need(t.warmup_type in WARMUP_TYPES, "train.warmup_type", t.warmup_type, f"must be {', '.join(WARMUP_TYPES)}")
    need(t.warmup_type not in DEEPSPEED_WARMUP_TYPES or t.warmup_steps >= 1, "train.warmup_steps", t.warmup_steps,
         f"must be >= 1 with train.warmup_type={t.warmup_type} (DeepSpeed's warmup_num_steps)")
    for key in ("warmup_min_ratio", "cos_min_ratio"):
        value = getattr(t, key)
        need(0 <= value <= 1, f"train.{key}", value, "must be in [0, 1]")
    need(t.warmup_min_ratio == 0 or t.warmup_steps >= 1, "train.warmup_min_ratio", t.warmup_min_ratio,
         "needs train.warmup_steps >= 1 (it is where the warm-up starts)")
    need(t.cos_min_ratio == 0 or t.scheduler == "warmup_cosine", "train.cos_min_ratio", t.cos_min_ratio,
         f"is used only by train.scheduler=warmup_cosine (here {t.scheduler}); leave it at 0")
    need(t.cosine_total_steps is None or t.cosine_total_steps >= 1, "train.cosine_total_steps",
         t.cosine_total_steps, "must be >= 1 or null")
    need(t.cosine_total_steps is None or t.scheduler in COSINE_SCHEDULERS, "train.cosine_total_steps",
         t.cosine_total_steps, f"is used only by train.scheduler=cosine or warmup_cosine (here {t.scheduler}); "
         "leave it null")


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

    at_least("data.synth_image_size", MIN_IMAGE_SIZE)  # the phantom generator's own bound
    at_least("model.image_size", 28)
    for key in ("model.lora_alpha", "model.tiny_text_hidden", "model.tiny_text_layers", "model.tiny_vision_hidden",
                "model.tiny_vision_depth", "model.tiny_vocab_size",
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
    for key in ("prompt.max_report_tokens", "rl.val_every_steps", "rl.val_max_samples", "rl.logprob_chunk_positions",
                "rl.micro_batch_size"):
        at_least(key, 1, optional=True)
    for key in ("rl.logprob_temperature", "rl.token_weight_max"):
        at_least(key, 0, strict=True, optional=True)
    within("rl.eps_low", 0, 1, hi_open=True)  # the ratio's lower clip 1 - eps_low must stay above 0
    within("classifier.adam_beta2", 0, 1, hi_open=True)
    need(cfg.rl.val_rg_metric in ("none", "entity_f1", "radgraph"), "rl.val_rg_metric", cfg.rl.val_rg_metric,
         "must be none, entity_f1 or radgraph")
    need(cfg.classifier.normalization in ("cxr", "imagenet"), "classifier.normalization",
         cfg.classifier.normalization, "must be cxr or imagenet")
    _check_classifier_recipe(cfg, need)
    need(cfg.seed < 2**63, "seed", cfg.seed, "must be < 2**63")


def _check_classifier_recipe(cfg: RunConfig, need) -> None:
    """The classifier's loading format, layer decay, schedule, clipping and selection (ClassifierConfig's rules)."""
    c = cfg.classifier
    need(c.pretrained_format in PRETRAINED_FORMATS, "classifier.pretrained_format", c.pretrained_format,
         f"must be one of {', '.join(PRETRAINED_FORMATS)}")
    need(c.pretrained_format == "regbench" or c.pretrained_path is not None, "classifier.pretrained_format",
         c.pretrained_format, "needs classifier.pretrained_path (the checkpoint file)")
    need(c.drop_path < 1, "classifier.drop_path", c.drop_path, "must be in [0, 1)")
    need(c.layer_decay is None or 0 < c.layer_decay <= 1, "classifier.layer_decay", c.layer_decay,
         "must be in (0, 1] or null")
    need(c.layer_decay is None or c.arch != "tiny_cnn", "classifier.layer_decay", c.layer_decay,
         "needs a ViT (the tiny CNN has no blocks): set it to null")
    need(c.drop_path == 0 or c.arch != "tiny_cnn", "classifier.drop_path", c.drop_path,
         "needs a ViT (the tiny CNN has no blocks): set it to 0")
    need(c.scheduler in CLASSIFIER_SCHEDULERS, "classifier.scheduler", c.scheduler,
         f"must be one of {', '.join(CLASSIFIER_SCHEDULERS)}")
    need(c.scheduler != "warmup_cosine" or c.warmup_steps >= 1, "classifier.warmup_steps", c.warmup_steps,
         "must be >= 1 with classifier.scheduler warmup_cosine (DeepSpeed's WarmupCosineLR warms up)")
    need(c.schedule_steps is None or c.schedule_steps >= 1, "classifier.schedule_steps", c.schedule_steps,
         "must be >= 1 or null")
    need(c.min_lr_ratio <= 1, "classifier.min_lr_ratio", c.min_lr_ratio, "must be in [0, 1]")
    need(c.max_grad_norm is None or c.max_grad_norm > 0, "classifier.max_grad_norm", c.max_grad_norm,
         "must be > 0 or null")
    need(c.micro_batch_size is None or c.micro_batch_size > 0, "classifier.micro_batch_size", c.micro_batch_size,
         "must be > 0 or null")
    need(c.select in SELECTIONS, "classifier.select", c.select, f"must be one of {', '.join(SELECTIONS)}")
