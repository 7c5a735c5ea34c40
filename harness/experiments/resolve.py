"""Resolving one stage of an arm into a validated RunConfig, and the key that names its stage run."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from harness.config import ConfigError, RunConfig, apply_overrides, build_config, to_dict
from harness.config.retired import with_retired
from harness.experiments.study import Arm, Study, deep_merge


def yaml_scalar(value: Any) -> str:
    """A value as override text that YAML reads back as the same value."""
    if isinstance(value, float):
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            text = text.replace("e", ".0e", 1)  # YAML 1.1 floats need a dot
        return text
    return json.dumps(value)


def stage_document(study: Study, arm: Arm, stage: str) -> dict:
    """The RunConfig mapping of one stage of an arm: common <- stages.<stage> <- arm (all, then stage)."""
    doc = copy.deepcopy(study.common)
    deep_merge(doc, copy.deepcopy(study.stages.get(stage) or {}))
    for scope in ("all", stage):
        value = arm.overrides.get(scope)
        if isinstance(value, dict):
            deep_merge(doc, copy.deepcopy(value))
        elif value:
            apply_overrides(doc, list(value))
    return doc


# `test_reports: per_seed`: seed k's test reports are the test split of the phantom set drawn with generator seed
# PER_SEED_TEST_OFFSET + k (plus the study's data.synth_seed): a draw of the same population that no stage trains on
# (the training stages keep the study's synth_seed; stage 0 has its own pretrain.data_seed).
PER_SEED_TEST_OFFSET = 1_000_000


def resolve_config(study: Study, arm: Arm, stage: str, seed: int, paths: dict[str, Any] | None = None) -> RunConfig:
    """A validated RunConfig for (arm, seed, stage), `paths` (out_dir, init_from, ...) set on top."""
    doc = stage_document(study, arm, stage)
    if stage == "eval" and study.test_reports == "per_seed":
        data = doc.setdefault("data", {})
        if data.get("dataset", "phantom") != "phantom" or data.get("annotation") is not None:
            raise ConfigError(f"{study.path.name}: test_reports: per_seed draws a fresh phantom test set per seed; "
                              f"arm '{arm.name}' evaluates on a fixed annotation ({data.get('annotation')}): use "
                              "test_reports: shared")
        data["synth_seed"] = int(data.get("synth_seed", 0)) + PER_SEED_TEST_OFFSET + seed
    seed = study.stage_seeds.get(stage, seed)
    return build_config(doc, {"seed": seed, **(paths or {})},
                        source=f"{study.path.name}, arm '{arm.name}', stage '{stage}'")


# Where and how, not what: a run moved to another disk or device, fed by more loader workers, or mirrored into
# other trackers, is the same run.
_LOCATIONS = ("out_dir", "cache_dir", "data.synth_dir", "model.device", "train.num_workers",
              "train.dist_timeout_s", "train.dist_load_timeout_s")
# How a run is stopped or mirrored, not what it computes; left out of the key altogether (added after the keys
# above, so that the stage runs of earlier studies keep their keys).
_NOT_KEYED = ("train.preempt_signals", "train.report_to", "train.wandb_project")
# Fields added later, left out of the key while at the value that computes what runs computed before them, so
# the stage runs of earlier studies keep their keys.
_KEYED_WHEN_SET = {"model.train_format_tokens": False, "model.attn_implementation": "eager",
                   "pretrain.patch_embed": "conv", "rl.lora_pass": "peft", "rl.prompt_pass": "per_row",
                   "train.group_by_length": False, "pretrain.group_by_length": False,
                   "classifier.amp_bf16": False, "classifier.pretrained_format": "regbench",
                   "classifier.drop_path": 0.0, "classifier.layer_decay": None, "classifier.scheduler": "constant",
                   "classifier.warmup_steps": 0, "classifier.schedule_steps": None, "classifier.min_lr_ratio": 0.0,
                   "classifier.max_grad_norm": None, "classifier.select": "val_loss",
                   "prompt.disease_list_format": "comma",
                   "prompt.disease_separator": " ", "model.lora_patch_embed": False,
                   "model.warmup_trainable": "merger", "train.handoff": "last",
                   "generation.vllm_dtype": None,
                   "generation.vllm_gpu_memory_utilization": 0.3, "generation.vllm_sleep_level": 1,
                   # the learning-rate schedule's options (issue 42): their defaults are the schedule before them
                   "train.warmup_type": "project", "train.warmup_min_ratio": 0.0, "train.cos_min_ratio": 0.0,
                   "train.cosine_total_steps": None,
                   "rl.kl_placement": "loss", "rl.kl_reward_reduce": "sum",
                   "rl.kl_cap": 10.0, "rl.advantage_std": "population", "rl.importance_sampling": "token",
                   "rl.surrogate": "clip", "rl.sapo_tau_pos": 1.0, "rl.sapo_tau_neg": 1.05,
                   "classifier.micro_batch_size": None,
                   # the phantom's varied report language and the meaning-reading gold (issue 44)
                   "data.report_variation": "none", "eval.gold_reader": "v1",
                   # the leak check by content (issue 49): it refuses data, never changes what runs
                   "data.leak_check": "content"}


def config_key(kind: str, cfg: RunConfig, inputs: dict[str, Any], runner_paths: tuple[str, ...] = ()) -> str:
    """sha256 of the stage, its resolved config without locations (and without the input paths the runner set,
    which `inputs` replaces by the keys of the runs they come from)."""
    d = with_retired(to_dict(cfg))  # a field removed since still counts, at the value it held
    for dotted in (*_LOCATIONS, *runner_paths):
        node = d
        *parents, last = dotted.split(".")
        for p in parents:
            node = node[p]
        node[last] = None
    for dotted in (*_NOT_KEYED, *(k for k, v in _KEYED_WHEN_SET.items() if _get(d, k, v) == v)):
        *parents, last = dotted.split(".")
        node = d
        for p in parents:
            node = node[p]
        node.pop(last, None)
    payload = json.dumps({"stage": kind, "config": d, "inputs": inputs}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:10]


def _get(d: dict, dotted: str, missing: Any) -> Any:
    for part in dotted.split("."):
        if part not in d:
            return missing
        d = d[part]
    return d
