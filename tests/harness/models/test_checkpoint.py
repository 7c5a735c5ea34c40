"""Stage models (harness/models/checkpoint.py): peft adapters others can load, the merger file, spec.json,
reloading, and `export_merged` to a plain transformers folder."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.config import load_config
from harness.models.checkpoint import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    LEGACY_WEIGHTS,
    MERGER_WEIGHTS,
    adopt_checkpoint_settings,
    apply_tensors,
    export_merged,
    from_peft_key,
    load_stage_model,
    model_settings,
    read_spec,
    save_stage_model,
    to_peft_key,
)
from harness.models.tiny import save_base
from harness.models.trainable import MERGER, add_lora, set_trainable, trainable_state, unwrap
from harness.prompting.batching import encode_prompts
from harness.sampling.vllm_plan import pixel_limits

LORA = {"r": 4, "alpha": 8, "dropout": 0.0}
SETTINGS = {"preset": "tiny", "base_id": None, "image_size": 56, "dtype": "float32", "attn_implementation": "eager"}


def _perturb(model, seed=0):
    """Move what trains away from its init (LoRA B starts at zero: an unloaded adapter would go unnoticed)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in unwrap(model).parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=g))


def _logits(model, processor, images):
    """Logits at the prompts' real (not padding) positions."""
    batch = encode_prompts(processor, [[im] for im in images[:2]], ["describe", "write the report"])
    model.eval()
    with torch.no_grad():
        return model(**batch).logits[batch["attention_mask"].bool()]


def _greedy(model, processor, images) -> list[str]:
    batch = encode_prompts(processor, [[im] for im in images], ["describe"] * len(images))
    model.eval()
    with torch.no_grad():
        seqs = model.generate(**batch, max_new_tokens=10, do_sample=False, temperature=None, top_p=None,
                              top_k=None, pad_token_id=processor.tokenizer.pad_token_id)
    return processor.tokenizer.batch_decode(seqs[:, batch["input_ids"].shape[1]:])


@pytest.fixture
def base_dir(tiny_model, tiny_processor, tmp_path):
    return save_base(tiny_model, tiny_processor, tmp_path / "base")


@pytest.fixture
def sft_model(tiny_model, base_dir):
    del base_dir  # saved first: add_lora changes tiny_model in place
    model = add_lora(tiny_model, **LORA)
    set_trainable(model, "sft")
    _perturb(model)
    return model


def _fresh_base(base_dir):
    from transformers import Qwen2_5_VLForConditionalGeneration

    return Qwen2_5_VLForConditionalGeneration.from_pretrained(base_dir, dtype=torch.float32,
                                                              attn_implementation="eager")


def test_peft_keys_round_trip():
    lora = "model.language_model.layers.0.self_attn.q_proj.lora_A.default.weight"
    merger = "model.visual.merger.mlp.0.weight"
    assert to_peft_key(lora) == "base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_A.weight"
    assert to_peft_key(merger) == "base_model.model." + merger
    assert [from_peft_key(to_peft_key(k)) for k in (lora, merger)] == [lora, merger]
    with pytest.raises(ValueError, match="not a peft adapter key"):
        from_peft_key(lora)


def test_token_row_keys_round_trip():
    delta = "model.language_model.embed_tokens.token_adapter.trainable_tokens_delta.default"
    key = "base_model.model.model.language_model.embed_tokens.token_adapter.trainable_tokens_delta"
    assert to_peft_key(delta) == key  # peft's own key (get_peft_model_state_dict drops the adapter name)
    assert from_peft_key(key) == delta


def test_default_adapter_layout_is_lora_and_merger_only(sft_model, base_dir, tmp_path):
    """A run without model.train_format_tokens writes the adapter it wrote before that option (issue 24)."""
    out = save_stage_model(sft_model, tmp_path / "sft", base_dir, "sft", lora=LORA, settings=SETTINGS)
    keys = set(load_file(str(out / ADAPTER_WEIGHTS)))
    assert all(".lora_A." in k or ".lora_B." in k or from_peft_key(k).startswith(MERGER) for k in keys)
    config = json.loads((out / ADAPTER_CONFIG).read_text())
    assert config["trainable_token_indices"] is None and config["modules_to_save"] == ["visual.merger"]
    assert read_spec(out)["lora"] == LORA


def test_tag_token_rows_are_saved_in_the_peft_adapter(tiny_model, tiny_processor, xray_images, base_dir, tmp_path):
    """model.train_format_tokens (issue 24): the token rows go into the standard adapter folder (peft's
    trainable_token_indices), and PeftModel.from_pretrained and load_stage_model both give the stage's model."""
    from peft import PeftModel

    from harness.prompting.output_format import format_token_ids

    ids = format_token_ids(tiny_processor.tokenizer)
    lora = {**LORA, "token_indices": ids}
    model = add_lora(tiny_model, **lora)
    set_trainable(model, "sft")
    _perturb(model)
    out = save_stage_model(model, tmp_path / "sft", base_dir, "sft", lora=lora, settings=SETTINGS)
    config = json.loads((out / ADAPTER_CONFIG).read_text())
    assert config["trainable_token_indices"] == ids
    state = load_file(str(out / ADAPTER_WEIGHTS))
    delta = "base_model.model.model.language_model.embed_tokens.token_adapter.trainable_tokens_delta"
    assert state[delta].shape == (len(ids), model.config.text_config.hidden_size)
    assert read_spec(out)["lora"] == lora
    expected = _logits(model, tiny_processor, xray_images)
    peft_model = PeftModel.from_pretrained(_fresh_base(base_dir), str(out))
    torch.testing.assert_close(_logits(peft_model, tiny_processor, xray_images), expected, rtol=0, atol=1e-5)
    loaded, _, _ = load_stage_model(out)
    torch.testing.assert_close(_logits(loaded, tiny_processor, xray_images), expected, rtol=0, atol=0)
    # The rows matter: the same LoRA and merger without them give other logits.
    without_rows = add_lora(_fresh_base(base_dir), **LORA)
    apply_tensors(without_rows, {k: v for k, v in trainable_state(model).items() if "trainable_tokens" not in k},
                  source="test")
    assert not torch.allclose(_logits(without_rows, tiny_processor, xray_images), expected, atol=1e-4)
    # `regbench export` merges the rows into the plain embedding (tied lm_head included).
    from transformers import Qwen2_5_VLForConditionalGeneration

    exported = Qwen2_5_VLForConditionalGeneration.from_pretrained(export_merged(out, tmp_path / "export"))
    torch.testing.assert_close(_logits(exported, tiny_processor, xray_images), expected, rtol=0, atol=1e-4)


def test_adapter_saved_by_a_stage_loads_with_peft_and_gives_equal_logits(sft_model, tiny_processor, xray_images,
                                                                        base_dir, tmp_path):
    from peft import PeftModel

    out = save_stage_model(sft_model, tmp_path / "sft", base_dir, "sft", lora=LORA, settings=SETTINGS)
    assert (out / ADAPTER_CONFIG).is_file() and (out / ADAPTER_WEIGHTS).is_file()
    assert not (out / MERGER_WEIGHTS).exists() and not (out / LEGACY_WEIGHTS).exists()
    expected = _logits(sft_model, tiny_processor, xray_images)
    bare = _logits(_fresh_base(base_dir), tiny_processor, xray_images)
    loaded = PeftModel.from_pretrained(_fresh_base(base_dir), str(out))
    got = _logits(loaded, tiny_processor, xray_images)
    assert not torch.allclose(bare, expected, atol=1e-3)  # the adapter and merger matter
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    # Every saved tensor went into the peft model (none silently skipped), and the merger is in it.
    state = load_file(str(out / ADAPTER_WEIGHTS))
    assert any(from_peft_key(k).startswith(MERGER) for k in state)
    assert len(state) == len(trainable_state(sft_model))
    config = json.loads((out / ADAPTER_CONFIG).read_text())
    assert (config["r"], config["lora_alpha"], config["peft_type"]) == (4, 8, "LORA")
    assert config["base_model_name_or_path"] == str(base_dir)


def test_warmup_writes_the_merger_under_hugging_face_names(tiny_model, tiny_processor, xray_images, base_dir,
                                                            tmp_path):
    set_trainable(tiny_model, "warmup")
    _perturb(tiny_model)
    out = save_stage_model(tiny_model, tmp_path / "warm", base_dir, "warmup", settings=SETTINGS)
    assert not (out / ADAPTER_WEIGHTS).exists()
    fresh = _fresh_base(base_dir)
    result = fresh.load_state_dict(load_file(str(out / MERGER_WEIGHTS)), strict=False)
    assert not result.unexpected_keys
    torch.testing.assert_close(_logits(fresh, tiny_processor, xray_images),
                               _logits(tiny_model, tiny_processor, xray_images), rtol=0, atol=0)


def test_stage_reload_is_exact_and_the_spec_records_the_model(sft_model, base_dir, tmp_path):
    settings = {**SETTINGS, "base_id": "Qwen/Qwen2.5-VL-7B-Instruct"}
    save_stage_model(sft_model, tmp_path / "sft", base_dir, "sft", lora=LORA, extra={"classifier_dir": "c"},
                     settings=settings)
    spec = read_spec(tmp_path / "sft")
    assert spec["base"] == str(base_dir.resolve()) and spec["base_id"] == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert (spec["image_size"], spec["dtype"], spec["preset"], spec["lora"]) == (56, "float32", "tiny", LORA)
    loaded, processor, _ = load_stage_model(tmp_path / "sft")
    assert pixel_limits(processor) == (56 * 56, 56 * 56)
    a, b = trainable_state(sft_model), trainable_state(loaded)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_format_1_checkpoints_still_load(sft_model, base_dir, tmp_path):
    out = tmp_path / "old"
    out.mkdir()
    save_file(trainable_state(sft_model), str(out / LEGACY_WEIGHTS))
    (out / "spec.json").write_text(json.dumps({"base": str(base_dir), "stage": "sft", "lora": LORA}))
    loaded, _, _ = load_stage_model(out, "float32", 56, "eager")
    a, b = trainable_state(sft_model), trainable_state(loaded)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_moved_base_is_found_through_model_path(sft_model, base_dir, tmp_path):
    save_stage_model(sft_model, tmp_path / "sft", base_dir, "sft", lora=LORA, settings=SETTINGS)
    moved = base_dir.rename(tmp_path / "elsewhere")
    with pytest.raises(FileNotFoundError, match="model.path"):
        load_stage_model(tmp_path / "sft")
    loaded, _, _ = load_stage_model(tmp_path / "sft", base_path=moved)
    assert has_equal_state(sft_model, loaded)


def has_equal_state(a, b) -> bool:
    sa, sb = trainable_state(a), trainable_state(b)
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_export_writes_a_merged_transformers_folder_that_generates_the_same_text(
        sft_model, tiny_processor, xray_images, base_dir, tmp_path):
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    save_stage_model(sft_model, tmp_path / "sft", base_dir, "sft", lora=LORA, settings=SETTINGS)
    out = export_merged(tmp_path / "sft", tmp_path / "export")
    names = set()
    for f in out.glob("*.safetensors"):
        names |= set(load_file(str(f)))
    assert names and not any("lora_" in n or "base_model" in n or "modules_to_save" in n for n in names)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(out)
    processor = AutoProcessor.from_pretrained(out)
    processor.tokenizer.padding_side = "left"
    assert model.dtype == torch.float32
    torch.testing.assert_close(_logits(model, processor, xray_images),
                               _logits(sft_model, tiny_processor, xray_images), rtol=0, atol=1e-4)
    # Greedy text (special tokens kept: the untrained tiny model emits some).
    theirs, ours = _greedy(model, processor, xray_images), _greedy(sft_model, tiny_processor, xray_images)
    assert theirs == ours and all(len(t) > 0 for t in theirs)
    with pytest.raises(ValueError, match="checkpoint folder itself"):
        export_merged(tmp_path / "sft", tmp_path / "sft")


def test_checkpoint_settings_replace_only_the_preset_defaults(tmp_path):
    (tmp_path / "spec.json").write_text(json.dumps({"base": "x", "stage": "sft", "image_size": 336,
                                                    "dtype": "bfloat16", "attn_implementation": "sdpa"}))
    cfg = load_config(None, [])
    adopt_checkpoint_settings(cfg.model, tmp_path)
    assert (cfg.model.image_size, cfg.model.dtype, cfg.model.attn_implementation) == (336, "bfloat16", "sdpa")
    cfg = load_config(None, ["model.image_size=84", "model.attn_implementation=eager"])
    adopt_checkpoint_settings(cfg.model, tmp_path)
    assert (cfg.model.image_size, cfg.model.dtype, cfg.model.attn_implementation) == (84, "bfloat16", "eager")
    cfg = load_config(None, [])
    adopt_checkpoint_settings(cfg.model, tmp_path / "not_a_checkpoint")
    assert cfg.model.image_size == 112


def test_model_settings_record_the_hub_id():
    cfg = load_config(None, ["model.preset=qwen2.5-vl-7b", "model.path=/data/qwen7b"])
    s = model_settings(cfg.model)
    assert s == {"preset": "qwen2.5-vl-7b", "base_id": "Qwen/Qwen2.5-VL-7B-Instruct", "image_size": 336,
                 "dtype": "bfloat16", "attn_implementation": "sdpa"}
    assert model_settings(load_config(None, ["model.preset=qwen2.5-vl-3b", "model.path=org/my-qwen"]).model)[
        "base_id"] == "org/my-qwen"
    assert model_settings(load_config(None, []).model)["base_id"] is None


def test_export_command(tiny_model, base_dir, tmp_path, capsys):
    from harness.cli import main

    set_trainable(tiny_model, "warmup")
    _perturb(tiny_model)
    save_stage_model(tiny_model, tmp_path / "warm", base_dir, "warmup", settings=SETTINGS)
    assert main(["export", str(tmp_path / "warm"), str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "config.json").is_file() and "exported" in capsys.readouterr().out
    merged = dict(_fresh_base(tmp_path / "out").named_parameters())
    saved = load_file(str(tmp_path / "warm" / MERGER_WEIGHTS))
    assert saved and all(torch.equal(merged[k], v) for k, v in saved.items())
    assert main(["export", str(tmp_path / "nothing"), str(tmp_path / "out2")]) == 2
    assert "spec.json missing" in capsys.readouterr().err
