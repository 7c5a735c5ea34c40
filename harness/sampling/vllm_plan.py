"""The settings of a colocated vLLM engine (generation.backend=vllm), from the run's config and data (issue 43).

Pure functions, no vLLM: what the engine is built with is decided here, before it starts, from every prompt it
will see (the stage passes its prompt sets), so neither the image count per prompt nor the context length depends
on which batch comes first.

- `max_images` (vLLM's limit_mm_per_prompt): the most views any prompt has (IU-Xray: up to 5 per study).
- `max_model_len`: the longest prompt, in tokens after the image placeholders are expanded, plus the most new
  tokens any decoding of the stage asks for (RL rollouts: rl.max_new_tokens; validation and test:
  generation.max_new_tokens). An image's token count is bounded by the processor's pixel limit
  (`max_pixels / (patch_size * merge_size)^2`); the images are resized to `model.image_size` squares, so the bound
  is exact.
- `mm_processor_kwargs`: the processor's min/max pixels, so that vLLM's own processor (loaded from the base
  folder) sizes the images as the policy's processor does.
- `dtype`: generation.vllm_dtype, or the policy's own weight dtype.
- `seed`: the run's seed plus the rank (one engine per process under torchrun).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EngineSpec:
    model: str                      # the base model's folder (vLLM loads it, the trained weights are synced after)
    dtype: str                      # bfloat16 / float16 / float32
    gpu_memory_utilization: float
    max_model_len: int
    max_images: int
    sleep_level: int                # 0 = no sleep mode; 1, 2 = vLLM's sleep levels between decodings
    seed: int
    mm_processor_kwargs: dict = field(default_factory=dict)


def view_counts(images) -> list[int]:
    """Views per prompt, without decoding any image (a LazyViews set counts its samples' paths)."""
    items = getattr(images, "items", None)
    if items is not None and not callable(items):  # harness/data/streaming.py LazyViews
        return [len(it.image_paths) if hasattr(it, "image_paths") else len(it) for it in items]
    return [len(v) for v in images]


def pixel_limits(processor) -> tuple[int, int]:
    """(min_pixels, max_pixels) of a Qwen2-VL image processor (transformers keeps them in `size` or as fields)."""
    ip = processor.image_processor
    size = getattr(ip, "size", None) or {}
    lo = size.get("shortest_edge", getattr(ip, "min_pixels", None))
    hi = size.get("longest_edge", getattr(ip, "max_pixels", None))
    if lo is None or hi is None:
        raise ValueError("generation.backend=vllm: the image processor states no min/max pixels")
    return int(lo), int(hi)


def tokens_per_image(processor) -> int:
    """The most LLM tokens one image becomes: one per merge_size x merge_size patches of patch_size pixels."""
    ip = processor.image_processor
    unit = int(ip.patch_size) * int(ip.merge_size)
    return pixel_limits(processor)[1] // (unit * unit)


def longest_prompt(processor, instructions: Sequence[str], views: Sequence[int]) -> int:
    """Tokens of the longest chat-template prompt, each image placeholder expanded to `tokens_per_image`."""
    # lazy: start-up cost (torch)
    from harness.prompting.batching import prompt_text

    per_image = tokens_per_image(processor)
    longest = 0
    for ins, n in sorted(set(zip(instructions, views, strict=True))):
        text = prompt_text(processor, ins, n)  # one <|image_pad|> per view, as vLLM receives it
        ids = processor.tokenizer(text, add_special_tokens=False)["input_ids"]
        longest = max(longest, len(ids) + n * (per_image - 1))
    return longest


def engine_spec(model_path: str, processor, generation, prompt_sets: Sequence[tuple], *, policy_dtype: str,
                seed: int, rank: int) -> EngineSpec:
    """The engine's settings for a stage whose decodings are `prompt_sets` = [(images, instructions,
    max_new_tokens), ...] (generation: the run's GenerationConfig)."""
    max_len, max_images = 0, 1
    for images, instructions, max_new in prompt_sets:
        views = view_counts(images)
        if not views:
            continue
        max_images = max(max_images, max(views))
        max_len = max(max_len, longest_prompt(processor, instructions, views) + int(max_new))
    if max_len == 0:
        raise ValueError("generation.backend=vllm: no prompts to size the engine with")
    lo, hi = pixel_limits(processor)
    return EngineSpec(model=str(model_path), dtype=generation.vllm_dtype or policy_dtype,
                      gpu_memory_utilization=generation.vllm_gpu_memory_utilization, max_model_len=max_len,
                      max_images=max_images, sleep_level=generation.vllm_sleep_level, seed=seed + rank,
                      mm_processor_kwargs={"min_pixels": lo, "max_pixels": hi})
