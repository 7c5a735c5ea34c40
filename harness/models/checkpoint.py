"""Stage outputs: a base-model reference plus the parameters the stages changed, in formats others can load.

A stage writes `<run>/model/` holding
- `spec.json`: the base (the folder or hub id it was loaded from, and `base_id`, the hub id it stands for),
  the preset, image size, dtype and attention implementation, the stage, the LoRA settings, and how prompts
  were built (e.g. the classifier folder);
- stages with LoRA (SFT, RL): a peft adapter, `adapter_config.json` + `adapter_model.safetensors`, holding
  the LoRA tensors and the merger (peft's `modules_to_save`), and, where the stage trained token rows
  (`model.train_format_tokens`), peft's `trainable_token_indices` delta, so `PeftModel.from_pretrained(base,
  RUN/model)` is the stage's model;
- the warm-up (merger only; peft cannot write an adapter without LoRA layers): `merger.safetensors`, the
  merger's tensors under the Hugging Face module's names (`model.load_state_dict(..., strict=False)`).
Tensors are the fp32 master weights. Loading builds the base once and lays them over it: no second copy of a
7B base is ever written. `export_merged` writes a plain transformers folder with LoRA merged in.
Older checkpoints (`trainable.safetensors`) still load.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from harness.config.presets import get_preset
from harness.errors import ConfigError
from harness.models.trainable import (
    MERGER,
    TOKEN_DELTA,
    add_lora,
    has_lora,
    lora_targets,
    token_targets,
    trainable_state,
    unwrap,
    upcast_stage_parameters,
)
from harness.runs.durable import fsync_tree, replace_dir, reporting_disk_full
from harness.runs.records import atomic_write_json

SPEC = "spec.json"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
MERGER_WEIGHTS = "merger.safetensors"
LEGACY_WEIGHTS = "trainable.safetensors"  # format 1: merger + LoRA under the unwrapped module's names
WEIGHTS = LEGACY_WEIGHTS  # kept for callers of the old name
FORMAT = 2
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# peft's file layout: keys under the PeftModel wrapper, the adapter name ("default") left out.
_PEFT_PREFIX = "base_model.model."
_ADAPTER = "default"
_MERGER_MODULE = "visual.merger"  # peft `modules_to_save` entry (matched as a suffix of the module name)
_LORA_KEY = re.compile(rf"\.(lora_A|lora_B)\.{_ADAPTER}\.")
_PEFT_LORA_KEY = re.compile(r"\.(lora_A|lora_B)\.")
_TOKEN_KEY = f".{TOKEN_DELTA}.{_ADAPTER}"  # peft stores the delta without the adapter name


def _is_hub_id(path: str) -> bool:
    return re.fullmatch(r"[\w.-]+/[\w.-]+", path) is not None and not path.startswith(".")


def check_base_folder(path: str | Path, key: str) -> None:
    """A Hugging Face model folder: config.json and weights (safetensors or .bin, single or sharded)."""
    p = Path(path)
    if not p.is_dir():
        raise ConfigError(f"'{key}' = '{path}' is not a folder")
    if not (p / "config.json").is_file():
        raise ConfigError(f"'{key}' = '{path}': not a model folder (config.json missing)")
    weights = [*p.glob("*.safetensors"), *p.glob("pytorch_model*.bin"), *p.glob("*.safetensors.index.json")]
    if not weights:
        raise ConfigError(f"'{key}' = '{path}': no weights in the folder (*.safetensors or pytorch_model*.bin); "
                          "was the download or copy complete?")


def local_model_folder(path: str | Path, key: str = "model.path") -> str:
    """The local folder a base model is loaded from: `path` itself, or, for a hub id ("org/name") that is not a
    folder here, its snapshot in the Hugging Face cache. Never the network: a hub id that is not cached is an
    error at once, naming `key` and how to fetch the weights (the project downloads no models at run time)."""
    path_s = str(path)
    if Path(path_s).exists():
        return path_s
    if not _is_hub_id(path_s):
        raise ConfigError(f"'{key}' = '{path_s}': folder not found (a local Hugging Face model folder: config.json "
                          "and *.safetensors)")
    # lazy: start-up cost (huggingface_hub)
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(path_s, "config.json")
    if isinstance(cached, str):
        return str(Path(cached).parent)
    raise ConfigError(f"'{key}' = '{path_s}' is not a folder here and not in the Hugging Face cache; regbench loads "
                      "models from local folders only (no download at run time): fetch it once with `huggingface-cli "
                      f"download {path_s} --local-dir DIR` and set {key}=DIR")


def load_base(path: str | Path, dtype: str = "float32", image_size: int | None = None,
              attn_implementation: str = "eager"):
    """Load a Qwen2.5-VL folder (tiny or real) and its processor, offline: a hub id only from the local cache."""
    # lazy: start-up cost (transformers)
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    path_s = local_model_folder(path, "model folder")
    if not (Path(path_s) / "config.json").is_file():
        raise FileNotFoundError(f"{path_s}: not a model folder (config.json missing)")
    if Path(path_s).is_dir():
        check_base_folder(path_s, "model folder")
    try:
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
            path_s, dtype=_DTYPES[dtype], attn_implementation=attn_implementation, local_files_only=True
        )
    except Exception as e:  # noqa: BLE001 - safetensors and transformers raise many types for a bad folder
        if not Path(path_s).is_dir():
            raise
        # e.g. a truncated or corrupt *.safetensors: name the folder, not transformers' internals
        raise ValueError(f"{path_s}: cannot load the model ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                         "check that its weight files are complete") from e
    # lazy: start-up cost (transformers)
    from harness.models.patch_embed import apply_saved_patch_embed

    apply_saved_patch_embed(model)  # a tiny base built with pretrain.patch_embed=matmul computes as it was trained
    kwargs = {}
    if image_size is not None:
        # One square size: min = max pixels, as `size`'s edges (min_pixels / max_pixels warn in transformers 5.20
        # and go in 5.23; the processor maps them to these two keys, so the pixels are the same).
        pixels = image_size * image_size
        kwargs = {"size": {"shortest_edge": pixels, "longest_edge": pixels}}
    processor = AutoProcessor.from_pretrained(path_s, local_files_only=True, **kwargs)
    processor.tokenizer.padding_side = "left"
    return model, processor


def to_peft_key(name: str) -> str:
    """A merger / LoRA / token-row parameter name of the unwrapped module -> its key in a peft adapter file."""
    if name.endswith(_TOKEN_KEY):
        return _PEFT_PREFIX + name[: -len(f".{_ADAPTER}")]
    return _PEFT_PREFIX + _LORA_KEY.sub(r".\1.", name)


def from_peft_key(key: str) -> str:
    """The inverse of `to_peft_key`."""
    if not key.startswith(_PEFT_PREFIX):
        raise ValueError(f"'{key}' is not a peft adapter key (expected the prefix '{_PEFT_PREFIX}')")
    name = key[len(_PEFT_PREFIX):]
    if name.endswith(f".{TOKEN_DELTA}"):
        return f"{name}.{_ADAPTER}"
    return name if name.startswith(MERGER) else _PEFT_LORA_KEY.sub(rf".\1.{_ADAPTER}.", name)


def lora_config(lora: dict, base_id: str | None, model=None):
    """The peft `LoraConfig` of stages 2-3: LoRA on LORA_TARGETS (and the patch embedding's Conv3d with
    `lora["patch_embed"]`), the merger saved whole, and the token rows the
    stage trained (`lora["token_indices"]`, as add_lora gave them to `model`)."""
    # lazy: start-up cost (peft)
    from peft import LoraConfig

    tokens = token_targets(model, lora.get("token_indices")) if model is not None else None
    return LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                      target_modules=lora_targets(lora.get("patch_embed", False)), bias="none",
                      modules_to_save=[_MERGER_MODULE],
                      trainable_token_indices=tokens, base_model_name_or_path=base_id)


def model_settings(model) -> dict:
    """What a stage model records about its model besides the base folder, from the run's model section
    `model` (ModelConfig): preset, image size, dtype, attention, and `base_id`, the hub id the base stands for
    (`model.path` when it is a hub id, else the preset's; a local `model.path` is taken for a copy of the preset's
    model; None for the tiny preset)."""
    preset = get_preset(model.preset)
    path = model.path
    base_id = path if path and not Path(path).exists() and _is_hub_id(path) else preset.default_path
    return {"preset": preset.name, "base_id": base_id, "image_size": model.image_size,
            "dtype": model.dtype, "attn_implementation": model.attn_implementation}


def adopt_checkpoint_settings(model, model_dir: str | Path) -> None:
    """Use the image size, dtype and attention a stage model records where the run's model section `model`
    (ModelConfig) took the preset's defaults (values set in the config or on the command line are kept), in place.
    No-op for a plain model folder."""
    if not (Path(model_dir) / SPEC).is_file():
        return
    spec = read_spec(model_dir)
    for key in getattr(model, "_preset_owned", ()):
        if spec.get(key) is not None:
            setattr(model, key, spec[key])


def _save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    save_file(tensors, str(path))


def save_stage_model(model, out_dir: str | Path, base_path: str | Path, stage: str,
                     lora: dict | None = None, extra: dict | None = None, settings: dict | None = None) -> Path:
    """`extra` records how prompts were built (e.g. the classifier folder) so eval and RL rebuild them;
    `settings` the model's preset, image size, dtype, attention and base id (`model_settings`).

    Crash-consistent (harness/runs/durable.py): the folder is written beside `out_dir` (`<name>.tmp`), every
    file and the folder fsynced, then renamed into place; a full disk names the file and the size needed and
    leaves no temporary folder (an earlier `out_dir` stays as it was)."""
    final = Path(out_dir)
    final.parent.mkdir(parents=True, exist_ok=True)
    out = final.with_name(final.name + ".tmp")
    tensors = {k: v.detach().cpu().contiguous() for k, v in trainable_state(model).items()}
    needed = sum(v.numel() * v.element_size() for v in tensors.values())
    with reporting_disk_full(out / (ADAPTER_WEIGHTS if lora else MERGER_WEIGHTS), "the stage model", needed,
                             cleanup=[out]):
        if out.exists():
            shutil.rmtree(out)
        out.mkdir()
        _write_stage_model(model, out, tensors, base_path, stage, lora, extra, settings)
        fsync_tree(out)
        replace_dir(out, final)
    return final


def _write_stage_model(model, out: Path, tensors: dict, base_path, stage: str, lora: dict | None, extra: dict | None,
                       settings: dict | None) -> None:
    settings = dict(settings or {})
    lora = lora if has_lora(model) else None
    if lora:
        _save_tensors({to_peft_key(k): v for k, v in tensors.items()}, out / ADAPTER_WEIGHTS)
        base_id = settings.get("base_id") or str(base_path)
        lora_config(lora, base_id, model).save_pretrained(str(out))  # peft's own adapter_config.json
    else:
        _save_tensors({k: v for k, v in tensors.items() if k.startswith(MERGER)}, out / MERGER_WEIGHTS)
    spec = {"format": FORMAT,
            "base": str(Path(base_path).resolve()) if Path(base_path).exists() else str(base_path),
            "stage": stage, "lora": lora, **settings, **(extra or {})}
    atomic_write_json(out / SPEC, spec)  # last: a folder with spec.json is complete


def read_spec(model_dir: str | Path) -> dict:
    model_dir = Path(model_dir)
    spec_path = model_dir / SPEC
    if not spec_path.is_file():
        raise FileNotFoundError(f"{model_dir}: not a stage model ({SPEC} missing)")
    try:
        spec = json.loads(spec_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{spec_path}: not valid JSON ({e}); rerun the stage that wrote it") from e
    if not isinstance(spec, dict) or not isinstance(spec.get("base"), str):
        raise ValueError(f"{spec_path}: needs a 'base' entry naming the base model folder; rerun the stage that "
                         "wrote it")
    return spec


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; rerun the stage that wrote this model folder")
    try:
        return load_file(str(path))
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types for a corrupt header
        raise ValueError(f"{path}: corrupt or truncated safetensors file ({type(e).__name__}: {e}); rerun the "
                         "stage that wrote it") from e


def resolve_base(spec: dict, model_dir: str | Path, fallback: str | Path | None = None) -> str:
    """Where to load the base from: the recorded folder if it is here, else `fallback` (e.g. `model.path` on
    this machine), else the recorded hub id."""
    base = str(spec["base"])
    if Path(base).exists() or _is_hub_id(base):
        return base
    if fallback:
        return str(fallback)
    if spec.get("base_id"):
        return str(spec["base_id"])
    raise FileNotFoundError(f"{model_dir}/{SPEC}: base model folder {base} not found here and no hub id "
                            "recorded; set model.path to the base model's folder")


def stage_tensors(model_dir: str | Path) -> dict[str, torch.Tensor]:
    """The stage's merger / LoRA tensors under the unwrapped module's names, from any checkpoint format."""
    model_dir = Path(model_dir)
    if (model_dir / ADAPTER_WEIGHTS).is_file():
        return {from_peft_key(k): v for k, v in _load_safetensors(model_dir / ADAPTER_WEIGHTS).items()}
    for name in (MERGER_WEIGHTS, LEGACY_WEIGHTS):
        if (model_dir / name).is_file():
            return _load_safetensors(model_dir / name)
    raise FileNotFoundError(f"{model_dir}: no weights ({ADAPTER_WEIGHTS}, {MERGER_WEIGHTS} or {LEGACY_WEIGHTS})")


def load_stage_model(model_dir: str | Path, dtype: str | None = None, image_size: int | None = None,
                     attn_implementation: str | None = None, base_path: str | Path | None = None):
    """Base + the stage's merger/LoRA tensors. Returns (model, processor, spec).

    dtype / image size / attention default to the checkpoint's recorded ones (float32, the processor's own
    size, eager for checkpoints that record none); `base_path` is used when the recorded base is not here."""
    model_dir = Path(model_dir)
    spec = read_spec(model_dir)
    dtype = dtype or spec.get("dtype") or "float32"
    image_size = image_size or spec.get("image_size")
    attn_implementation = attn_implementation or spec.get("attn_implementation") or "eager"
    model, processor = load_base(resolve_base(spec, model_dir, base_path), dtype, image_size, attn_implementation)
    if spec.get("lora"):
        model = add_lora(model, **spec["lora"])
    upcast_stage_parameters(model)  # the saved tensors are fp32 master weights: load them exactly
    apply_tensors(model, stage_tensors(model_dir), source=str(model_dir))
    return model, processor, spec


def apply_tensors(model, tensors: dict[str, torch.Tensor], source: str) -> None:
    params = dict(unwrap(model).named_parameters())
    missing = [k for k in tensors if k not in params]
    if missing:
        raise ValueError(f"{source}: tensor '{missing[0]}' has no matching parameter in the model")
    with torch.no_grad():
        for k, v in tensors.items():
            if params[k].shape != v.shape:
                raise ValueError(f"{source}: '{k}' has shape {tuple(v.shape)}, model has {tuple(params[k].shape)}")
            params[k].copy_(v.to(params[k].dtype))


def export_merged(model_dir: str | Path, out_dir: str | Path, base_path: str | Path | None = None) -> Path:
    """A plain transformers folder of the stage's model (LoRA merged into the base, in the base's dtype) plus
    its processor: `Qwen2_5_VLForConditionalGeneration.from_pretrained(out_dir)` needs neither peft nor
    this project. The merge goes through peft itself (`PeftModel.from_pretrained` + `merge_and_unload`)."""
    model_dir, out = Path(model_dir), Path(out_dir)
    spec = read_spec(model_dir)
    if out.resolve() == model_dir.resolve():
        raise ValueError(f"export: the output folder {out} is the checkpoint folder itself")
    dtype = spec.get("dtype") or "float32"
    model, processor = load_base(resolve_base(spec, model_dir, base_path), dtype, spec.get("image_size"),
                                 spec.get("attn_implementation") or "eager")
    if (model_dir / ADAPTER_WEIGHTS).is_file():
        # lazy: start-up cost (peft)
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(model_dir)).merge_and_unload()
    else:
        apply_tensors(model, stage_tensors(model_dir), source=str(model_dir))
    model = model.to(_DTYPES[dtype])
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    return out


def load_any_model(model_dir: str | Path, model):
    """A stage model (spec.json) or a plain base-model folder, with the model section's (`model`, ModelConfig)
    dtype, image size, attention and base path."""
    p = Path(model_dir)
    if (p / "spec.json").is_file():
        attn = read_spec(p).get("attn_implementation") or model.attn_implementation
        return load_stage_model(p, model.dtype, model.image_size, attn, base_path=model.path)
    loaded, processor = load_base(p, model.dtype, model.image_size, model.attn_implementation)
    return loaded, processor, {"base": str(p), "stage": "base"}
