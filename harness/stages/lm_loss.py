"""Eq. 1, the LM loss of stage 0, warm-up and SFT: the mean negative log-likelihood of the report tokens."""

from __future__ import annotations

import torch

from harness.models.logit_positions import last_positions
from harness.models.precision import autocast_for
from harness.policy.logprobs import token_logprobs
from harness.prompting.batching import IGNORE, model_inputs
from harness.sampling.lean_forward import sequence_logits


def _scored_tail(batch: dict) -> tuple[torch.Tensor, torch.Tensor, int, int, int]:
    """(shifted labels, their mask, the count of labelled tokens, the first scored position, logits to keep)."""
    labels = batch["labels"][:, 1:]
    mask = labels != IGNORE
    n = int(mask.sum())
    if n == 0:
        raise ValueError("lm_loss: the batch has no labelled token (every label is IGNORE)")
    first = int(mask.any(dim=0).nonzero()[0])  # first shifted position any row scores
    keep = labels.shape[1] - first + 1  # logits of positions first..L-1; the last one predicts nothing
    return labels, mask, n, first, keep


def _nll(logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, first: int, n: int) -> torch.Tensor:
    labels, mask = labels[:, first:], mask[:, first:]
    logp = token_logprobs(logits[:, :-1], labels.masked_fill(~mask, 0))
    return -(logp * mask).sum() / n


def lm_loss(model, batch: dict) -> tuple[torch.Tensor, int]:
    """Eq. 1: mean negative log-likelihood over report tokens (token-mean over the batch), and their count.

    Only the positions that predict a labelled token get logits: the tail from the first labelled position on (the
    report is the tail of every row, batching's left padding), and the log-softmax is upcast to fp32 a chunk of
    positions at a time (harness/policy/logprobs.py). A full `[B, L, V]` fp32 copy would cost 134 MB per 220-token
    sample at Qwen2.5's 151,936-token vocabulary, most of it on image and prompt positions that no label scores
    (benchmarks/RESULTS.md, issue 14).

    The forward is `sequence_logits` without image deduplication (harness/sampling/lean_forward.py): the logits and
    gradients of `model(input_ids, attention_mask, pixel_values, image_grid_thw)` bit for bit, dropout masks
    included, with the M-RoPE positions batched and the 4-D mask built directly (issue 27; transformers' per-row
    position loop and vmapped mask cost ~3% of a training step of the tiny preset: benchmarks/bench_lm_loss.py).
    """
    labels, mask, n, first, keep = _scored_tail(batch)
    with autocast_for(model):
        logits = sequence_logits(model, batch["input_ids"], batch["attention_mask"], batch["pixel_values"],
                                 batch["image_grid_thw"], logits_to_keep=keep, dedupe_images=False)
    return _nll(logits, labels, mask, first, n), n


def plain_call_lm_loss(model, batch: dict) -> tuple[torch.Tensor, int]:
    """`lm_loss` through transformers' own forward call, as it was computed before issue 27: the oracle that
    `lm_loss` equals bit for bit (tests/harness/stages/test_lm_loss.py, benchmarks/bench_lm_loss.py)."""
    labels, mask, n, first, keep = _scored_tail(batch)
    with autocast_for(model):
        out = model(**model_inputs(batch), use_cache=False,
                    logits_to_keep=last_positions(keep, labels.shape[1] + 1, labels.device))
    return _nll(out.logits, labels, mask, first, n), n
