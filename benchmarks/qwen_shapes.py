"""Qwen2.5-VL-3B / -7B shapes for the benchmarks: random weights, the published widths, any depth.

The numbers are those of the public `config.json` of Qwen/Qwen2.5-VL-3B-Instruct and Qwen/Qwen2.5-VL-7B-Instruct
on the Hugging Face hub (text and vision_config sections; read 2026-11-30). Only the token ids of the special
tokens come from the project's offline tokenizer (harness/models/tiny.py), so its processor drives the model;
the vocabulary keeps the published size (the embedding and lm_head are the largest matrices of the 3B).
"""

from __future__ import annotations

from harness.models.published import PUBLISHED  # the numbers, cited there


def qwen_config(name: str, tokenizer, text_layers: int | None = None, vision_depth: int | None = None):
    """A Qwen2_5_VLConfig of the published shape `name` ("3b" / "7b"), optionally cut to fewer layers/blocks.

    A cut vision tower keeps the published pattern of windowed blocks with a full-attention block last (the
    published towers end each group of 8 with one)."""
    from transformers import Qwen2_5_VLConfig

    from harness.models.tiny import tiny_model_config

    text, vision = (dict(d) for d in PUBLISHED[name])
    ids = tiny_model_config(tokenizer).to_dict()  # the special-token ids of the offline tokenizer
    if text_layers is not None:
        text["num_hidden_layers"] = text_layers
    if vision_depth is not None and vision_depth != vision["depth"]:
        vision["depth"] = vision_depth
        vision["fullatt_block_indexes"] = [i for i in range(vision_depth) if i % 8 == 7] or [vision_depth - 1]
    tie = text["tie_word_embeddings"]
    text["rope_scaling"] = {"type": "mrope", "mrope_section": text.pop("mrope_section")}
    text.update(max_position_embeddings=4096, eos_token_id=ids["eos_token_id"], pad_token_id=ids["pad_token_id"],
                bos_token_id=ids["pad_token_id"])
    return Qwen2_5_VLConfig(
        text_config=text, vision_config=vision,
        image_token_id=ids["image_token_id"], video_token_id=ids["video_token_id"],
        vision_start_token_id=ids["vision_start_token_id"], vision_end_token_id=ids["vision_end_token_id"],
        tie_word_embeddings=tie, eos_token_id=ids["eos_token_id"], pad_token_id=ids["pad_token_id"])


def build_model(config, dtype, device="cpu", attn: str = "sdpa"):
    """Random weights, built directly in `dtype` on `device` (no float32 copy of the whole model)."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen2_5_VLForConditionalGeneration(config)
    finally:
        torch.set_default_dtype(before)
    model.set_attn_implementation(attn)
    model.generation_config.pad_token_id = config.pad_token_id
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.do_sample = False
    return model


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())
