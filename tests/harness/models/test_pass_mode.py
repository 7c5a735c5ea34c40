"""harness/models/pass_mode.py: the RL pass with grad recomputes activations when gradient checkpointing is on,
with eval mode's values; without checkpointing it is plain eval mode, as before."""

from __future__ import annotations

import copy

import torch

from harness.models.pass_mode import checkpointing_enabled, set_grad_pass_mode
from harness.models.trainable import add_lora, set_trainable
from harness.prompting.batching import encode_sft
from harness.stages.lm_loss import lm_loss
from harness.stages.loading import enable_gradient_checkpointing


def _lora(tiny_model):
    model = add_lora(tiny_model, r=4, alpha=8, dropout=0.5)  # a large dropout: any active one shows in the loss
    set_trainable(model, "rl")
    return model


def _pass(model, batch) -> tuple[float, dict, int]:
    """Loss, gradients, and how often the first decoder layer went through transformers' checkpoint function in one
    forward + backward (it is called only when the layer checkpoints: `gradient_checkpointing and training`)."""
    layer = model.model.language_model.layers[0]
    calls = [0]
    original = getattr(layer, "_gradient_checkpointing_func", None)
    if original is not None:
        def spy(*args, **kwargs):
            calls[0] += 1
            return original(*args, **kwargs)

        layer._gradient_checkpointing_func = spy
    model.zero_grad(set_to_none=True)
    loss, _ = lm_loss(model, batch)
    loss.backward()
    if original is not None:
        layer._gradient_checkpointing_func = original
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss), grads, calls[0]


def test_checkpointed_grad_pass_recomputes_with_eval_mode_values(tiny_model, tiny_processor, xray_images):
    plain = _lora(tiny_model)
    ckpt = copy.deepcopy(plain)
    enable_gradient_checkpointing(ckpt)
    assert checkpointing_enabled(ckpt) and not checkpointing_enabled(plain)
    batch = encode_sft(tiny_processor, [[im] for im in xray_images[:2]], ["findings"] * 2,
                       ["no acute cardiopulmonary process .", "small left effusion ."], 32)
    set_grad_pass_mode(plain, dropout=False)
    assert not plain.training  # unchanged: eval mode without checkpointing
    loss_p, grads_p, runs_p = _pass(plain, batch)
    set_grad_pass_mode(ckpt, dropout=False)
    loss_c, grads_c, runs_c = _pass(ckpt, batch)
    assert (runs_p, runs_c) == (0, 1)  # the layer checkpoints (in eval mode it never did)
    assert loss_c == loss_p  # dropout (p = 0.5) off: eval mode's values
    assert grads_c.keys() == grads_p.keys()
    for name, g in grads_p.items():
        torch.testing.assert_close(grads_c[name], g, rtol=1e-5, atol=1e-7, msg=name)


def test_policy_dropout_keeps_train_mode(tiny_model):
    model = _lora(tiny_model)
    set_grad_pass_mode(model, dropout=True)
    assert model.training and all(m.training for m in model.modules())
