"""Stage outputs: a base-model folder plus the parameters the stages changed.

A stage writes `<run>/model/` holding `spec.json` (the base folder, the LoRA settings if any, the stage) and
`trainable.safetensors` (merger + LoRA tensors, named as in the unwrapped Hugging Face module). Loading builds
the base once and lays those tensors over it: no second copy of a 7B base is ever written or loaded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from harness.models.trainable import add_lora, has_lora, trainable_state, unwrap, upcast_stage_parameters
from harness.records import atomic_write_json

SPEC = "spec.json"
WEIGHTS = "trainable.safetensors"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_base(path: str | Path, dtype: str = "float32", image_size: int | None = None,
              attn_implementation: str = "eager"):
    """Load a Qwen2.5-VL folder (tiny or real) and its processor, offline-capable."""
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    path_s = str(path)
    if Path(path_s).exists():
        if not (Path(path_s) / "config.json").is_file():
            raise FileNotFoundError(f"{path_s}: not a model folder (config.json missing)")
    elif not re.fullmatch(r"[\w.-]+/[\w.-]+", path_s) or path_s.startswith("."):
        # Not a folder here and not shaped like a hub id ("org/name"): say so instead of asking the hub.
        raise FileNotFoundError(f"model folder not found: {path_s}")
    if Path(path_s).is_dir():
        from harness.preflight import check_base_folder

        check_base_folder(path_s, "model folder")
    try:
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
            path_s, dtype=_DTYPES[dtype], attn_implementation=attn_implementation
        )
    except Exception as e:  # noqa: BLE001 - safetensors and transformers raise many types for a bad folder
        if not Path(path_s).is_dir():
            raise
        # e.g. a truncated or corrupt *.safetensors: name the folder, not transformers' internals
        raise ValueError(f"{path_s}: cannot load the model ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                         "check that its weight files are complete") from e
    kwargs = {}
    if image_size is not None:
        kwargs = {"min_pixels": image_size * image_size, "max_pixels": image_size * image_size}
    processor = AutoProcessor.from_pretrained(path_s, **kwargs)
    processor.tokenizer.padding_side = "left"
    return model, processor


def save_stage_model(model, out_dir: str | Path, base_path: str | Path, stage: str,
                     lora: dict | None = None, extra: dict | None = None) -> Path:
    """`extra` records how prompts were built (e.g. the classifier folder) so eval and RL rebuild them."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in trainable_state(model).items()}
    tmp = out / (WEIGHTS + ".tmp")
    save_file(tensors, str(tmp))
    tmp.replace(out / WEIGHTS)
    spec = {"base": str(Path(base_path).resolve()) if Path(base_path).exists() else str(base_path),
            "stage": stage, "lora": lora if has_lora(model) else None, **(extra or {})}
    atomic_write_json(out / SPEC, spec)
    return out


def read_spec(model_dir: str | Path) -> dict:
    model_dir = Path(model_dir)
    spec_path = model_dir / SPEC
    if not spec_path.is_file():
        raise FileNotFoundError(f"{model_dir}: not a stage checkpoint ({SPEC} missing)")
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


def load_stage_model(model_dir: str | Path, dtype: str = "float32", image_size: int | None = None,
                     attn_implementation: str = "eager"):
    """Base + the stage's merger/LoRA tensors. Returns (model, processor, spec)."""
    model_dir = Path(model_dir)
    spec = read_spec(model_dir)
    model, processor = load_base(spec["base"], dtype, image_size, attn_implementation)
    if spec.get("lora"):
        model = add_lora(model, **spec["lora"])
    upcast_stage_parameters(model)  # the saved tensors are fp32 master weights: load them exactly
    apply_tensors(model, _load_safetensors(model_dir / WEIGHTS), source=str(model_dir / WEIGHTS))
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
