"""Decoding a set of samples into report strings (greedy for evaluation, as the official code does)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tqdm.auto import tqdm

from harness.batching import encode_prompts, suppressed_token_ids
from harness.models.precision import autocast_for


def greedy_settings(generation) -> dict:
    """The decoding of every evaluation, validation included, from the generation config (greedy, as the
    official code): one place, so the RL stage picks "best" on exactly the decoding the test reports."""
    return {"max_new_tokens": generation.max_new_tokens, "min_new_tokens": generation.min_new_tokens,
            "repetition_penalty": generation.repetition_penalty, "batch_size": generation.batch_size}


@torch.no_grad()
def generate_reports(model, processor, images: Sequence[Sequence], instructions: Sequence[str], *,
                     max_new_tokens: int = 100, min_new_tokens: int = 0, repetition_penalty: float = 1.0,
                     batch_size: int = 32, do_sample: bool = False, temperature: float = 1.0, top_p: float = 1.0,
                     top_k: int = 0, num_return_sequences: int = 1, progress: bool = True,
                     desc: str = "decode") -> list[str]:
    """Reports for each prompt (num_return_sequences per prompt, grouped), special tokens stripped."""
    tok = processor.tokenizer
    was_training = model.training
    model.eval()
    out: list[str] = []
    idx = range(0, len(images), batch_size)
    for start in tqdm(idx, desc=desc, disable=not progress, leave=False):
        batch = encode_prompts(processor, images[start:start + batch_size],
                               instructions[start:start + batch_size])
        device = next(model.parameters()).device
        batch = {k: v.to(device) for k, v in batch.items()}
        kwargs = dict(max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens,
                      repetition_penalty=repetition_penalty, do_sample=do_sample,
                      suppress_tokens=suppressed_token_ids(tok), num_return_sequences=num_return_sequences,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"))
        if do_sample:
            kwargs.update(temperature=temperature, top_p=top_p, top_k=top_k if top_k > 0 else None)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        with autocast_for(model):
            seqs = model.generate(**batch, **kwargs)
        new = seqs[:, batch["input_ids"].shape[1]:]
        out.extend(t.strip() for t in tok.batch_decode(new, skip_special_tokens=True))
    model.train(was_training)
    return out
