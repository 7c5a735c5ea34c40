"""Which parameters each stage trains, checked by running real optimizer steps on the tiny model."""

from __future__ import annotations

import pytest
import torch

from harness.batching import encode_sft, lm_loss
from harness.models.checkpoint import load_stage_model, save_stage_model
from harness.models.tiny import save_base
from harness.models.trainable import MERGER, add_lora, set_trainable, unwrap


def _steps(model, processor, images, n=2):
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-2)
    batch = encode_sft(processor, [[im] for im in images[:2]], ["a", "b"],
                       ["the heart size is normal .", "mild cardiomegaly ."], 20)
    for _ in range(n):
        loss, _ = lm_loss(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()


def _snapshot(model):
    return {n: p.detach().clone() for n, p in unwrap(model).named_parameters()}


def test_warmup_changes_only_the_merger(tiny_model, tiny_processor, xray_images):
    names = set_trainable(tiny_model, "warmup")
    assert names and all(n.startswith(MERGER) for n in names)
    before = _snapshot(tiny_model)
    _steps(tiny_model, tiny_processor, xray_images)
    after = _snapshot(tiny_model)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed == set(names)


def test_sft_trains_merger_and_lora_on_vision_and_llm_linears(tiny_model, tiny_processor, xray_images):
    with pytest.raises(ValueError, match="add_lora"):
        set_trainable(tiny_model, "sft")
    model = add_lora(tiny_model, r=4, alpha=4, dropout=0.0)
    names = set_trainable(model, "sft")
    lora = [n for n in names if "lora_" in n]
    assert any(n.startswith("model.visual.blocks.") for n in lora)
    assert any(n.startswith("model.language_model.layers.") for n in lora)
    assert not any("lm_head" in n or "merger" in n for n in lora)
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "attn.qkv",
                 "attn.proj"):
        assert any(proj in n for n in lora), proj
    before = _snapshot(model)
    _steps(model, tiny_processor, xray_images, n=3)
    after = _snapshot(model)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    frozen_changed = changed - set(names)
    assert not frozen_changed
    assert any(n.startswith(MERGER) for n in changed)
    assert any("lora_B" in n for n in changed)


def test_stage_checkpoint_round_trip(tmp_path, tiny_model, tiny_processor, xray_images):
    base = save_base(tiny_model, tiny_processor, tmp_path / "base")
    model = add_lora(tiny_model, r=4, alpha=8, dropout=0.0)
    set_trainable(model, "sft")
    _steps(model, tiny_processor, xray_images)
    save_stage_model(model, tmp_path / "stage", base, "sft", lora={"r": 4, "alpha": 8, "dropout": 0.0},
                     extra={"classifier_dir": "x"})
    loaded, proc, spec = load_stage_model(tmp_path / "stage", image_size=56)
    assert spec["stage"] == "sft" and spec["classifier_dir"] == "x"
    a, b = _snapshot(model), _snapshot(loaded)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_pretrain_trains_everything(tiny_model):
    names = set_trainable(tiny_model, "pretrain")
    assert len(names) == len(list(tiny_model.parameters()))
    with pytest.raises(ValueError, match="unknown stage"):
        set_trainable(tiny_model, "nope")
