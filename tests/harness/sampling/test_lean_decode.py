"""The lean decoding loop (harness/sampling/lean_decode.py) returns exactly the tokens of transformers' `generate`.

Same model, same processor inputs, same generator state: the sequences must be equal element for element, for
greedy and sampled decoding over several sampling settings, with left-padded prompts (instructions of different
lengths), LoRA adapters that change the logits, eager and sdpa attention, a bf16 base under autocast, and a
batch where some rows end early. For the early ends, the end token is one that sampling produces mid-report in
some rows and not in others (the tiny random model seldom writes <|im_end|>); the test checks that rows did end
early, so the row-dropping path is exercised.
"""

from __future__ import annotations

import pytest
import torch

from harness.config import ConfigError, load_config
from harness.grpo.rollout import sample_rollout
from harness.models.precision import autocast_for
from harness.models.tiny import build_tiny_model
from harness.models.trainable import add_lora, set_trainable, unwrap
from harness.prompting.batching import END, encode_prompts, suppressed_token_ids
from harness.sampling import lean_decode
from harness.sampling.decoding import decode_tokens, generate_reports
from harness.sampling.lean_decode import lean_generate

INSTRUCTIONS = ["describe", "write the findings section of the chest x-ray report please", "x", "findings ."]
# (do_sample, temperature, top_p, top_k, repetition_penalty, min_new_tokens): the second and third are the
# presets' test decoding and RL sampling (experiments/), with fewer tokens.
SETTINGS = [
    (False, 1.0, 1.0, 0, 1.0, 0),
    (False, 1.0, 1.0, 0, 1.05, 3),
    (True, 0.7, 0.9, 0, 1.03, 2),
    (True, 1.3, 1.0, 5, 1.0, 0),
    (True, 1.0, 0.6, 0, 1.2, 0),
    (True, 0.55, 0.95, 20, 1.05, 4),
]


def _lora_model(tokenizer, attn: str = "eager", dtype=torch.float32):
    model = build_tiny_model(tokenizer, seed=0, text_hidden=32, text_layers=2, vision_hidden=16, vision_depth=1,
                             image_size=56)
    model.set_attn_implementation(attn)
    model = add_lora(model.to(dtype), r=4, alpha=8, dropout=0.1)
    set_trainable(model, "rl")
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # nonzero B, so the adapters change the logits (as after RL steps)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model.eval()


def _both(model, batch, tok, setting, seed, eos, max_new=14, drop_finished=None):
    do_sample, temperature, top_p, top_k, rep, min_new = setting
    common = dict(max_new_tokens=max_new, min_new_tokens=min_new, repetition_penalty=rep, do_sample=do_sample,
                  temperature=temperature, top_p=top_p, top_k=top_k, suppress_tokens=suppressed_token_ids(tok),
                  pad_token_id=tok.pad_token_id, eos_token_id=eos)
    with torch.no_grad(), autocast_for(model):
        torch.manual_seed(seed)
        ref = decode_tokens(model, batch, backend="hf", **common)
        after_hf = torch.rand(3, device=ref.device)
        torch.manual_seed(seed)
        common.pop("do_sample")
        lean = lean_generate(model, batch, do_sample=do_sample, drop_finished=drop_finished, **common)
        after_lean = torch.rand(3, device=ref.device)
    return ref, lean, after_hf, after_lean


def _mid_report_token(model, batch, tok, setting, seed) -> int:
    """A token that (with <|im_end|> as the end) appears mid-report in some rows but not in all: as the end
    token, it ends those rows early."""
    ref, _, _, _ = _both(model, batch, tok, setting, seed, tok.convert_tokens_to_ids(END))
    new = ref[:, batch["input_ids"].shape[1]:]
    best, best_score = None, -1
    for t in new[:, 1:-2].unique().tolist():
        rows = (new[:, 1:-2] == t).any(dim=1)
        score = int(rows.sum())
        if 0 < score < new.shape[0] and score > best_score:
            best, best_score = t, score
    assert best is not None, "no token to end rows early with"
    return best


@pytest.mark.parametrize("seed,setting", list(enumerate(SETTINGS)), ids=[f"s{i}" for i in range(len(SETTINGS))])
def test_lean_equals_generate_with_rows_ending_early(lora_model, batch, tiny_tokenizer, setting, seed):
    tok = tiny_tokenizer
    P = batch["input_ids"].shape[1]
    eos = _mid_report_token(lora_model, batch, tok, setting, seed)
    ref, lean, after_hf, after_lean = _both(lora_model, batch, tok, setting, seed, eos)
    assert lean.shape == ref.shape and torch.equal(lean, ref)
    assert torch.equal(after_lean, after_hf)  # the generator was consumed identically
    new = ref[:, P:]
    ended = (new == eos).any(dim=1)
    assert 0 < int(ended.sum()) < new.shape[0]  # some rows ended early, some did not
    assert (new == tok.pad_token_id).any()  # ...and were padded after their end token


@pytest.mark.parametrize("setting", [SETTINGS[0], SETTINGS[2]], ids=["greedy", "rl"])
def test_lean_without_dropping_rows_equals_generate(lora_model, batch, tiny_tokenizer, setting):
    eos = _mid_report_token(lora_model, batch, tiny_tokenizer, setting, 3)
    ref, lean, _, _ = _both(lora_model, batch, tiny_tokenizer, setting, 3, eos, drop_finished=False)
    assert torch.equal(lean, ref)


def test_lean_equals_generate_with_trained_tag_token_rows(batch, tiny_tokenizer):
    """think_report runs with model.train_format_tokens (issue 24): peft wraps the embedding and the tied lm_head;
    the lean loop goes through the wrappers as generate does."""
    from harness.prompting.output_format import format_token_ids

    model = build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=2, vision_hidden=16,
                             vision_depth=1, image_size=56)
    model = add_lora(model, r=4, alpha=8, dropout=0.1, token_indices=format_token_ids(tiny_tokenizer))
    set_trainable(model, "rl")
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # the rows (and LoRA B) moved, as after SFT: the tags' tokens become likely
        for name, p in model.named_parameters():
            if "lora_B" in name or "trainable_tokens" in name:
                p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    model.eval()
    eos = tiny_tokenizer.convert_tokens_to_ids(END)
    for seed, setting in ((0, SETTINGS[0]), (2, SETTINGS[2])):
        ref, lean, after_hf, after_lean = _both(model, batch, tiny_tokenizer, setting, seed, eos)
        assert torch.equal(lean, ref) and torch.equal(after_lean, after_hf)


def test_all_rows_ending_stops_the_loop_like_generate(lora_model, batch, tiny_tokenizer):
    """When every row has ended, both stop: the output is shorter than max_new_tokens."""
    setting = SETTINGS[3]
    eos = _mid_report_token(lora_model, batch, tiny_tokenizer, setting, 5)
    ref, lean, _, _ = _both(lora_model, batch, tiny_tokenizer, setting, 5, eos, max_new=60)
    assert torch.equal(lean, ref)
    assert ref.shape[1] < batch["input_ids"].shape[1] + 60


@pytest.mark.parametrize("attn,dtype,settings", [("sdpa", torch.float32, (0, 2)), ("eager", torch.bfloat16, (2,)),
                                                 ("sdpa", torch.bfloat16, (2,))])
def test_lean_equals_generate_for_sdpa_and_a_bf16_base(tiny_tokenizer, batch, attn, dtype, settings):
    """The real presets: sdpa attention, a bf16 base with fp32 LoRA under autocast."""
    model = _lora_model(tiny_tokenizer, attn, dtype)
    for setting in (SETTINGS[i] for i in settings):
        eos = _mid_report_token(model, batch, tiny_tokenizer, setting, 2)
        ref, lean, _, _ = _both(model, batch, tiny_tokenizer, setting, 2, eos)
        assert torch.equal(lean, ref), (attn, dtype, setting)


def test_sdpa_without_padding(tiny_tokenizer, tiny_processor, xray_images):
    """Prompts of one length: generate lets SDPA run unmasked (no mask tensor); so must the lean loop."""
    model = _lora_model(tiny_tokenizer, "sdpa")
    b = encode_prompts(tiny_processor, [[im] for im in xray_images], ["describe"] * 4)
    assert bool(b["attention_mask"].all())
    ref, lean, _, _ = _both(model, b, tiny_tokenizer, SETTINGS[2], 4, tiny_tokenizer.convert_tokens_to_ids(END))
    assert torch.equal(lean, ref)


def test_rollout_is_the_same_with_either_backend(lora_model, tiny_processor, tiny_tokenizer, xray_images):
    """sample_rollout: sequences, masks and texts equal (the RL presets' sampling settings)."""
    kw = dict(group_size=3, temperature=0.7, top_p=0.9, top_k=0, max_new_tokens=10, min_new_tokens=2,
              repetition_penalty=1.03)
    out = {}
    for backend in ("hf", "lean"):
        torch.manual_seed(7)
        out[backend] = sample_rollout(lora_model, tiny_processor, [[im] for im in xray_images[:3]],
                                      INSTRUCTIONS[:3], backend=backend, **kw)
    a, b = out["hf"], out["lean"]
    assert torch.equal(a.sequences, b.sequences) and torch.equal(a.response_mask, b.response_mask)
    assert torch.equal(a.prompt_mask, b.prompt_mask) and a.texts == b.texts
    assert len(set(a.texts)) > 1


@pytest.mark.parametrize("do_sample,n", [(False, 1), (True, 2)])
def test_reports_are_the_same_with_either_backend(lora_model, tiny_processor, xray_images, do_sample, n):
    kw = dict(max_new_tokens=9, min_new_tokens=1, repetition_penalty=1.1, batch_size=3, do_sample=do_sample,
              temperature=0.8, top_p=0.9, num_return_sequences=n, progress=False)
    images, instr = [[im] for im in xray_images], INSTRUCTIONS
    torch.manual_seed(3)
    ref = generate_reports(lora_model, tiny_processor, images, instr, backend="hf", **kw)
    torch.manual_seed(3)
    lean = generate_reports(lora_model, tiny_processor, images, instr, backend="lean", **kw)
    assert lean == ref and len(ref) == 4 * n


def test_unknown_backend_and_unsupported_settings_are_named(lora_model, batch, tiny_tokenizer):
    with pytest.raises(ConfigError, match="generation.backend"):
        load_config(None, ["generation.backend=fast"])
    assert load_config(None, ["generation.backend=lean"]).generation.backend == "lean"
    kw = dict(max_new_tokens=3, min_new_tokens=0, repetition_penalty=1.0, do_sample=False, temperature=1.0,
              top_p=1.0, top_k=0, suppress_tokens=[], pad_token_id=0, eos_token_id=1)
    with pytest.raises(ValueError, match="generation.backend = 'fast'"):
        decode_tokens(lora_model, batch, backend="fast", **kw)
    lora_model.generation_config.no_repeat_ngram_size = 2
    try:
        with pytest.raises(ValueError, match="no_repeat_ngram_size = 2"):
            decode_tokens(lora_model, batch, backend="lean", **kw)
    finally:
        lora_model.generation_config.no_repeat_ngram_size = 0
    with pytest.raises(ValueError, match="max_new_tokens = 0"):
        lean_generate(lora_model, batch, **{**kw, "max_new_tokens": 0})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (the prepared device check)")
@pytest.mark.parametrize("drop", [None, True], ids=["rows-kept", "rows-dropped"])
def test_lean_equals_generate_on_cuda(tiny_tokenizer, batch, drop):
    """The real presets' setting on a GPU: sdpa, bf16 base, greedy and the RL sampling."""
    model = _lora_model(tiny_tokenizer, "sdpa", torch.bfloat16).cuda()
    cuda_batch = {k: v.cuda() for k, v in batch.items()}
    for seed, setting in ((0, SETTINGS[1]), (1, SETTINGS[2])):
        eos = _mid_report_token(model, cuda_batch, tiny_tokenizer, setting, seed)
        ref, lean, after_hf, after_lean = _both(model, cuda_batch, tiny_tokenizer, setting, seed, eos,
                                                drop_finished=drop)
        assert torch.equal(lean, ref) and torch.equal(after_lean, after_hf), setting


@pytest.fixture(scope="module")
def grouped_batch(tiny_processor, xray_images):
    """Group-major rows as in rollouts (each prompt G = 3 times in a row), prompts of different lengths."""
    return encode_prompts(tiny_processor, [[xray_images[i]] for i in range(4) for _ in range(3)],
                          [INSTRUCTIONS[i] for i in range(4) for _ in range(3)])


@pytest.mark.parametrize("seed,setting", [(0, SETTINGS[1]), (1, SETTINGS[2]), (2, SETTINGS[5])],
                         ids=["greedy-rep", "rl", "topk-topp"])
def test_lean_encodes_each_image_once_and_equals_generate(lora_model, grouped_batch, tiny_tokenizer, seed, setting):
    """Repeated prompts: the lean prefill runs the vision encoder on the distinct images only, and the tokens
    (rows ending early included) are generate's."""
    hf = unwrap(lora_model)
    patches = []
    hook = hf.model.visual.register_forward_hook(lambda m, a, o: patches.append(a[0].shape[0]))
    try:
        eos = _mid_report_token(lora_model, grouped_batch, tiny_tokenizer, setting, seed)
        patches.clear()
        ref, lean, after_hf, after_lean = _both(lora_model, grouped_batch, tiny_tokenizer, setting, seed, eos)
    finally:
        hook.remove()
    n = grouped_batch["pixel_values"].shape[0]
    assert patches == [n, n // 3]  # generate: every image; lean: each distinct image once
    assert torch.equal(lean, ref) and torch.equal(after_lean, after_hf)
    new = ref[:, grouped_batch["input_ids"].shape[1]:]
    assert 0 < int((new == eos).any(dim=1).sum()) < new.shape[0]


def test_generic_prefill_path_equals_generate(lora_model, grouped_batch, tiny_tokenizer, monkeypatch):
    """Batches the lean prefill does not handle get generate's own first step; the tokens are the same."""
    monkeypatch.setattr(lean_decode, "prefill", lambda *a, **k: pytest.fail("lean prefill used"))
    monkeypatch.setattr(lean_decode, "prefill_supported", lambda hf, b: False)
    eos = _mid_report_token(lora_model, grouped_batch, tiny_tokenizer, SETTINGS[2], 4)
    ref, lean, _, _ = _both(lora_model, grouped_batch, tiny_tokenizer, SETTINGS[2], 4, eos)
    assert torch.equal(lean, ref)
