"""generation.backend = "fused" (harness/sampling/fused_step.py): the same function as the lean loop, fewer ops.

It is not bit-identical, so the checks are: the merged LoRA weight equals peft's own merge; with sampling
replaced by argmax the fused steps pick exactly the lean loop's greedy tokens (left padding, LoRA adapters that
change the logits, rows ending early, the repetition penalty and min_new_tokens on); the inverse-CDF draw follows
its probabilities (chi-square) and never returns a zero-probability token; and sampled tokens follow the lean
loop's distribution on many draws (chi-square homogeneity at steps 2-4, where the fused step's logits are used),
while the same test rejects a planted difference (temperature 0.7 against 0.85) at every step.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chi2_contingency, chisquare

from harness.config import ConfigError, load_config
from harness.models.merged_lora import merged_weight
from harness.models.trainable import unwrap
from harness.prompting.batching import END, encode_prompts, suppressed_token_ids
from harness.sampling import lean_decode
from harness.sampling.decoding import decode_tokens
from harness.sampling.fused_step import FusedDecodeStep, rotate_sign
from harness.sampling.lean_decode import inverse_cdf_sample, lean_generate
from tests.harness.sampling.test_lean_decode import INSTRUCTIONS, _lora_model


def _settings(tok, eos, **over):
    s = dict(max_new_tokens=14, min_new_tokens=3, repetition_penalty=1.05, temperature=0.7, top_p=0.9, top_k=0,
             suppress_tokens=suppressed_token_ids(tok), pad_token_id=tok.pad_token_id, eos_token_id=eos)
    s.update(over)
    return s


def test_merged_weight_is_peft_merge(lora_model):
    layer = unwrap(lora_model).model.language_model.layers[0].self_attn.q_proj
    w, b = merged_weight(layer)
    name = layer.active_adapters[0]
    expected = layer.get_base_layer().weight + layer.get_delta_weight(name)
    assert torch.allclose(w, expected, atol=1e-7, rtol=0)
    assert b is layer.get_base_layer().bias
    x = torch.randn(5, w.shape[1])
    assert torch.allclose(torch.nn.functional.linear(x, w, b), layer(x), atol=1e-5, rtol=1e-5)


def test_rotate_sign_turns_roll_into_rotate_half():
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import rotate_half

    x, sin = torch.randn(3, 2, 8), torch.randn(3, 1, 8)
    assert torch.equal(x.roll(4, -1) * rotate_sign(sin), rotate_half(x) * sin)


@pytest.mark.parametrize("drop", [True, False], ids=["rows-end-early", "no-end"])
def test_fused_steps_pick_the_lean_greedy_tokens(lora_model, batch, tiny_tokenizer, monkeypatch, drop):
    tok = tiny_tokenizer
    P = batch["input_ids"].shape[1]
    eos = tok.convert_tokens_to_ids(END)
    greedy = lean_generate(lora_model, batch, do_sample=False, **_settings(tok, eos))
    if drop:  # a token that greedy decoding writes mid-report in some rows becomes the end token
        new = greedy[:, P + 4:-2]
        eos = next(t for t in new.unique().tolist() if 0 < int((new == t).any(1).sum()) < new.shape[0])
        greedy = lean_generate(lora_model, batch, do_sample=False, **_settings(tok, eos))
        assert (greedy[:, P:] == tok.pad_token_id).any()  # some rows ended early
    monkeypatch.setattr(lean_decode, "inverse_cdf_sample", lambda probs: probs.argmax(dim=-1))
    fused = lean_generate(lora_model, batch, do_sample=True, fused=True, **_settings(tok, eos))
    assert torch.equal(fused, greedy)


def test_inverse_cdf_sample_follows_its_probabilities():
    probs = torch.tensor([[0.0, 0.5, 0.2, 0.0, 0.3], [0.1, 0.0, 0.0, 0.45, 0.45]]).repeat(4000, 1)
    torch.manual_seed(0)
    draws = inverse_cdf_sample(probs * 0.999).view(4000, 2)  # rows need not sum to 1
    for row in range(2):
        counts = np.bincount(draws[:, row].numpy(), minlength=5)
        support = probs[row].numpy() > 0
        assert counts[~support].sum() == 0
        assert chisquare(counts[support], probs[row].numpy()[support] * 4000).pvalue > 1e-3


def _token_table(a: torch.Tensor, b: torch.Tensor, min_expected: float = 5.0) -> np.ndarray:
    """2 x K counts of the tokens in a and b, tokens with fewer than min_expected per side merged into one."""
    ids, inv = torch.cat([a, b]).unique(return_inverse=True)
    table = np.zeros((2, len(ids)), dtype=np.int64)
    np.add.at(table[0], inv[:len(a)].numpy(), 1)
    np.add.at(table[1], inv[len(a):].numpy(), 1)
    rare = table.sum(0) < 2 * min_expected
    return np.concatenate([table[:, ~rare], table[:, rare].sum(1, keepdims=True)], axis=1)


def _draws(model, batch, tok, *, fused: bool, temperature: float, rounds: int, seed: int) -> torch.Tensor:
    """New tokens of `rounds` rollouts of the batch (every row a prompt repeated), one seed per round."""
    P = batch["input_ids"].shape[1]
    out = []
    for r in range(rounds):
        torch.manual_seed(seed + r)
        seq = lean_generate(model, batch, do_sample=True, fused=fused,
                            **_settings(tok, tok.convert_tokens_to_ids(END), max_new_tokens=4, min_new_tokens=4,
                                        temperature=temperature))
        out.append(seq[:, P:])
    return torch.cat(out)


@pytest.fixture(scope="module")
def peaked(tiny_tokenizer, tiny_processor, xray_images):
    """A LoRA model whose logits are peaked (final norm x 12), and 96 copies of one prompt: at each step about
    90 tokens get 5 or more of the 2 x 1,920 draws, so the draws resolve a temperature change of 0.15."""
    model = _lora_model(tiny_tokenizer)
    with torch.no_grad():
        unwrap(model).model.language_model.norm.weight.mul_(12.0)
    b = encode_prompts(tiny_processor, [[xray_images[0]]] * 96, [INSTRUCTIONS[1]] * 96)
    return model, b


@pytest.mark.parametrize("other_temperature,same", [(0.7, True), (0.85, False)], ids=["same", "planted"])
def test_fused_sampling_has_the_lean_distribution(peaked, tiny_tokenizer, other_temperature, same):
    model, b = peaked
    lean = _draws(model, b, tiny_tokenizer, fused=False, temperature=0.7, rounds=20, seed=0)
    fused = _draws(model, b, tiny_tokenizer, fused=True, temperature=other_temperature, rounds=20, seed=1000)
    # Steps 2-4 (columns 1-3): their logits come from the fused step. Each step is tested at alpha 1e-3; the
    # planted difference must be rejected at every step (measured: p 4e-5 to 3e-8), the same one at none.
    pvalues = [chi2_contingency(_token_table(lean[:, s], fused[:, s])).pvalue for s in (1, 2, 3)]
    if same:
        assert min(pvalues) > 1e-3, pvalues
    else:
        assert max(pvalues) < 1e-3, pvalues


def test_fused_refuses_what_it_does_not_handle(tiny_tokenizer, batch):
    tok = tiny_tokenizer
    model = _lora_model(tok, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="fused: float32 weights only"):
        FusedDecodeStep(unwrap(model))
    with pytest.raises(ValueError, match="greedy decoding uses the exact lean loop"):
        lean_generate(_lora_model(tok), batch, do_sample=False, fused=True, **_settings(tok, 5))


def test_greedy_decoding_under_fused_is_the_lean_loop(lora_model, batch, tiny_tokenizer):
    """Validation and test decode greedily: under backend "fused" they get lean's exact tokens."""
    tok = tiny_tokenizer
    s = _settings(tok, tok.convert_tokens_to_ids(END))
    kw = {k: s[k] for k in ("max_new_tokens", "min_new_tokens", "repetition_penalty", "temperature", "top_p",
                            "top_k", "suppress_tokens", "pad_token_id", "eos_token_id")}
    with torch.no_grad():
        assert torch.equal(decode_tokens(lora_model, batch, backend="fused", do_sample=False, **kw),
                           decode_tokens(lora_model, batch, backend="lean", do_sample=False, **kw))


def test_config_accepts_fused_and_names_bad_backends():
    assert load_config(None, ["generation.backend=fused"]).generation.backend == "fused"
    with pytest.raises(ConfigError, match="generation.backend"):
        load_config(None, ["generation.backend=fast"])
