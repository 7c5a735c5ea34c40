"""The published shapes of Qwen2.5-VL-3B / -7B (for plans and benchmarks that cannot load the weights).

The numbers are those of the public `config.json` of Qwen/Qwen2.5-VL-3B-Instruct and Qwen/Qwen2.5-VL-7B-Instruct
on the Hugging Face hub (text and vision_config sections; read 2026-11-30; benchmarks/qwen_shapes.py).
"""

from __future__ import annotations

# name: (text section, vision section) of the published config.json.
PUBLISHED = {
    "3b": (
        dict(vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
             num_attention_heads=16, num_key_value_heads=2, rope_theta=1000000.0, rms_norm_eps=1e-6,
             mrope_section=[16, 24, 24], tie_word_embeddings=True),
        dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
             patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
             fullatt_block_indexes=[7, 15, 23, 31]),
    ),
    "7b": (
        dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
             num_attention_heads=28, num_key_value_heads=4, rope_theta=1000000.0, rms_norm_eps=1e-6,
             mrope_section=[16, 24, 24], tie_word_embeddings=False),
        dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584,
             patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
             fullatt_block_indexes=[7, 15, 23, 31]),
    ),
}
# The model presets (harness/config/presets.py) of each published shape.
PRESET_SHAPES = {"qwen2.5-vl-3b": "3b", "qwen2.5-vl-7b": "7b"}


def published_config(name: str, text_layers: int | None = None, vision_depth: int | None = None,
                     vocab_size: int | None = None):
    """A Qwen2_5_VLConfig of the published shape `name` ("3b" / "7b"), optionally with fewer layers / blocks or
    another vocabulary (special-token ids: transformers' defaults; enough to build and count the model)."""
    # lazy: start-up cost (transformers)
    from transformers import Qwen2_5_VLConfig

    text, vision = (dict(d) for d in PUBLISHED[name])
    if text_layers is not None:
        text["num_hidden_layers"] = text_layers
    if vision_depth is not None and vision_depth != vision["depth"]:
        vision["depth"] = vision_depth
        vision["fullatt_block_indexes"] = [i for i in range(vision_depth) if i % 8 == 7] or [vision_depth - 1]
    if vocab_size is not None:
        text["vocab_size"] = vocab_size
    tie = text["tie_word_embeddings"]
    text["rope_scaling"] = {"type": "mrope", "mrope_section": text.pop("mrope_section")}
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=tie)
