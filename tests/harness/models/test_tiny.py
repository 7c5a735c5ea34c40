"""The tiny preset is a real Qwen2.5-VL: processor, M-RoPE, save/load offline, special-token suppression."""

from __future__ import annotations

import json
import warnings

import torch

from harness.models.checkpoint import load_base
from harness.models.tiny import SPECIAL_TOKENS, save_base
from harness.prompting.batching import NEVER_GENERATE, encode_prompts, model_inputs, suppressed_token_ids
from harness.sampling.decoding import generate_reports
from harness.sampling.hf_api import get_rope_index, mrope_section


def test_special_tokens_have_qwen_order_and_config_ids(tiny_tokenizer, tiny_model):
    ids = [tiny_tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS]
    assert ids == list(range(ids[0], ids[0] + len(SPECIAL_TOKENS)))
    cfg = tiny_model.config
    assert cfg.image_token_id == tiny_tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert cfg.vision_start_token_id == tiny_tokenizer.convert_tokens_to_ids("<|vision_start|>")
    head_dim = cfg.text_config.hidden_size // cfg.text_config.num_attention_heads
    assert sum(mrope_section(cfg.text_config)) == head_dim // 2


def test_chat_template_matches_qwen_layout(tiny_processor):
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe."}]}]
    text = tiny_processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert text == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                    "<|vision_start|><|image_pad|><|vision_end|>Describe.<|im_end|>\n<|im_start|>assistant\n")


def test_processor_expands_image_tokens(tiny_processor, xray_images):
    batch = encode_prompts(tiny_processor, [[xray_images[0]], [xray_images[1], xray_images[2]]], ["a", "b"])
    image_id = tiny_processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    # 56 px -> 4x4 patches of 14 px -> 2x2 merged tokens per image.
    per_row = (batch["input_ids"] == image_id).sum(dim=1).tolist()
    assert per_row == [4, 8]
    assert batch["image_grid_thw"].tolist() == [[1, 4, 4]] * 3


def test_positions_are_three_dimensional_over_image_tokens(tiny_processor, tiny_model, xray_images):
    batch = encode_prompts(tiny_processor, [[xray_images[0]]], ["describe"])
    pos, _ = get_rope_index(tiny_model.model, batch["input_ids"], batch["image_grid_thw"], batch["attention_mask"])
    image_id = tiny_processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    img = batch["input_ids"][0] == image_id
    t, h, w = pos[0, 0, img], pos[1, 0, img], pos[2, 0, img]
    # M-RoPE: the image tokens share one temporal position and span a 2x2 grid in (h, w).
    assert len(set(t.tolist())) == 1
    assert sorted(set(h.tolist())) == [h.min().item(), h.min().item() + 1]
    assert sorted(set(w.tolist())) == [w.min().item(), w.min().item() + 1]
    # Without image grid information the same ids get plain 1-D positions: a different embedding.
    pos1d = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0).expand(3, -1, -1)
    assert not torch.equal(pos, pos1d)


def _image_processor_saved(folder) -> bool:
    """The image processor's settings: preprocessor_config.json in 4.57, inside processor_config.json in 5.x."""
    if (folder / "preprocessor_config.json").is_file():
        return True
    combined = folder / "processor_config.json"
    return combined.is_file() and "image_processor" in json.loads(combined.read_text())


def test_save_load_offline_round_trip_identical_logits(tmp_path, tiny_processor, tiny_model, xray_images):
    folder = save_base(tiny_model, tiny_processor, tmp_path / "base")
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    assert (folder / "tokenizer.json").is_file() and _image_processor_saved(folder)
    loaded, proc = load_base(folder, image_size=56)
    with warnings.catch_warnings():  # the size reaches the processor as `size`, not the deprecated min/max_pixels
        warnings.filterwarnings("error", message=".*min_pixels", category=FutureWarning)
        batch = encode_prompts(proc, [[xray_images[0]]], ["describe"])
    ref = encode_prompts(tiny_processor, [[xray_images[0]]], ["describe"])
    assert torch.equal(batch["input_ids"], ref["input_ids"])
    assert torch.equal(batch["pixel_values"], ref["pixel_values"])
    tiny_model.eval()
    loaded.eval()
    with torch.no_grad():
        a = tiny_model(**model_inputs(ref)).logits
        b = loaded(**model_inputs(batch)).logits
    assert torch.equal(a, b)


def test_generation_never_emits_control_tokens(tiny_processor, tiny_model, xray_images):
    # Bias the LM head so that, unsuppressed, the vision tokens would win every step.
    tok = tiny_processor.tokenizer
    banned = suppressed_token_ids(tok)
    assert len(banned) == len(NEVER_GENERATE)
    with torch.no_grad():
        tiny_model.lm_head.weight.zero_()
        tiny_model.lm_head.weight[banned] = 1.0
        tiny_model.model.language_model.norm.weight.fill_(1.0)
    batch = encode_prompts(tiny_processor, [[xray_images[0]]], ["describe"])
    out = tiny_model.generate(**batch, max_new_tokens=6, do_sample=False, suppress_tokens=banned)
    new = out[0, batch["input_ids"].shape[1]:].tolist()
    assert not set(new) & set(banned)
    texts = generate_reports(tiny_model, tiny_processor, [[xray_images[0]]], ["describe"], max_new_tokens=6,
                             progress=False)
    assert all("<|" not in t for t in texts)
