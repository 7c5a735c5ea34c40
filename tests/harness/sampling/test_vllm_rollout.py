"""generation.backend=vllm on a CPU machine: never imported, a clear error, and the weights it would send.

The engine itself needs a GPU and vllm (benchmarks/device_rollout_check.py); these tests cover what runs here.
"""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch

from harness.batching import encode_prompts
from harness.config import load_config
from harness.models.tiny import build_tiny_model
from harness.models.trainable import add_lora, set_trainable, unwrap
from harness.sampling.decoding import decode_tokens
from harness.sampling.vllm_rollout import merged_weights


def test_vllm_is_never_imported_by_the_cpu_paths(tmp_path):
    """Importing the harness and decoding with lean, even with backend=vllm configured, imports no vllm."""
    code = ("import sys, harness.sampling.decoding, harness.grpo.rollout, harness.sampling.vllm_rollout\n"
            "import harness.stages.rl\n"
            "from harness.config import load_config\n"
            "assert load_config(None, ['generation.backend=vllm']).generation.backend == 'vllm'\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'vllm'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_backend_vllm_on_cpu_is_a_clear_error(tiny_tokenizer, tiny_processor, xray_images):
    assert load_config(None, ["generation.backend=vllm"]).generation.backend == "vllm"
    model = build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=1, vision_hidden=16,
                             vision_depth=1, image_size=56)
    batch = encode_prompts(tiny_processor, [[xray_images[0]]], ["describe"])
    with pytest.raises(ValueError, match="generation.backend=vllm needs a CUDA GPU .* generation.backend=lean"):
        decode_tokens(model, batch, backend="vllm", max_new_tokens=3, min_new_tokens=0, repetition_penalty=1.0,
                      do_sample=False, temperature=1.0, top_p=1.0, top_k=0, suppress_tokens=[], pad_token_id=0,
                      eos_token_id=1, prompts=(tiny_processor, [[xray_images[0]]], ["describe"]))


def test_merged_weights_equal_peft_merge(tiny_tokenizer):
    """The weights sent to the engine: peft's merge of every LoRA layer (W + scale B A) and the trained merger,
    under the names of the plain model's state dict; a forward pass of the plain model loaded with them equals
    the LoRA model's."""
    base = build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=2, vision_hidden=16,
                            vision_depth=1, image_size=56)
    model = add_lora(copy.deepcopy(base), r=4, alpha=8, dropout=0.0)
    set_trainable(model, "rl")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:  # LoRA B != 0 and a changed merger, as after RL steps
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    sent = dict(merged_weights(model))
    plain_names = set(base.state_dict())
    assert set(sent) <= plain_names
    assert any(".merger." in n for n in sent) and any("q_proj.weight" in n for n in sent)
    merged = copy.deepcopy(model)
    for mod in unwrap(merged).modules():
        if hasattr(mod, "merge") and hasattr(mod, "lora_A"):
            mod.merge()
    want = {k.replace(".base_layer", ""): v for k, v in unwrap(merged).state_dict().items() if "lora_" not in k}
    for name, t in sent.items():
        assert torch.allclose(t, want[name], rtol=0, atol=1e-6), name
    ids = torch.randint(5, 200, (2, 7), generator=gen)
    with torch.no_grad():
        before = base(input_ids=ids).logits
        untouched = {n: p for n, p in base.state_dict().items() if n not in sent}
        base.load_state_dict({**untouched, **sent})
        a = base(input_ids=ids).logits
        b = model.eval()(input_ids=ids).logits
    assert torch.allclose(a, b, atol=1e-5) and not torch.allclose(a, before, atol=1e-3)


def test_merged_weights_carry_trained_token_rows(tiny_tokenizer):
    """With the tags' token rows trained (model.train_format_tokens, issue 24) the engine gets the embedding with
    those rows replaced under its plain name (the tied lm_head follows it), never peft's delta parameter."""
    from harness.output_format import format_token_ids

    base = build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=1, vision_hidden=16,
                            vision_depth=1, image_size=56)
    ids = format_token_ids(tiny_tokenizer)
    model = add_lora(copy.deepcopy(base), r=4, alpha=8, dropout=0.0, token_indices=ids)
    set_trainable(model, "rl")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    sent = dict(merged_weights(model))
    assert set(sent) <= set(base.state_dict()) and "model.language_model.embed_tokens.weight" in sent
    ids_in = torch.tensor([ids + [5, 6, 7]])
    with torch.no_grad():
        base.load_state_dict({**base.state_dict(), **sent})
        torch.testing.assert_close(base(input_ids=ids_in).logits, model.eval()(input_ids=ids_in).logits,
                                   rtol=0, atol=1e-5)
