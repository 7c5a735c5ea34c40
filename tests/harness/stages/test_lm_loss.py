"""Eq. 1 (harness/stages/lm_loss.py): the loss on the scored tail equals full-logit cross-entropy, only the tail
gets logits, an unlabelled batch is named, and the lean forward gives the plain model call's loss and every
gradient bit for bit (train mode, dropout active, several views per study)."""

from __future__ import annotations

import pytest
import torch

from harness.models.trainable import add_lora, set_trainable
from harness.prompting.batching import IGNORE, encode_sft, model_inputs
from harness.stages.lm_loss import lm_loss, plain_call_lm_loss


def _full_logits_loss(model, batch):
    """Eq. 1 as main computed it before issue 14: fp32 logits at every position, then cross-entropy."""
    logits = model(**model_inputs(batch), use_cache=False).logits[:, :-1].float()
    labels = batch["labels"][:, 1:]
    mask = labels != IGNORE
    return torch.nn.functional.cross_entropy(logits[mask], labels[mask], reduction="mean")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lm_loss_on_the_scored_tail_equals_full_logit_cross_entropy(tiny_model, tiny_processor, xray_images, dtype):
    model = tiny_model.to(dtype)
    # Reports of different lengths: the shorter row has IGNORE labels inside the kept tail.
    batch = encode_sft(tiny_processor, [[xray_images[0]], [xray_images[1]], [xray_images[2]]],
                       ["a", "b", "a longer instruction"],
                       ["mild cardiomegaly .", "the heart size is normal . no pleural effusion .", "normal ."], 50)
    loss, n = lm_loss(model, batch)
    assert n == int((batch["labels"] != IGNORE).sum())
    (g_new,) = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad][:1])
    ref = _full_logits_loss(model, batch)
    (g_ref,) = torch.autograd.grad(ref, [p for p in model.parameters() if p.requires_grad][:1])
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(loss, ref.to(loss.dtype), rtol=tol, atol=tol)
    torch.testing.assert_close(g_new, g_ref, rtol=tol, atol=tol)
    assert float(loss.detach()) > 0


def test_lm_loss_keeps_only_the_tail_logits(tiny_model, tiny_processor, xray_images, monkeypatch):
    batch = encode_sft(tiny_processor, [[xray_images[0]], [xray_images[1]]], ["a", "b"],
                       ["mild cardiomegaly .", "the heart size is normal ."], 50)
    seen = {}
    forward = type(tiny_model).forward

    def spy(self, *args, **kwargs):
        seen["keep"] = kwargs.get("logits_to_keep")
        out = forward(self, *args, **kwargs)
        seen["positions"] = out.logits.shape[1]
        return out

    monkeypatch.setattr(type(tiny_model), "forward", spy)
    lm_loss(tiny_model, batch)
    longest = int((batch["labels"] != IGNORE).sum(dim=1).max())
    assert seen["positions"] == longest + 1 < batch["input_ids"].shape[1]


def test_lm_loss_without_labels_names_the_problem(tiny_model, tiny_processor, xray_images):
    batch = encode_sft(tiny_processor, [[xray_images[0]]], ["a"], ["normal ."], 50)
    batch["labels"][:] = IGNORE
    with pytest.raises(ValueError, match="no labelled token"):
        lm_loss(tiny_model, batch)


@pytest.mark.parametrize("stage", ["pretrain", "sft"])
def test_lm_loss_and_gradients_equal_the_plain_model_call_bit_for_bit(stage, tiny_model, tiny_processor, xray_images):
    model = tiny_model
    if stage == "sft":
        torch.manual_seed(0)
        model = add_lora(model, r=4, alpha=8, dropout=0.3)  # dropout active in train mode: the masks must match
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.3)
    set_trainable(model, stage)
    model.train()
    batch = encode_sft(tiny_processor, [[xray_images[0], xray_images[1]], [xray_images[2]], [xray_images[3]]],
                       ["a", "b", "a longer instruction"],
                       ["mild cardiomegaly .", "the heart size is normal . no pleural effusion .", "normal ."], 50)
    params = [p for p in model.parameters() if p.requires_grad]
    results = []
    for fn in (plain_call_lm_loss, lm_loss):
        torch.manual_seed(7)
        loss, _ = fn(model, batch)
        results.append((loss.detach(), torch.autograd.grad(loss, params)))
    (plain, plain_grads), (lean, lean_grads) = results
    assert torch.equal(lean, plain)
    assert len(params) > 10 and all(torch.equal(a, b) for a, b in zip(lean_grads, plain_grads, strict=True))
