"""Rollouts: G sampled candidates per prompt from the old policy, and the logits path shared by the old,
reference and current policies (so their log-probs differ only by the parameters swapped in).

Rows are group-major: row b*G + g is candidate g of prompt b.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from harness.batching import END, encode_repeated, suppressed_token_ids
from harness.decoding import decode_tokens
from harness.lean_forward import sequence_logits
from harness.models.precision import autocast_for


@dataclass
class Rollout:
    sequences: torch.Tensor  # [N, P + L] prompt (left-padded) + response (right-padded)
    prompt_mask: torch.Tensor  # [N, P]
    response_mask: torch.Tensor  # [N, L] 1 on response tokens up to and including <|im_end|>
    pixel_values: torch.Tensor
    image_grid_thw: torch.Tensor
    texts: list[str]  # N decoded responses, special tokens stripped

    @property
    def prompt_len(self) -> int:
        return self.prompt_mask.shape[1]

    @property
    def responses(self) -> torch.Tensor:
        return self.sequences[:, self.prompt_len:]

    @property
    def lengths(self) -> torch.Tensor:
        return self.response_mask.sum(dim=1)


def response_mask_from(tokens: torch.Tensor, eos_id: int) -> torch.Tensor:
    """1 on every token up to and including the first end token of each row (all tokens if none)."""
    is_eos = (tokens == eos_id).long()
    seen_before = (torch.cumsum(is_eos, dim=1) - is_eos) > 0
    return (~seen_before).long()


@torch.no_grad()
def sample_rollout(model, processor, images: Sequence[Sequence], instructions: Sequence[str], *, group_size: int,
                   temperature: float, top_p: float, top_k: int, max_new_tokens: int, min_new_tokens: int,
                   repetition_penalty: float, backend: str = "hf") -> Rollout:
    """Sample `group_size` candidates per prompt with whatever parameters are live in `model` (`backend`:
    generation.backend, harness/decoding.py)."""
    tok = processor.tokenizer
    batch = encode_repeated(processor, images, instructions, group_size)
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in batch.items()}
    eos = tok.convert_tokens_to_ids(END)
    was = model.training
    model.eval()
    with autocast_for(model):
        seqs = decode_tokens(
            model, batch, backend=backend, do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k,
            max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens, repetition_penalty=repetition_penalty,
            suppress_tokens=suppressed_token_ids(tok), pad_token_id=tok.pad_token_id, eos_token_id=eos,
            prompts=(processor, images, instructions),
        )
    model.train(was)
    P = batch["input_ids"].shape[1]
    resp = seqs[:, P:]
    mask = response_mask_from(resp, eos)
    texts = [t.strip() for t in tok.batch_decode(resp * mask + tok.pad_token_id * (1 - mask),
                                                 skip_special_tokens=True)]
    return Rollout(seqs, batch["attention_mask"], mask, batch["pixel_values"], batch["image_grid_thw"], texts)


def response_logits(model, ro: Rollout) -> torch.Tensor:
    """Logits [N, L, V] that predict the response tokens, computed only for the response positions."""
    L = ro.response_mask.shape[1]
    attn = torch.cat([ro.prompt_mask, ro.response_mask.to(ro.prompt_mask.dtype)], dim=1)
    with autocast_for(model):  # model(input_ids=..., pixel_values=...).logits, bit for bit (harness/lean_forward.py)
        logits = sequence_logits(model, ro.sequences, attn, ro.pixel_values, ro.image_grid_thw, logits_to_keep=L + 1)
    return logits[:, :-1]
