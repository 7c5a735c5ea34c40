"""Model presets (the model families a config names): `tiny` differs from the 7B preset only in configuration, same
class, same processor. Data only: the config checks names against it, the model loaders read it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    name: str
    # Default location of the base weights: a local folder or a hub id (hub ids need the network).
    default_path: str | None
    # Square image side (official code: pad to square, resize to 336 for Qwen).
    image_size: int
    dtype: str
    attn_implementation: str


PRESETS: dict[str, Preset] = {
    # The tiny base is built by stage 0 (`regbench train pretrain`) and cached by config hash.
    "tiny": Preset("tiny", None, 112, "float32", "eager"),
    "qwen2.5-vl-3b": Preset("qwen2.5-vl-3b", "Qwen/Qwen2.5-VL-3B-Instruct", 336, "bfloat16", "sdpa"),
    "qwen2.5-vl-7b": Preset("qwen2.5-vl-7b", "Qwen/Qwen2.5-VL-7B-Instruct", 336, "bfloat16", "sdpa"),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown model preset '{name}'; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]
