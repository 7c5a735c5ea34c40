"""LoRA layers as one product with W + s B A (harness/models/merged_lora.py; rl.lora_pass = merged).

Not bit-identical, so the checks are to float rounding: the merged weight is peft's merge; under `merged_lora` the
model's logits, and the gradients of every LoRA A and B through a loss on them, equal peft's own computation; a
GRPO step with lora_pass merged gives the peft step's log-probs, loss and updated parameters; every layer's own
forward comes back on exit (also after an error, and an instance-level forward set by a hook); a layer whose
dropout is active keeps peft's computation; a bf16 base is refused; and the config refuses merged passes with
rl.policy_dropout.
"""

from __future__ import annotations

import pytest
import torch

from harness.config import ConfigError, load_config
from harness.models.merged_lora import merged_lora, merged_weight
from harness.models.trainable import unwrap
from harness.prompting.batching import encode_prompts
from tests.harness.sampling.test_lean_decode import INSTRUCTIONS, _lora_model


def _lora_layers(model):
    from peft.tuners.lora import Linear as LoraLinear

    return [m for m in model.modules() if isinstance(m, LoraLinear)]


@pytest.fixture
def model(tiny_tokenizer):
    return _lora_model(tiny_tokenizer)


@pytest.fixture(scope="module")
def inputs(tiny_processor, xray_images):
    return encode_prompts(tiny_processor, [[im] for im in xray_images], INSTRUCTIONS)


def _logits_and_grads(model, inputs):
    model.zero_grad()
    out = model(**inputs, use_cache=False).logits
    # A loss that weighs every logit differently, so that no gradient entry is trivially zero.
    torch.log_softmax(out, -1)[..., :7].mul(torch.linspace(0.3, 1.7, 7)).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if "lora_" in n}
    return out.detach(), grads


def test_merged_weight_names_the_caller_when_it_cannot_merge():
    with pytest.raises(ValueError, match="rl.lora_pass=merged: cannot merge Conv2d"):
        merged_weight(torch.nn.Conv2d(2, 2, 1), who="rl.lora_pass=merged")


def test_logits_and_lora_gradients_equal_peft_to_rounding(model, inputs):
    assert len(_lora_layers(model)) >= 10  # text and vision linears
    ref_out, ref_grads = _logits_and_grads(model, inputs)
    with merged_lora(model):
        out, grads = _logits_and_grads(model, inputs)
    assert not torch.equal(out, ref_out)  # another computation, not peft's path run again
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
    assert set(grads) == set(ref_grads) and len(grads) >= 20
    for name, g in grads.items():
        # Relative to the largest entry: the two sum in another order, so small entries differ in more digits.
        scale = float(ref_grads[name].abs().max())
        assert scale > 0, name
        assert float((g - ref_grads[name]).abs().max()) <= 1e-5 * scale, name


def test_each_layer_gets_its_own_forward_back(model, inputs):
    layers = _lora_layers(model)
    hooked = layers[0]
    own = hooked.forward
    hooked.forward = own  # an instance-level forward, as accelerate's hooks set
    with pytest.raises(RuntimeError, match="inside"):
        with merged_lora(model):
            assert all("forward" in m.__dict__ for m in layers)
            assert hooked.forward is not own
            raise RuntimeError("inside")
    assert hooked.__dict__["forward"] is own
    assert all("forward" not in m.__dict__ for m in layers[1:])


def test_a_layer_with_active_dropout_keeps_peft(model):
    unwrap(model).train()  # LoRA dropout 0.1 now active
    layers = _lora_layers(model)
    with merged_lora(model):
        assert all("forward" not in m.__dict__ for m in layers)
    model.eval()
    with merged_lora(model):
        assert all("forward" in m.__dict__ for m in layers)


def test_a_low_precision_base_is_refused_and_nothing_is_patched(tiny_tokenizer):
    model = _lora_model(tiny_tokenizer, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="rl.lora_pass=merged: float32 weights only.*torch.bfloat16"):
        with merged_lora(model):
            pass
    assert all("forward" not in m.__dict__ for m in _lora_layers(model))


def test_config_refuses_merged_passes_with_policy_dropout():
    with pytest.raises(ConfigError, match="rl.lora_pass.*policy_dropout"):
        load_config(None, ["rl.lora_pass=merged", "rl.policy_dropout=true"])
    with pytest.raises(ConfigError, match="rl.lora_pass.*must be peft or merged"):
        load_config(None, ["rl.lora_pass=fused"])
    assert load_config(None, ["rl.lora_pass=merged"]).rl.lora_pass == "merged"
