"""Decoding a set of samples into report strings (greedy for evaluation, as the official code does)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from tqdm.auto import tqdm

from harness.models.precision import autocast_for
from harness.prompting.batching import encode_repeated, suppressed_token_ids
from harness.sampling.vllm_rollout import sleep_engines

# generation.backend: "hf" = transformers' `generate`; "lean" = harness/sampling/lean_decode.py (the same tokens);
# "fused" = the lean loop with harness/sampling/fused_step.py's decode step when sampling (fewer ops, float rounding
# differs; greedy decoding, i.e. validation and test, stays the exact lean loop); "vllm" =
# harness/sampling/vllm_rollout.py (GPUs; other tokens; a colocated engine the stage starts; not yet run on a GPU).
BACKENDS = ("hf", "lean", "fused", "vllm")
# Backends that decode repeated prompts (one row per candidate) instead of generate's num_return_sequences.
REPEATING = ("lean", "fused", "vllm")


def decode_tokens(model, batch: dict, *, backend: str = "hf", max_new_tokens: int, min_new_tokens: int,
                  repetition_penalty: float, do_sample: bool, temperature: float, top_p: float, top_k: int,
                  suppress_tokens: list[int], pad_token_id: int, eos_token_id: int,
                  num_return_sequences: int = 1, prompts: tuple | None = None,
                  image_keys: list | None = None, memo=None) -> torch.Tensor:
    """Prompt + new tokens [rows * num_return_sequences, P + L] for processor inputs `batch` (top_k 0 = off).
    `prompts` = (processor, images, instructions) that `batch` encodes (repeated rows in groups): vllm needs them.
    `image_keys`, `memo`: the lean prefill's vision features by image (harness/sampling/feature_memo.py); the
    other backends encode their images themselves and ignore them."""
    if backend == "hf":
        kwargs = dict(max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                      repetition_penalty=repetition_penalty, do_sample=do_sample, suppress_tokens=suppress_tokens,
                      num_return_sequences=num_return_sequences, pad_token_id=pad_token_id,
                      eos_token_id=eos_token_id)
        if do_sample:
            kwargs.update(temperature=temperature, top_p=top_p, top_k=top_k if top_k > 0 else None)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        return model.generate(**batch, **kwargs)
    if backend in ("lean", "fused"):
        # lazy: start-up cost (transformers)
        from harness.sampling.lean_decode import lean_generate

        if num_return_sequences != 1:
            raise ValueError(f"{backend} decoding takes num_return_sequences = 1; repeat the prompts before encoding")
        return lean_generate(model, batch, max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                             repetition_penalty=repetition_penalty, do_sample=do_sample, temperature=temperature,
                             top_p=top_p, top_k=top_k, suppress_tokens=suppress_tokens, pad_token_id=pad_token_id,
                             eos_token_id=eos_token_id, fused=backend == "fused" and do_sample,
                             image_keys=image_keys, memo=memo if image_keys is not None else None)
    if backend == "vllm":
        # lazy: tests replace require_vllm at its source, read at call time
        from harness.sampling.vllm_rollout import require_vllm, vllm_sequences

        require_vllm(batch["input_ids"].device)
        if prompts is None or num_return_sequences != 1:
            raise ValueError("generation.backend=vllm decodes from the prompts: pass prompts=(processor, images, "
                             "instructions) and repeat them before encoding")
        processor, images, instructions = prompts
        return vllm_sequences(model, processor, batch, images, instructions, pad_token_id=pad_token_id,
                              n=batch["input_ids"].shape[0] // len(instructions), do_sample=do_sample,
                              temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=max_new_tokens,
                              min_new_tokens=min_new_tokens, repetition_penalty=repetition_penalty,
                              suppress_tokens=suppress_tokens, eos_token_id=eos_token_id)
    raise ValueError(f"generation.backend = '{backend}' is not one of {', '.join(BACKENDS)}")


def greedy_settings(generation) -> dict:
    """The decoding of every evaluation, validation included, from the generation config (greedy, as the
    official code): one place, so the RL stage picks "best" on exactly the decoding the test reports."""
    return {"max_new_tokens": generation.max_new_tokens, "min_new_tokens": generation.min_new_tokens,
            "repetition_penalty": generation.repetition_penalty, "batch_size": generation.batch_size,
            "backend": generation.backend}


@torch.no_grad()
def generate_reports(model, processor, images: Sequence[Sequence], instructions: Sequence[str], *,
                     max_new_tokens: int = 100, min_new_tokens: int = 0, repetition_penalty: float = 1.0,
                     batch_size: int = 32, do_sample: bool = False, temperature: float = 1.0, top_p: float = 1.0,
                     top_k: int = 0, num_return_sequences: int = 1, progress: bool = True,
                     desc: str = "decode", backend: str = "hf",
                     before_batch: Callable[[int], None] | None = None) -> list[str]:
    """Reports for each prompt (num_return_sequences per prompt, grouped), special tokens stripped.
    `before_batch(n_done)` is called before each batch (a test evaluation's preemption check; it may raise)."""
    tok = processor.tokenizer
    was_training = model.training
    model.eval()
    out: list[str] = []
    # The lean loop decodes repeated prompts: the same processor inputs generate's own expansion builds.
    repeat = num_return_sequences if backend in REPEATING else 1
    idx = range(0, len(images), batch_size)
    for start in tqdm(idx, desc=desc, disable=not progress, leave=False):
        if before_batch is not None:
            before_batch(start)
        batch = encode_repeated(processor, images[start:start + batch_size], instructions[start:start + batch_size],
                                repeat)
        device = next(model.parameters()).device
        batch = {k: v.to(device) for k, v in batch.items()}
        with autocast_for(model):
            seqs = decode_tokens(model, batch, backend=backend, max_new_tokens=max_new_tokens,
                                 min_new_tokens=min_new_tokens, repetition_penalty=repetition_penalty,
                                 do_sample=do_sample, temperature=temperature, top_p=top_p, top_k=top_k,
                                 suppress_tokens=suppressed_token_ids(tok),
                                 num_return_sequences=num_return_sequences // repeat,
                                 prompts=(processor, images[start:start + batch_size],
                                          instructions[start:start + batch_size]),
                                 pad_token_id=tok.pad_token_id, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"))
        new = seqs[:, batch["input_ids"].shape[1]:]
        out.extend(t.strip() for t in tok.batch_decode(new, skip_special_tokens=True))
    if backend == "vllm":  # the engine's memory back to training (generation.vllm_sleep_level)
        sleep_engines()
    model.train(was_training)
    return out
