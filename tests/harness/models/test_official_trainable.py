"""Issue 42: the official trainable sets as options (model.warmup_trainable, model.lora_patch_embed), on the tiny
Qwen2.5-VL whose module names are those of the real one.

Official facts (LiGuo12/REVA_PO): stage 1 sets requires_grad on parameters whose name contains 'visual.merger.mlp'
(reva_po/models/reva.py REVA_stage1); stages 2-3 wrap the model with peft's LoraConfig(target_modules=[qkv, proj,
gate_proj, up_proj, down_proj, q_proj, v_proj, k_proj, o_proj]) (train_configs/stage2/*.yaml, stage3/*.yaml) and
train every 'visual.merger' parameter."""

from __future__ import annotations

import json

import pytest
import torch

from harness.models.checkpoint import load_stage_model, save_stage_model
from harness.models.patch_embed import use_patch_embed
from harness.models.tiny import build_tiny_model, save_base
from harness.models.trainable import add_lora, lora_settings, set_trainable
from tests.harness.models.test_trainable import _snapshot, _steps

OFFICIAL_TARGETS = ["qkv", "proj", "gate_proj", "up_proj", "down_proj", "q_proj", "v_proj", "k_proj", "o_proj"]
PATCH = "model.visual.patch_embed.proj"


def _model(tokenizer):
    return build_tiny_model(tokenizer, seed=0, text_hidden=32, text_layers=1, vision_hidden=16, image_size=56)


def test_warmup_merger_mlp_trains_exactly_the_official_stage1_set(tiny_tokenizer, tiny_processor, xray_images):
    model = _model(tiny_tokenizer)
    official = sorted(n for n, _ in model.named_parameters() if "visual.merger.mlp" in n)
    names = set_trainable(model, "warmup", "merger_mlp")
    assert sorted(names) == official == ["model.visual.merger.mlp.0.bias", "model.visual.merger.mlp.0.weight",
                                         "model.visual.merger.mlp.2.bias", "model.visual.merger.mlp.2.weight"]
    assert not any(p.requires_grad for n, p in model.named_parameters() if "ln_q" in n)
    before = _snapshot(model)
    _steps(model, tiny_processor, xray_images)
    after = _snapshot(model)
    assert {n for n in before if not torch.equal(before[n], after[n])} == set(official)
    # the default is the whole merger (ln_q included), as before
    assert "model.visual.merger.ln_q.weight" in set_trainable(model, "warmup")
    with pytest.raises(ValueError, match="warmup_trainable"):
        set_trainable(model, "warmup", "mlp")


def test_lora_patch_embed_gives_the_official_lora_set(tiny_tokenizer):
    """The LoRA layers and trainable names equal those peft makes from the official target list on the same model:
    the patch embedding's Conv3d is the only module the official list adds to the linear targets."""
    from peft import LoraConfig, inject_adapter_in_model

    official_model = inject_adapter_in_model(
        LoraConfig(r=4, lora_alpha=4, lora_dropout=0.0, target_modules=OFFICIAL_TARGETS), _model(tiny_tokenizer))
    official = sorted(n for n, _ in official_model.named_parameters() if "lora_" in n)
    for n, p in official_model.named_parameters():  # the official stage-2/3 trainable set: LoRA + the merger
        p.requires_grad_("lora_" in n or "visual.merger" in n)
    official_trainable = sorted(n for n, p in official_model.named_parameters() if p.requires_grad)

    ours = add_lora(_model(tiny_tokenizer), r=4, alpha=4, dropout=0.0, patch_embed=True)
    lora = sorted(n for n, _ in ours.named_parameters() if "lora_" in n)
    assert lora == official
    assert sorted(set_trainable(ours, "sft")) == official_trainable
    assert type(ours.get_submodule(PATCH)).__name__ == "Conv3d"  # peft's LoRA Conv3d
    plain = add_lora(_model(tiny_tokenizer), r=4, alpha=4, dropout=0.0)
    extra = set(lora) - {n for n, _ in plain.named_parameters() if "lora_" in n}
    assert extra == {f"{PATCH}.lora_A.default.weight", f"{PATCH}.lora_B.default.weight"}


@pytest.mark.parametrize("kind", ["conv", "matmul"])
def test_patch_embed_lora_acts_in_either_patch_embedding(tiny_tokenizer, kind):
    """pretrain.patch_embed=matmul (the tiny presets' base) computes the Conv3d as a matrix product: with LoRA on it,
    the embedding must still add the adapter (peft's forward), equal to the Conv3d path."""
    torch.manual_seed(0)
    model = _model(tiny_tokenizer)
    use_patch_embed(model, kind)
    module = model.model.visual.patch_embed
    x = torch.randn(8, module.proj.weight[0].numel())
    before = module(x)
    add_lora(model, r=4, alpha=4, dropout=0.0, patch_embed=True)
    with torch.no_grad():
        module.proj.lora_B["default"].weight.normal_()
    after = module(x)
    assert not torch.allclose(before, after)
    use_patch_embed(model, "conv")  # transformers' own forward with peft's LoRA Conv3d
    assert torch.allclose(after, module(x), atol=1e-5)


def test_patch_embed_lora_adapter_round_trips(tmp_path, tiny_tokenizer, tiny_processor, xray_images):
    """The stage model (a peft adapter with a LoRA Conv3d) loads back exactly, through regbench and through
    peft's own PeftModel.from_pretrained."""
    from peft import PeftModel

    from harness.config import RunConfig

    cfg = RunConfig()
    cfg.model.lora_r, cfg.model.lora_alpha, cfg.model.lora_dropout, cfg.model.lora_patch_embed = 4, 8, 0.0, True
    lora = lora_settings(cfg.model)
    assert lora == {"r": 4, "alpha": 8, "dropout": 0.0, "patch_embed": True}
    cfg.model.lora_patch_embed = False
    assert "patch_embed" not in lora_settings(cfg.model)  # a default config's settings (and spec.json) as before
    base = save_base(_model(tiny_tokenizer), tiny_processor, tmp_path / "base")
    model = add_lora(_model(tiny_tokenizer), **lora)
    set_trainable(model, "sft")
    _steps(model, tiny_processor, xray_images, n=3)
    trained = _snapshot(model)
    assert not torch.equal(trained[f"{PATCH}.lora_B.default.weight"], torch.zeros_like(
        trained[f"{PATCH}.lora_B.default.weight"]))  # the adapter on the Conv3d trained
    save_stage_model(model, tmp_path / "stage", base, "sft", lora=lora)
    config = json.loads((tmp_path / "stage" / "adapter_config.json").read_text())
    assert "patch_embed" in config["target_modules"]
    loaded, _, spec = load_stage_model(tmp_path / "stage", image_size=56)
    assert spec["lora"] == lora
    again = _snapshot(loaded)
    assert again.keys() == trained.keys() and all(torch.equal(again[k], trained[k]) for k in trained)
    peft_model = PeftModel.from_pretrained(_model(tiny_tokenizer), str(tmp_path / "stage"))
    theirs = dict(peft_model.named_parameters())
    for suffix in ("lora_A.default.weight", "lora_B.default.weight"):
        assert torch.equal(theirs[f"base_model.model.{PATCH}.{suffix}"], trained[f"{PATCH}.{suffix}"])


def test_new_trainable_values_are_refused_with_their_key():
    from harness.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="'model.warmup_trainable' = 'mlp'"):
        load_config(None, ["model.warmup_trainable=mlp"])
    with pytest.raises(ConfigError, match="'model.lora_patch_embed'"):
        load_config(None, ["model.lora_patch_embed=maybe"])


def test_vllm_weights_carry_the_patch_embed_lora(tiny_tokenizer):
    """generation.backend=vllm sends merged weights: the patch embedding's LoRA Conv3d must arrive merged (W + its
    delta, peft's merge), not be dropped."""
    from harness.sampling.vllm_rollout import merged_weights

    model = add_lora(_model(tiny_tokenizer), r=4, alpha=8, dropout=0.0, patch_embed=True)
    set_trainable(model, "rl")
    with torch.no_grad():
        model.get_submodule(PATCH).lora_B["default"].weight.normal_()
    sent = dict(merged_weights(model))
    layer = model.get_submodule(PATCH)
    layer.merge()
    assert f"{PATCH}.weight" in sent
    assert torch.allclose(sent[f"{PATCH}.weight"], layer.get_base_layer().weight, atol=1e-6)
    assert not any("lora_" in n for n in sent)
