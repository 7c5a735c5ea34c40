"""Mixed precision (harness/models/precision.py): a bf16 base trains fp32 master weights under autocast.

The real presets load Qwen2.5-VL in bf16. These tests build the tiny model in bf16 and check that what trains is
fp32, that small updates survive (in bf16 they would round away), that RL steps and decoding run under autocast,
and that a stage model reloads its fp32 tensors exactly.
"""

from __future__ import annotations

import torch

from harness.config import RLConfig, TrainConfig
from harness.grpo.trainer import GRPOTrainer, PromptSet
from harness.models.checkpoint import load_stage_model, save_stage_model
from harness.models.precision import autocast_for, base_dtype
from harness.models.tiny import build_tiny_model, save_base
from harness.models.trainable import MERGER, add_lora, set_trainable, trainable_state, unwrap
from harness.runs.records import RunDir
from harness.sampling.decoding import generate_reports
from harness.stages.lm_train import LMData, train_lm

REPORTS = ["the heart size is normal .", "mild cardiomegaly .", "the lungs are clear .",
           "small left pleural effusion ."]


def _bf16_model(tokenizer):
    model = build_tiny_model(tokenizer, seed=0, text_hidden=32, text_layers=1, vision_hidden=16, image_size=56)
    return model.to(torch.bfloat16)


def test_what_trains_is_fp32_and_the_base_stays_bf16(tiny_tokenizer):
    model = add_lora(_bf16_model(tiny_tokenizer), r=4, alpha=8, dropout=0.0)
    names = set(set_trainable(model, "sft"))
    for name, p in unwrap(model).named_parameters():
        assert p.dtype == (torch.float32 if name in names else torch.bfloat16), name
    assert any(n.startswith(MERGER) for n in names) and any("lora_" in n for n in names)
    assert base_dtype(model) == torch.bfloat16


def test_small_updates_survive_on_a_bf16_base(tiny_tokenizer, tiny_processor, xray_images, tmp_path):
    model = _bf16_model(tiny_tokenizer)
    set_trainable(model, "warmup")
    before = {n: p.detach().clone() for n, p in unwrap(model).named_parameters() if n.startswith(MERGER)}
    data = LMData([[im] for im in xray_images[:4]], ["write"] * 4, REPORTS)
    cfg = TrainConfig(epochs=1, batch_size=2, lr=1e-5, scheduler="constant", max_steps=2, weight_decay=0.0)
    metrics = train_lm(model, tiny_processor, data, None, cfg, RunDir(tmp_path), seed=0, max_report_tokens=10,
                       progress=False)
    assert torch.isfinite(torch.tensor(metrics["train_loss"]))
    moved, lost_in_bf16 = 0, 0
    for name, p in unwrap(model).named_parameters():
        if name in before:
            assert p.dtype == torch.float32
            changed = p.detach() != before[name]
            moved += int(changed.sum())
            # The same values rounded to bf16: most of these updates would have vanished there.
            lost_in_bf16 += int((changed & (p.detach().bfloat16() == before[name].bfloat16())).sum())
    assert moved > 0 and lost_in_bf16 > moved // 2


def test_rl_steps_and_decoding_run_on_a_bf16_base(tiny_tokenizer, tiny_processor, xray_images, tmp_path):
    model = add_lora(_bf16_model(tiny_tokenizer), r=4, alpha=8, dropout=0.0)
    set_trainable(model, "rl")
    prompts = PromptSet([f"s{i}" for i in range(4)], [[im] for im in xray_images[:4]], ["write"] * 4, REPORTS)
    rl = RLConfig(group_size=2, prompts_per_step=2, max_new_tokens=6, min_new_tokens=2, reward="bleu4",
                  regularizer="rer", reference="static")
    trainer = GRPOTrainer(model, tiny_processor, rl, TrainConfig(epochs=1, lr=1e-4, scheduler="constant"),
                          RunDir(tmp_path / "rl"), prompts, None, seed=0, progress=False)
    assert trainer.train()["steps"] == 2
    steps = trainer.run.steps()
    assert all(torch.isfinite(torch.tensor(s["loss"])) for s in steps) and steps[0]["ref_entropy_mean"] > 0
    assert trainer.store.num_bytes() == 4 * sum(p.numel() for p in trainer.params) * len(trainer.store.names())
    texts = generate_reports(model, tiny_processor, prompts.images, prompts.instructions, max_new_tokens=5,
                             progress=False)
    assert len(texts) == 4
    with autocast_for(model):
        assert torch.is_autocast_enabled("cpu")


def test_a_stage_checkpoint_reloads_its_fp32_tensors_exactly(tiny_tokenizer, tiny_processor, tmp_path):
    model = add_lora(_bf16_model(tiny_tokenizer), r=4, alpha=8, dropout=0.0)
    set_trainable(model, "sft")
    with torch.no_grad():
        for p in unwrap(model).parameters():
            if p.requires_grad:
                p.add_(1e-4 * torch.randn_like(p))  # values that bf16 cannot hold
    save_base(_bf16_model(tiny_tokenizer), tiny_processor, tmp_path / "base")
    save_stage_model(model, tmp_path / "sft", tmp_path / "base", "sft", lora={"r": 4, "alpha": 8, "dropout": 0.0})
    loaded, _, _ = load_stage_model(tmp_path / "sft", dtype="bfloat16")
    saved, again = trainable_state(model), trainable_state(loaded)
    assert saved.keys() == again.keys()
    assert all(again[k].dtype == torch.float32 and torch.equal(again[k], saved[k]) for k in saved)
