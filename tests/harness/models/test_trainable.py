"""Which parameters each stage trains, checked by running real optimizer steps on the tiny model."""

from __future__ import annotations

import pytest
import torch

from harness.models.checkpoint import load_stage_model, save_stage_model
from harness.models.tiny import save_base
from harness.models.trainable import MERGER, add_lora, set_trainable, unwrap
from harness.prompting.batching import encode_sft
from harness.stages.lm_loss import lm_loss


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


def _format_config(on: bool):
    from harness.config import RunConfig

    cfg = RunConfig()
    cfg.model.lora_r, cfg.model.lora_alpha, cfg.model.lora_dropout = 4, 8, 0.0
    cfg.prompt.output_format = "think_report" if on else "plain"
    cfg.model.train_format_tokens = on
    return cfg


def _tag_steps(model, processor, images, n=3):
    """SFT steps on think_report targets (issue 24): the tags' tokens are in every target."""
    from harness.prompting.output_format import training_target

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-2)
    targets = [training_target(r, torch.zeros(14).numpy(), "think_report")
               for r in ("the heart size is normal .", "mild cardiomegaly .")]
    batch = encode_sft(processor, [[im] for im in images[:2]], ["a", "b"], targets, 40)
    for _ in range(n):
        loss, _ = lm_loss(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_think_report_sft_trains_the_tag_token_rows_in_and_out(tiny_model, tiny_processor, xray_images):
    """model.train_format_tokens: peft's trainable_token_indices over the tags' tokens; their input rows and the
    tied output rows move, every other row of the embedding and lm_head stays as it was."""
    from harness.models.trainable import TOKEN_DELTA, lora_settings
    from harness.prompting.output_format import format_token_ids

    tok = tiny_processor.tokenizer
    ids = format_token_ids(tok)
    settings = lora_settings(_format_config(True).model, tok)
    assert settings["token_indices"] == ids
    model = add_lora(tiny_model, **settings)
    names = set_trainable(model, "sft")
    assert [n for n in names if TOKEN_DELTA in n] == [
        "model.language_model.embed_tokens.token_adapter.trainable_tokens_delta.default"]
    every = torch.arange(len(tok))
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    with torch.no_grad():
        e0, h0 = emb(every).clone(), head(torch.eye(emb(every).shape[1])).clone()  # rows of W_out, as columns
    _tag_steps(model, tiny_processor, xray_images)
    with torch.no_grad():
        e1, h1 = emb(every), head(torch.eye(e0.shape[1]))
    moved_in = {i for i in range(len(tok)) if not torch.equal(e0[i], e1[i])}
    moved_out = {i for i in range(len(tok)) if not torch.equal(h0[:, i], h1[:, i])}
    assert moved_in == set(ids) and moved_out == set(ids)


def test_default_lora_has_no_token_rows(tiny_model, tiny_processor):
    """A plain run's LoRA is what it was before the option: r, alpha, dropout only; no peft token wrapper."""
    from harness.models.trainable import TOKEN_DELTA, lora_settings

    settings = lora_settings(_format_config(False).model, tiny_processor.tokenizer)
    assert settings == {"r": 4, "alpha": 8, "dropout": 0.0}
    model = add_lora(tiny_model, **settings)
    names = set_trainable(model, "sft")
    assert not any(TOKEN_DELTA in n for n in names)
    assert type(model.get_input_embeddings()) is torch.nn.Embedding
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    with pytest.raises(ValueError, match="tokenizer"):
        lora_settings(_format_config(True).model)
