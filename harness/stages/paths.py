"""Where the stages' inputs and outputs live and what keys them: the one interface the experiment planner
(harness/experiments/plan.py) asks the stages through. Light on purpose (no model code is imported), so a
plan is built in a fraction of a second.

- `default_cache_dir(cfg)`: the per-machine cache (`cache_dir`, else $REGBENCH_CACHE, else ~/.cache/regbench);
- `phantom_dir(cfg, splits)`: the folder of the configured phantom set (generator version in its name), or of
  the part of it that holds only `splits` (an evaluation draws only the test split: `test_split_dir`), and
  where evaluations keep its decoded images (`eval_pixel_dir`);
- `uses_tiny_base(cfg)`, `base_key(cfg)`, `base_dir(cfg)`: whether a run starts from the tiny stage-0 base, its
  cache key (recipe version included) and its folder (`DONE` marks it complete);
- `analyses_done(run_dir, kinds, key)`: whether an RL run's Supp. A records were written for `key`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from harness.config import RunConfig
from harness.data import phantom
from harness.runs.records import read_json
from harness.runs.schema import analysis_file

# Bump when this recipe changes in a way the config does not show (a new phantom generator is keyed by its own
# GENERATOR_VERSION).
# 2: the LM loss scores only the report positions, with a chunked fp32 log-softmax (issue 14): the same loss up
#    to rounding, so a base built before differs in its last bits and every number downstream with it.
RECIPE_VERSION = 2

# Seed of stage 0's init, task mix and data order: fixed, not the run's seed, so every run seed starts from the
# one cached base, as every seed of a real study starts from the same Qwen checkpoint (this project, issue 12).
STAGE0_SEED = 0


def default_cache_dir(cfg: RunConfig) -> Path:
    if cfg.cache_dir:
        return Path(cfg.cache_dir)
    env = os.environ.get("REGBENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "regbench"


def phantom_dir(cfg: RunConfig, splits: tuple[str, ...] = phantom.SPLITS) -> Path:
    """Folder of the configured phantom set; the generator's version is part of the name (a set drawn by an
    older generator is never reused). With `splits` a strict subset of train/val/test: the folder of a set that
    holds only those splits' studies (the same studies, drawn alone: harness/data/phantom/writer.py)."""
    d = cfg.data
    name = f"n{d.synth_n}-seed{d.synth_seed}-px{d.synth_image_size}-g{phantom.GENERATOR_VERSION}"
    if d.report_variation != "none":  # a varied set never reuses a plain one (nor the reverse)
        name += f"-var{d.report_variation}"
    part = [s for s in phantom.SPLITS if s in splits]
    if part != list(phantom.SPLITS):
        name += "-" + "-".join(part)
    return Path(d.synth_dir) / name


def test_split_dir(cfg: RunConfig) -> Path:
    """The phantom folder a test evaluation reads: the whole set's when it is there (a training stage drew it),
    else the test-only part (an evaluation on a set no stage trains on draws only its test split)."""
    whole = phantom_dir(cfg)
    return whole if (whole / "annotation.json").is_file() else phantom_dir(cfg, ("test",))


def eval_pixel_dir(cfg: RunConfig, split: str) -> Path | None:
    """Where evaluations of a phantom set keep the decoded images of `split` (harness/data/pixel_cache.py: uint8,
    the same pixels): beside the set, so every arm's and seed's evaluation of one test split decodes its PNGs once
    (issue 27). None for other data sets, whose folders are the user's."""
    d = cfg.data
    if d.dataset != "phantom" or d.annotation is not None:
        return None
    return (test_split_dir(cfg) if split == "test" else phantom_dir(cfg)) / "pixels"


def pretrain_key(cfg: RunConfig) -> str:
    m = cfg.model
    payload = {
        "recipe": RECIPE_VERSION,
        "pretrain": {k: v for k, v in dataclasses.asdict(cfg.pretrain).items()
                     # bases built before these knobs existed (the Conv3d, random batches) keep their key
                     if (k, v) not in (("patch_embed", "conv"), ("group_by_length", False))},
        "sizes": [m.tiny_text_hidden, m.tiny_text_layers, m.tiny_vision_hidden, m.tiny_vision_depth,
                  m.tiny_vocab_size, m.image_size],
        "image_px": cfg.data.synth_image_size,
        "phantom": phantom.GENERATOR_VERSION,  # stage 0 trains on its own phantom set
        "instruction": cfg.prompt.instruction,
        "disease_template": cfg.prompt.disease_template,
        "max_report_tokens": cfg.prompt.max_report_tokens,
        # STAGE0_SEED sits where the run seed was before, so seed-0 bases keep their key (and cache).
        "seed": STAGE0_SEED,
    }
    if m.attn_implementation != "eager":  # eager bases (built before the knob existed) keep their key
        payload["attn"] = m.attn_implementation
    # stage 2's prompt layout, which the hint examples take: keyed only when not the layout bases were built with
    for key, default in (("disease_list_format", "comma"), ("disease_separator", " ")):
        if getattr(cfg.prompt, key) != default:
            payload[key] = getattr(cfg.prompt, key)
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def base_dir(cfg: RunConfig) -> Path:
    return default_cache_dir(cfg) / "tiny-base" / pretrain_key(cfg)


def uses_tiny_base(cfg: RunConfig) -> bool:
    """Does a stage starting from the base model of `cfg` need stage 0 (the tiny preset without model.path)?"""
    return cfg.model.preset == "tiny" and not cfg.model.path


def base_key(cfg: RunConfig) -> str:
    """The cache key of the tiny stage-0 base of `cfg` (= its folder name under tiny-base/)."""
    return pretrain_key(cfg)


def analyses_done(run_dir: str | Path, kinds, key: str) -> bool:
    """Whether every kind's file exists in the run directory and was written for `key`."""
    for kind in kinds:
        path = Path(run_dir) / analysis_file(kind)
        try:
            if read_json(path).get("key") != key:
                return False
        except (OSError, ValueError):
            return False
    return True
