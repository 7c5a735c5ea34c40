"""Chunked per-token log-probs and entropies over the vocabulary (the inputs of REVA-PO Eq. 3 and Fig. 1).

Logits are upcast to fp32 a chunk of positions at a time, and the backward recomputes the softmax chunk by chunk,
so memory stays flat in the vocabulary size (151,936 for Qwen2.5).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

# Logit positions (over the N*T grid) upcast to fp32 at a time. None ("auto") sizes chunks so that one fp32
# chunk holds about CHUNK_BUDGET_BYTES: ~27 positions at Qwen2.5's 151,936-token vocabulary, thousands for
# the tiny preset's. Chunking by positions, not rows, keeps memory flat even for a handful of long rows.
DEFAULT_CHUNK_ROWS = None
CHUNK_BUDGET_BYTES = 16 * 2**20


def _check_logits(logits: torch.Tensor, temperature: float, chunk_size: int | None) -> int:
    """Positions per chunk (see DEFAULT_CHUNK_ROWS)."""
    if logits.dim() != 3:
        raise ValueError(f"logits must be [N, T, V], got shape {tuple(logits.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size is None:
        itemsize = 8 if logits.dtype == torch.float64 else 4
        return max(1, CHUNK_BUDGET_BYTES // (itemsize * max(1, logits.shape[-1])))
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 or None, got {chunk_size}")
    return chunk_size


def _blocks(n: int, t: int, chunk: int):
    """(row slice, position slice) blocks of at most `chunk` positions covering an [n, t] grid in order.

    Whole rows are grouped when a chunk holds at least one row; otherwise each row is cut into pieces. Slicing
    (never reshaping) keeps non-contiguous logits (e.g. logits[:, :-1]) uncopied.
    """
    if t == 0 or n == 0:
        return
    if chunk >= t:
        rows = chunk // t
        for r in range(0, n, rows):
            yield slice(r, r + rows), slice(0, t)
    else:
        for r in range(n):
            for s in range(0, t, chunk):
                yield slice(r, r + 1), slice(s, s + chunk)


def _compute_dtype(logits: torch.Tensor) -> torch.dtype:
    # bf16/fp16/fp32 logits are computed in fp32; fp64 stays fp64 (gradcheck, reference computations).
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


def _scaled_fp32(logits_chunk: torch.Tensor, temperature: float) -> torch.Tensor:
    # .to() returns the same tensor for fp32 input, so never modify the result in place.
    z = logits_chunk.to(_compute_dtype(logits_chunk))
    return z if temperature == 1.0 else z / temperature


class _TokenLogprob(torch.autograd.Function):
    """log softmax(logits / T)[token], computed and differentiated chunk by chunk.

    A plain ``log_softmax(logits.float())`` would make autograd keep every fp32 ``[rows, T, V]`` chunk for
    the backward pass; here the backward recomputes softmax per chunk from the saved (bf16/fp16) logits and
    the ``[N, T]`` log-normaliser, so no fp32 ``[N, T, V]`` tensor ever exists.
    """

    @staticmethod
    def forward(ctx, logits, tokens, temperature, chunk):
        n, t, _ = logits.shape
        out = torch.empty((n, t), dtype=_compute_dtype(logits), device=logits.device)
        lse = torch.empty((n, t), dtype=_compute_dtype(logits), device=logits.device)
        for r, c in _blocks(n, t, chunk):
            z = _scaled_fp32(logits[r, c], temperature)
            lse_c = torch.logsumexp(z, dim=-1)
            out[r, c] = z.gather(-1, tokens[r, c].unsqueeze(-1)).squeeze(-1) - lse_c
            lse[r, c] = lse_c
        ctx.save_for_backward(logits, tokens, lse)
        ctx.temperature, ctx.chunk = temperature, chunk
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        logits, tokens, lse = ctx.saved_tensors
        temperature, chunk = ctx.temperature, ctx.chunk
        grad = torch.empty_like(logits)
        for r, c in _blocks(logits.shape[0], logits.shape[1], chunk):
            z = _scaled_fp32(logits[r, c], temperature)
            go = grad_out[r, c].to(z.dtype).unsqueeze(-1)
            # d logp_tok / d z_j = 1[j = tok] - p_j
            g = torch.exp(z - lse[r, c].unsqueeze(-1)).mul_(-go)
            g.scatter_add_(-1, tokens[r, c].unsqueeze(-1), go)
            if temperature != 1.0:
                g.div_(temperature)
            grad[r, c] = g
        return grad, None, None, None


class _TokenEntropy(torch.autograd.Function):
    """Full-vocabulary entropy of softmax(logits / T) per position, chunked like :class:`_TokenLogprob`."""

    @staticmethod
    def forward(ctx, logits, temperature, chunk):
        n, t, _ = logits.shape
        ent = torch.empty((n, t), dtype=_compute_dtype(logits), device=logits.device)
        lse = torch.empty((n, t), dtype=_compute_dtype(logits), device=logits.device)
        for r, c in _blocks(n, t, chunk):
            z = _scaled_fp32(logits[r, c], temperature)
            lse_c = torch.logsumexp(z, dim=-1)
            p = torch.exp(z - lse_c.unsqueeze(-1))
            # xlogy(0, 0) = 0: positions with -inf logits (masked vocabulary) contribute nothing, not NaN.
            ent[r, c] = -torch.special.xlogy(p, p).sum(-1)
            lse[r, c] = lse_c
        ctx.save_for_backward(logits, lse, ent)
        ctx.temperature, ctx.chunk = temperature, chunk
        return ent

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        logits, lse, ent = ctx.saved_tensors
        temperature, chunk = ctx.temperature, ctx.chunk
        grad = torch.empty_like(logits)
        for r, c in _blocks(logits.shape[0], logits.shape[1], chunk):
            z = _scaled_fp32(logits[r, c], temperature)
            p = torch.exp(z - lse[r, c].unsqueeze(-1))
            # dH / dz_j = -p_j (log p_j + H)
            g = torch.special.xlogy(p, p).add_(p * ent[r, c].unsqueeze(-1))
            g.mul_(-grad_out[r, c].to(z.dtype).unsqueeze(-1))
            if temperature != 1.0:
                g.div_(temperature)
            grad[r, c] = g
        return grad, None, None


def token_logprobs(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = DEFAULT_CHUNK_ROWS,
) -> torch.Tensor:
    """``log pi(o_t | q, o_<t)`` per response token: ``[N, T, V]`` logits, ``[N, T]`` tokens -> ``[N, T]``
    (fp32; fp64 for fp64 logits).

    Logits are divided by ``temperature`` (the loop passes ``logprob_temperature``) and upcast to fp32
    ``chunk_size`` positions at a time (``None``: sized by ``CHUNK_BUDGET_BYTES``), in forward and backward alike,
    so bf16/fp16 logits never become one fp32 ``[N, T, V]`` tensor. Gradients flow to ``logits``.
    """
    chunk = _check_logits(logits, temperature, chunk_size)
    if tokens.shape != logits.shape[:2]:
        raise ValueError(f"tokens {tuple(tokens.shape)} do not match logits {tuple(logits.shape)}")
    return _TokenLogprob.apply(logits, tokens.long(), float(temperature), chunk)


def token_entropy(
    logits: torch.Tensor,
    temperature: float = 1.0,
    chunk_size: int | None = DEFAULT_CHUNK_ROWS,
    requires_grad: bool = False,
) -> torch.Tensor:
    """Full-vocabulary entropy ``H_t = -sum_v pi(v) log pi(v)`` per position (inner sum of REVA-PO Eq. 7).

    Chunked like :func:`token_logprobs`. Carries no gradient unless ``requires_grad`` (entropy bonus on).
    """
    chunk = _check_logits(logits, temperature, chunk_size)
    if requires_grad:
        return _TokenEntropy.apply(logits, float(temperature), chunk)
    with torch.no_grad():
        return _TokenEntropy.apply(logits.detach(), float(temperature), chunk)
