"""Where a stage's model comes from: an earlier stage's checkpoint, or the base model of the preset."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from harness.checks.preflight import check_inputs, check_names, check_run_folder, check_scorers, model_device
from harness.config import ConfigError, RunConfig
from harness.config.presets import get_preset
from harness.models.checkpoint import adopt_checkpoint_settings, load_base, load_stage_model
from harness.models.trainable import unwrap
from harness.parallel.distributed import Dist, init_distributed
from harness.parallel.zero import plugin_for
from harness.runs.records import FollowerRun
from harness.runs.schema import METRICS_FILE
from harness.runs.state import restart_requested
from harness.stages.common import seed_everything, start_run
from harness.stages.paths import base_dir
from rewards.spec import RewardFailed, probe_reward


def base_path(cfg: RunConfig, progress: bool = True) -> Path | str:
    """Where the base model of `cfg` is: model.path, the tiny preset's stage-0 folder, or the preset's default.
    Only finds it: stage 0 is built beforehand as a step of its own (harness.stages.pretrain.build_base), so a
    missing one is an error saying how to build it. (`progress` is unused; kept for the callers.)"""
    preset = get_preset(cfg.model.preset)
    if cfg.model.path:
        return cfg.model.path
    if preset.name == "tiny":
        out = base_dir(cfg)
        if not (out / "DONE").is_file():
            raise FileNotFoundError(
                f"stage 0 (the tiny base model) of this config is not built: {out} has no DONE file. Build it with "
                "`regbench train pretrain [CONFIG.yaml] [key=value ...]` (the same config and overrides), or run "
                "the stage through `regbench train STAGE` or a study (`regbench experiment run FILE`), which build "
                "it first")
        return out
    return preset.default_path


def load_for_stage(cfg: RunConfig, progress: bool = True):
    """(model, processor, base_path): from `init_from` if set, else the preset's base model; on `model.device`."""
    attn = cfg.model.attn_implementation
    device = model_device(cfg.model)
    if cfg.init_from:
        model, processor, spec = load_stage_model(cfg.init_from, cfg.model.dtype, cfg.model.image_size, attn,
                                                  base_path=cfg.model.path)
        return model.to(device), processor, spec["base"]
    path = base_path(cfg, progress)
    model, processor = load_base(path, cfg.model.dtype, cfg.model.image_size, attn)
    return model.to(device), processor, path


def enable_gradient_checkpointing(model) -> None:
    """transformers' non-reentrant checkpointing (works with a frozen base: no input grads needed)."""
    unwrap(model).gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


@dataclass
class StageStart:
    """What a model stage (warm-up, SFT, RL) starts from; `model` etc. are None when the run is complete."""

    dist: Dist
    run: object  # RunDir on rank 0, FollowerRun on the other processes
    progress: bool
    complete: bool
    model: object = None
    processor: object = None
    base_path: Path | str | None = None
    splits: dict | None = None


def begin_stage(cfg: RunConfig, stage: str, progress: bool) -> StageStart:
    """Seed, join the process group of a torchrun / accelerate launch (if any), open the run directory and,
    unless the run is complete, load the model and the data. Every check comes before the first write: the
    config, names, scorer weights, input folders, device and run folder (harness/checks/preflight.py), then the data and
    the model; only then is the run folder locked and its manifest written. Rank 0 goes first: it builds the phantom set
    and writes the manifest; the other processes then read them. The tiny stage-0 base is not built here: the
    plan builds it as a node of its own, and `regbench train` in one explicit call before the stage
    (harness/cli/stage_commands.py: prepare_base), so a stage's seeded RNGs never depend on whether stage 0
    ran first; a stage that finds no base says how to build it (base_path)."""
    check_names(cfg, stage)  # names and input folders first: a typo must not cost a model load or a stage 0
    check_scorers(cfg, stage)  # the scorers' weights: RL's first validation must not find them missing
    check_inputs(cfg, stage)
    check_run_folder(cfg, stage)  # reads only: nothing is written before the data and the model are loaded
    if cfg.init_from:
        adopt_checkpoint_settings(cfg.model, cfg.init_from)  # the image size / dtype the checkpoint was trained with
    plugin = plugin_for(cfg.train.deepspeed, cfg.train.grad_clip, int(os.environ.get("WORLD_SIZE", "1")))
    dist = init_distributed(cfg.train.dist_timeout_s, cfg.train.dist_load_timeout_s, deepspeed_plugin=plugin)
    progress = progress and dist.main
    seed_everything(cfg.seed)
    with dist.main_first():
        if not dist.main:
            run = FollowerRun(cfg.out_dir)
            start = StageStart(dist, run, progress, run.complete)
            if not start.complete:
                _load_inputs(cfg, stage, progress, start)
            return start
        done = not restart_requested() and (Path(cfg.out_dir) / METRICS_FILE).is_file()
        start = StageStart(dist, None, progress, done)
        if not done:
            # Data and model before the run folder is opened: a bad data set, model or device fails with the
            # folder as it was (absent, or the earlier run), and in seconds for the data.
            _load_inputs(cfg, stage, progress, start)
        start.run = start_run(cfg, stage)
        start.complete = start.run.complete
        if not start.complete and start.model is None:  # pragma: no cover - emptied by another process meanwhile
            _load_inputs(cfg, stage, progress, start)
    return start


def _load_inputs(cfg: RunConfig, stage: str, progress: bool, start: StageStart) -> None:
    """The data before the model (neither draws from the global RNGs): a bad data set fails in seconds."""
    # lazy: tests replace load_splits at its source, read at call time
    from harness.stages.common import load_splits, require_train

    start.splits = require_train(load_splits(cfg, progress), cfg, stage)
    if stage == "rl":
        probe_user_reward(cfg.rl.reward, start.splits["train"])
    start.model, start.processor, start.base_path = load_for_stage(cfg, progress)
    if cfg.model.gradient_checkpointing:
        enable_gradient_checkpointing(start.model)


def probe_user_reward(reward, samples) -> None:
    """rl.reward (`reward`) with the user's code in it (`module:function`, alone or in a weighted sum) called on a
    probe batch of the training references before the model loads: one that raises, or returns something other than
    one finite number per candidate, is refused naming the reward and the error, with nothing written."""
    try:
        probe_reward(reward, [s.report for s in samples[:4]])
    except (RewardFailed, ValueError, TypeError) as e:
        raise ConfigError(f"'rl.reward' = {reward!r} failed on a probe batch of 4 training reports, before "
                          f"any decoding: {e}") from e
