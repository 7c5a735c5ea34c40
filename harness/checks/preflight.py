"""Checks that need no model: names (reward, metrics, split), scorer weights (harness/checks/needs.py), input folders,
the device and the run folder, run before anything heavy loads or is built (stage 0, the phantom set) and before
anything is written, so a typo costs a second, not a model load, and a refused command leaves its out folder as it
was (absent, or the earlier run)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from harness.checks.needs import SCORER_KINDS, check_needs
from harness.config import ConfigError, RunConfig, to_dict
from harness.config.presets import get_preset
from harness.models.checkpoint import (
    ADAPTER_WEIGHTS,
    LEGACY_WEIGHTS,
    MERGER_WEIGHTS,
    SPEC,
    _is_hub_id,
    check_base_folder,
    local_model_folder,
    read_spec,
)
from harness.models.classifier.model import read_state_dict
from harness.models.classifier.storage import read_classifier_meta
from harness.runs import lock as runlock
from harness.runs import state as runstate
from harness.runs.resume_check import check_resumable
from harness.runs.tracker_check import check_wandb
from rewards.spec import check_reward

SPLITS = ("train", "val", "test")


def check_split(split: str, key: str = "split") -> None:
    if split not in SPLITS:
        raise ConfigError(f"{key} = {split!r} must be one of {', '.join(SPLITS)}")


# Stages that open the trackers of train.report_to.
TRAINING_STAGES = ("pretrain", "warmup", "classifier", "sft", "rl")
# Stages whose decoding follows generation.backend (RL rollouts and validation, evaluation).
DECODING_STAGES = ("rl", "eval")


def check_names(cfg: RunConfig, stage: str | None) -> None:
    """Registered names the config refers to (only the stages that use them)."""
    check_generation_backend(cfg.generation.backend, cfg.model, stage)
    if stage in TRAINING_STAGES:  # W&B online but not logged in or unreachable: refused before any step (issue 49)
        check_wandb(cfg.train.report_to)
    if stage == "rl":
        try:
            check_reward(cfg.rl.reward)
        except ValueError as e:
            raise ConfigError(f"'rl.reward' = {cfg.rl.reward!r} is not a usable reward: {e}") from e


def check_scorers(cfg: RunConfig, stage: str | None) -> None:
    """The scorer weights (CheXbert, RadGraph) and vLLM the stage will use are here (harness/checks/needs.py), checked
    by their files without loading them: a missing CheXbert must not cost a whole decode. The base model and the
    classifier are check_inputs' (after the data's own checks)."""
    if stage:
        check_needs(cfg, stage, SCORER_KINDS)


def check_generation_backend(backend: str, model, stage: str | None) -> None:
    """generation.backend (`backend`) vllm in a stage that decodes: the vllm package must import here (pip install
    'regbench[vllm]') and `model` (the model section) must name a CUDA device, refused in one line before any
    model, data set or decoding."""
    if backend != "vllm" or stage not in DECODING_STAGES:
        return
    # lazy: tests replace vllm_missing at its source, read at call time
    from harness.sampling.vllm_rollout import vllm_missing

    missing = vllm_missing()
    if missing:
        raise ConfigError(f"'generation.backend' = 'vllm' {missing}; use generation.backend=lean")
    try:
        device = model_device(model)
    except ValueError:
        return  # check_device names the device problem
    if device.type != "cuda":
        raise ConfigError(f"'generation.backend' = 'vllm' needs a CUDA GPU (the model runs on {device} here); "
                          "use generation.backend=lean")


def check_inputs(cfg: RunConfig, stage: str) -> None:
    """Input folders and files a stage reads: present and of the right kind, with errors naming the key."""
    d = cfg.data
    if d.annotation is not None and not Path(d.annotation).is_file():
        raise ConfigError(f"'data.annotation' = '{d.annotation}': file not found")
    if d.image_dir is not None and not Path(d.image_dir).is_dir():
        raise ConfigError(f"'data.image_dir' = '{d.image_dir}': folder not found")
    if cfg.init_from:
        check_stage_model(cfg.init_from, "init_from")
        if cfg.model.path:
            check_base_model(cfg.model.path, "model.path")
    else:
        check_base_model(cfg.model.path or _preset_path(cfg.model), "model.path")
    if stage == "sft":
        if not cfg.classifier.dir:
            raise ConfigError("stage 2 (sft) needs 'classifier.dir': the folder written by `regbench classifier "
                              "train`")
        check_classifier_dir(cfg.classifier.dir, "classifier.dir")
    if stage == "classifier" and cfg.classifier.pretrained_path:
        check_classifier_start(cfg.classifier)
    check_device(cfg.model)  # every stage, the classifier too, runs on model.device
    if stage == "classifier":
        check_classifier_precision(cfg.classifier, cfg.model)


# Where the Medical-MAE checkpoint of the MIMIC-CXR presets comes from (it is never downloaded here).
MEDICAL_MAE_SOURCE = ("Medical-MAE's ViT-B/16 weights (vit-b_CXR_0.5M_mae_CheXpert.pth, the Google Drive folder "
                      "linked in the README of github.com/lambert-x/medical_mae)")


def check_classifier_start(c) -> None:
    """classifier.pretrained_path of the classifier section `c`: present and a readable checkpoint (its layout is
    checked when the model is built, still before the run folder opens)."""
    path = Path(c.pretrained_path)
    if path.is_dir():  # a classifier folder (IU-Xray starts from MIMIC-CXR's: a study's `upstream`)
        path = path / "classifier.safetensors"
    if not path.is_file():
        source = (MEDICAL_MAE_SOURCE if c.pretrained_format == "medical_mae" else
                  "a timm state dict of classifier.arch, or a classifier folder of `regbench classifier train`")
        raise ConfigError(f"'classifier.pretrained_path' = '{c.pretrained_path}': file not found; put {source} "
                          "there, or set classifier.pretrained_path to null (random init)")
    try:
        read_state_dict(c.pretrained_path, "classifier.pretrained_path",
                        allow_namespace=c.pretrained_format == "medical_mae")
    except ValueError as e:
        raise ConfigError(str(e)) from e


def check_classifier_precision(classifier, model) -> None:
    """classifier.amp_bf16 on a CPU needs native bf16 (oneDNN would emulate it, slower than fp32); a GPU has it.
    `classifier`, `model`: the run's classifier and model sections."""
    if classifier.amp_bf16 and model_device(model).type == "cpu":
        # lazy: tests replace native_cpu_bf16 at its source, read at call time
        from harness.models.classifier.training import NO_NATIVE_BF16, native_cpu_bf16

        if not native_cpu_bf16():
            raise ConfigError(NO_NATIVE_BF16)


def check_run_folder(cfg: RunConfig, stage: str, restart: bool | None = None) -> None:
    """The out folder can hold this stage's run: not under a file, not another stage's or config's run (unless
    --restart), not held by another live process. Reads only."""
    path = Path(cfg.out_dir)
    restart = runstate.restart_requested() if restart is None else restart
    runstate.check_out_dir(path)
    if not restart:
        runstate.check_reuse(path, to_dict(cfg), stage)
    if path.is_dir():
        runlock.check_free(path)
    if not restart and path.is_dir() and not (path / "metrics.json").is_file():

        check_resumable(path, stage)  # a checkpoint that cannot be resumed: refused before the manifest is rewritten


def model_device(model) -> torch.device:
    """The device of `model.device` (`model`: the run's model section, ModelConfig); "auto" is this process's GPU
    when CUDA is available, else the CPU."""
    name = model.device
    if name == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"model.device = {name!r}, but CUDA is not available here (use auto or cpu)")
    device = torch.device(name)
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"model.device = {name!r}, but this machine has {torch.cuda.device_count()} CUDA "
                         f"device(s) (cuda:0 .. cuda:{torch.cuda.device_count() - 1}); use auto or one of them")
    return device


def check_device(model) -> None:
    """`model.device` (`model`: the model section) names a device this machine has."""
    try:
        model_device(model)
    except ValueError as e:
        raise ConfigError(str(e)) from e


def _preset_path(model) -> str | None:
    """The base model of the model section's preset without model.path (None for the tiny one: stage 0 builds
    it)."""
    preset = get_preset(model.preset)
    return None if preset.name == "tiny" else preset.default_path


def check_base_model(path: str | None, key: str) -> None:
    """A base model's folder (a hub id only when it is in the local Hugging Face cache: nothing is downloaded)."""
    if path and (Path(path).exists() or _is_hub_id(str(path))):  # a missing local folder: the loader says so,
        check_base_folder(local_model_folder(path, key), key)     # after the data checks, before any write


def check_classifier_dir(path: str, key: str) -> None:
    """The folder `regbench classifier train` wrote: classifier.json readable and complete, weights present."""
    if not Path(path).is_dir():
        raise ConfigError(f"'{key}' = '{path}': folder not found (the folder written by `regbench classifier "
                          "train`, e.g. RUN/classifier)")
    try:
        read_classifier_meta(path)
    except (FileNotFoundError, ValueError) as e:
        raise ConfigError(f"'{key}' = '{path}': {e}") from e


def check_stage_model(path: str | Path, key: str) -> None:
    """A stage's model folder (spec.json + its weights in any checkpoint format), and the base folder its spec
    names."""
    p = Path(path)
    if not p.is_dir():
        raise ConfigError(f"'{key}' = '{path}': folder not found (a stage's RUN/model folder)")
    spec_path = p / SPEC
    try:
        spec = read_spec(p)
    except (FileNotFoundError, ValueError) as e:
        raise ConfigError(f"'{key}' = '{path}': {e}") from e
    names = (ADAPTER_WEIGHTS, MERGER_WEIGHTS, LEGACY_WEIGHTS)
    if not any((p / name).is_file() for name in names):
        raise ConfigError(f"'{key}' = '{path}': no weights ({', '.join(names)}) in it; rerun the stage that wrote it")
    if Path(spec["base"]).exists():
        check_base_folder(spec["base"], f"{spec_path} base")
