"""Pure-function core of the GRPO engine (REVA-PO Sec. 3.3, Eq. 2-6).

Rows are responses in group-major order: row ``b*G + g`` is sample ``g`` of prompt ``b``; ``N = B*G``.
Everything here is a function of tensors only: no model, no optimizer, no config object. The RL loop
(``harness/grpo/trainer.py``) plugs these together; tests and benchmarks call them directly.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

__all__ = [
    "AGGREGATIONS",
    "DEFAULT_CHUNK_ROWS",
    "KL_ESTIMATORS",
    "aggregate",
    "aggregation_weights",
    "group_advantages",
    "kl_penalty",
    "masked_mean",
    "policy_loss",
    "response_mean",
    "token_entropy",
    "token_logprobs",
    "zero_std_groups",
]

# Logit positions (over the N*T grid) upcast to fp32 at a time. None ("auto") sizes chunks so that one fp32
# chunk holds about CHUNK_BUDGET_BYTES: ~27 positions at Qwen2.5's 151,936-token vocabulary, thousands for
# the tiny preset's. Chunking by positions, not rows, keeps memory flat even for a handful of long rows.
DEFAULT_CHUNK_ROWS = None
CHUNK_BUDGET_BYTES = 16 * 2**20
# Clamp on log-ratios before exp(): keeps exp() finite for tokens the other policy all but rules out.
LOG_RATIO_CLAMP = 20.0
# Cap on the k3 estimator per token (Eq. 6 as in the official code): one outlier token cannot dominate.
K3_MAX = 10.0

KL_ESTIMATORS = ("k1", "k2", "k3")
AGGREGATIONS = ("token_mean", "group_token_mean", "seq_mean_token_mean", "dr_grpo")
ADVANTAGE_SCALES = ("std", "none")


# ----------------------------------------------------------------------------------------------------------
# Advantages (Eq. 2)
# ----------------------------------------------------------------------------------------------------------
def group_advantages(rewards: torch.Tensor, eps: float = 1e-6, scale: str = "std") -> torch.Tensor:
    """Group-relative advantages, REVA-PO Eq. 2: ``A = (R - mean_G R) / (std_G R + eps)``.

    ``rewards`` is ``[B, G]``; the std is the population std (divide by G, not G - 1). ``scale="none"`` drops
    the division (Dr. GRPO, Liu et al. 2025, Sec. 3.1: ``A = R - mean_G R``).

    A group whose rewards are all equal gets exactly 0. That needs an explicit zero: the float mean of G equal
    values is not always that value (in float32, eight rewards of 0.7 leave a residue of 6e-8), and dividing the
    residue by ``std + eps`` gives every sample of the group the same sign and |A| up to ~0.06 (0.7, G = 8), so
    RER would take its A > 0 or A < 0 branch instead of ``beta_base``.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, G], got shape {tuple(rewards.shape)}")
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"advantage scale must be one of {ADVANTAGE_SCALES}, got {scale!r}")
    r = rewards if rewards.is_floating_point() else rewards.float()
    centred = r - r.mean(dim=1, keepdim=True)
    adv = centred / (r.std(dim=1, keepdim=True, unbiased=False) + eps) if scale == "std" else centred
    return torch.where(zero_std_groups(r).unsqueeze(1), torch.zeros_like(adv), adv)


def zero_std_groups(rewards: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: groups whose rewards are all equal (they carry no policy-gradient signal).

    The loop logs the mean of this as ``frac_reward_zero_std`` and uses it for ``zero_std_groups: drop``.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, G], got shape {tuple(rewards.shape)}")
    return (rewards == rewards[:, :1]).all(dim=1)


# ----------------------------------------------------------------------------------------------------------
# Chunked log-probs and entropies
# ----------------------------------------------------------------------------------------------------------
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


# ----------------------------------------------------------------------------------------------------------
# KL estimators and aggregation
# ----------------------------------------------------------------------------------------------------------
def kl_penalty(logp: torch.Tensor, logp_ref: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi_theta || pi_ref) from samples of the old policy (Eq. 6 for k3).

    With ``d = clamp(logp_ref - logp, -20, 20)``: ``k1 = -d``, ``k2 = d^2 / 2``,
    ``k3 = clamp(exp(d) - d - 1, max=10)`` (non-negative, unbiased before the cap; the default).
    """
    d = torch.clamp(logp_ref - logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d * d
    if estimator == "k3":
        return torch.clamp(torch.exp(d) - d - 1.0, max=K3_MAX)
    raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the positions where ``mask`` is set (0 when no position is set)."""
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def response_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-response mean over its tokens, ``[N, T] -> [N]`` (0 for a response without tokens).

    With per-token reference entropies this is ``h_ref`` of REVA-PO Eq. 7: ``(1 / |o_i|) sum_t H_t``.
    """
    m = mask.to(x.dtype)
    return (x * m).sum(dim=-1) / m.sum(dim=-1).clamp(min=1.0)


def _group_sums(x: torch.Tensor, group_size: int | None) -> torch.Tensor:
    """``[N] -> [N / G]`` sums over consecutive groups of G rows (rows are group-major)."""
    if group_size is None or group_size < 1 or x.shape[0] % group_size:
        raise ValueError(f"group_token_mean needs group_size dividing the {x.shape[0]} rows, got {group_size}")
    return x.view(-1, group_size).sum(dim=1)


def aggregate(x: torch.Tensor, mask: torch.Tensor, mode: str = "token_mean", *, group_size: int | None = None,
              max_len: int | None = None) -> torch.Tensor:
    """Reduce a per-token ``[N, T]`` quantity to a scalar.

    - ``token_mean`` (default, DAPO-style; the official REVA-PO code): sum over all masked tokens of the step /
      number of masked tokens; every token weighs the same, long responses are not down-weighted.
    - ``group_token_mean`` (REVA-PO Eq. 3 as written): per group ``1 / sum_i |o_i| * sum_i sum_t``, then the
      mean over groups (rows are group-major, ``group_size`` = G). Groups without a masked token are left out.
    - ``seq_mean_token_mean`` (original GRPO): mean over each response's tokens, then mean over responses.
      Responses with no masked token have no mean and are left out of the outer mean.
    - ``dr_grpo`` (Dr. GRPO, Liu et al. 2025): sum over masked tokens / (N * ``max_len``), a constant
      normaliser (their code divides each response's token sum by the generation budget, then averages over
      responses); ``max_len`` is the rollout's ``max_new_tokens``.
    """
    m = mask.to(x.dtype)
    if mode == "token_mean":
        return (x * m).sum() / m.sum().clamp(min=1.0)
    if mode == "group_token_mean":
        sums, counts = _group_sums((x * m).sum(dim=-1), group_size), _group_sums(m.sum(dim=-1), group_size)
        has_tokens = (counts > 0).to(x.dtype)
        return (sums / counts.clamp(min=1.0) * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    if mode == "seq_mean_token_mean":
        lengths = m.sum(dim=-1)
        per_seq = (x * m).sum(dim=-1) / lengths.clamp(min=1.0)
        has_tokens = (lengths > 0).to(x.dtype)
        return (per_seq * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)
    if mode == "dr_grpo":
        return (x * m).sum() / _dr_grpo_normalizer(x.shape[0], max_len)
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {mode!r}")


def _dr_grpo_normalizer(n_rows: int, max_len: int | None) -> float:
    if max_len is None or max_len < 1:
        raise ValueError(f"dr_grpo needs max_len (the rollout's max_new_tokens) >= 1, got {max_len}")
    return float(max(n_rows, 1) * max_len)


def aggregation_normalizer(mask: torch.Tensor, mode: str = "token_mean", *, group_size: int | None = None,
                           max_len: int | None = None) -> torch.Tensor:
    """The denominator :func:`aggregate` divides by (before its clamp at 1): the number of masked tokens
    (``token_mean``), of groups (``group_token_mean``) or responses (``seq_mean_token_mean``) with at least one
    masked token, or N * max_len (``dr_grpo``). Data-parallel training scales each process's loss by its share
    of the global normaliser, so that the average over processes equals the loss of the whole batch
    (harness/distributed.py); whole groups live on one process, so group means are never split."""
    m = mask.float()
    if mode == "token_mean":
        return m.sum()
    if mode == "group_token_mean":
        return (_group_sums(m.sum(dim=-1), group_size) > 0).float().sum()
    if mode == "seq_mean_token_mean":
        return (m.sum(dim=-1) > 0).float().sum()
    if mode == "dr_grpo":
        return torch.tensor(_dr_grpo_normalizer(m.shape[0], max_len))
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {mode!r}")


def aggregation_weights(mask: torch.Tensor, mode: str = "token_mean", *, group_size: int | None = None,
                        max_len: int | None = None) -> torch.Tensor:
    """Per-token weights ``w [N, T]`` with ``aggregate(x, mask, mode) == (w * x).sum()`` for every ``x``.

    Computed once over the whole step, they let micro-batches of rows add up to the one-batch loss: each
    micro-batch contributes ``(w[rows] * x[rows]).sum()``, and no normaliser (token count, tokens per group,
    tokens per response, responses with tokens) is ever taken over a micro-batch alone.
    """
    m = mask.float() if not mask.is_floating_point() else mask
    if mode == "token_mean":
        return m / m.sum().clamp(min=1.0)
    if mode == "group_token_mean":
        counts = _group_sums(m.sum(dim=-1), group_size)  # tokens per group
        n_groups = (counts > 0).to(m.dtype).sum().clamp(min=1.0)
        per_row = (1.0 / (counts.clamp(min=1.0) * n_groups)).repeat_interleave(group_size)
        return m * per_row.unsqueeze(1)
    if mode == "seq_mean_token_mean":
        lengths = m.sum(dim=-1)
        n_seqs = (lengths > 0).to(m.dtype).sum().clamp(min=1.0)
        return m / (lengths.clamp(min=1.0) * n_seqs).unsqueeze(1)
    if mode == "dr_grpo":
        return m / _dr_grpo_normalizer(m.shape[0], max_len)
    raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {mode!r}")


def _per_token(x: torch.Tensor | float, shape: torch.Size, like: torch.Tensor, what: str) -> torch.Tensor:
    """Broadcast a per-response ``[N]`` (or per-token ``[N, T]``, or scalar) quantity to ``[N, T]``."""
    x = torch.as_tensor(x, dtype=like.dtype, device=like.device)
    if x.dim() == 1:
        if x.shape[0] != shape[0]:
            raise ValueError(f"{what} has {x.shape[0]} rows, expected {shape[0]}")
        x = x.unsqueeze(-1)
    elif x.dim() == 2 and x.shape != shape:
        raise ValueError(f"{what} has shape {tuple(x.shape)}, expected {tuple(shape)}")
    elif x.dim() > 2:
        raise ValueError(f"{what} must be [N] or [N, T], got shape {tuple(x.shape)}")
    return x.expand(shape)


# ----------------------------------------------------------------------------------------------------------
# The loss (Eq. 3 with its surrogate l_{i,t}, k3 KL of Eq. 6, entropy bonus of Fig. 1)
# ----------------------------------------------------------------------------------------------------------
def policy_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    logp_ref: torch.Tensor | None,
    advantages: torch.Tensor,
    beta: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    dual_clip: float | None = 10.0,
    kl_estimator: str = "k3",
    aggregation: str = "token_mean",
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    group_size: int | None = None,
    max_len: int | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The negated REVA-PO objective (Eq. 3), to minimise.

    ``loss = agg(-l_{i,t}) + agg(beta_i * KL_{i,t}) - entropy_coef * agg(H_{i,t})`` with

    - ``r = exp(clamp(logp - logp_old, -20, 20))`` and the clipped surrogate
      ``l = min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)`` (asymmetric clip, DAPO);
    - dual clip: for ``A < 0`` the per-token loss ``-l`` is capped at ``dual_clip * |A|`` (``None``: off);
    - ``KL`` from :func:`kl_penalty` (``logp_ref=None``: no KL term; ``kl_mean`` and ``log_ratio_ref_mean``
      are then absent from the stats, never 0: nothing was measured);
    - ``agg`` from :func:`aggregate` (``group_size`` for ``group_token_mean``, ``max_len`` for ``dr_grpo``), or
      ``(token_weights * x).sum()`` when ``token_weights`` are given: a micro-batch's rows of the whole step's
      :func:`aggregation_weights`, so that the micro-batches' losses add up to the step's loss.

    ``advantages`` and ``beta`` are per response ``[N]`` (or per token ``[N, T]``, e.g. DiTPO token weights
    folded into the advantages); ``mask`` ``[N, T]`` marks response tokens. ``entropy`` is the current
    policy's per-token entropy, with grad when the bonus is on.

    Stats (floats): pg_loss, kl_loss, entropy_loss, loss; kl_mean (token mean of the estimator) and
    log_ratio_ref_mean (token mean of logp - logp_ref) when a reference is given; entropy_mean, clip_frac
    (tokens where the clipped branch is the one taken), clip_frac_low / clip_frac_high (the ratio below
    1 - eps_low with A < 0 / above 1 + eps_high with A > 0), dual_clip_frac, ratio_mean, beta_mean /
    beta_min / beta_max (over responses).
    """
    if logp.dim() != 2:
        raise ValueError(f"logp must be [N, T], got shape {tuple(logp.shape)}")
    shape = logp.shape
    for name, t in (("logp_old", logp_old), ("logp_ref", logp_ref), ("mask", mask), ("entropy", entropy)):
        if t is not None and t.shape != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {kl_estimator!r}")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (or None), got {dual_clip}")

    adv = _per_token(advantages, shape, logp, "advantages")
    beta_rows = torch.as_tensor(beta, dtype=logp.dtype, device=logp.device)
    beta_tok = _per_token(beta_rows, shape, logp, "beta")
    mask_f = mask.to(logp.dtype)

    # Clipped surrogate l_{i,t} of Eq. 3. The old policy's log-probs carry no gradient.
    log_ratio = torch.clamp(logp - logp_old.detach(), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    pg_tok = torch.maximum(loss_unclipped, loss_clipped)
    if dual_clip is not None:
        # For A < 0 the ratio is unbounded above; cap the loss so one stale token cannot blow up the step.
        cap = dual_clip * adv.abs()
        dual_active = (adv < 0) & (pg_tok > cap)
        pg_tok = torch.where(adv < 0, torch.minimum(pg_tok, cap), pg_tok)
    else:
        dual_active = torch.zeros_like(mask_f, dtype=torch.bool)
    if token_weights is not None and token_weights.shape != shape:
        raise ValueError(f"token_weights has shape {tuple(token_weights.shape)}, expected {tuple(shape)}")
    agg_kw = {"group_size": group_size, "max_len": max_len}

    def agg(x: torch.Tensor) -> torch.Tensor:
        if token_weights is None:
            return aggregate(x, mask_f, aggregation, **agg_kw)
        return (x * token_weights.to(x.dtype)).sum()

    pg_loss = agg(pg_tok)

    # KL to the reference, weighted per response (Eq. 3 with beta_i).
    if logp_ref is not None:
        kl_tok = kl_penalty(logp, logp_ref.detach(), kl_estimator)
        kl_loss = agg(beta_tok * kl_tok)
    else:
        kl_tok = None
        kl_loss = torch.zeros((), dtype=logp.dtype, device=logp.device)

    # Entropy bonus: subtracting it from the loss rewards a higher-entropy policy.
    if entropy is not None and entropy_coef != 0.0:
        entropy_loss = -entropy_coef * agg(entropy.to(logp.dtype))
    else:
        entropy_loss = torch.zeros((), dtype=logp.dtype, device=logp.device)

    loss = pg_loss + kl_loss + entropy_loss

    with torch.no_grad():
        zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
        stats_t = {
            "loss": loss.detach(),
            "pg_loss": pg_loss.detach(),
            "kl_loss": kl_loss.detach(),
            "entropy_loss": entropy_loss.detach(),
            "entropy_mean": masked_mean(entropy.to(logp.dtype), mask_f) if entropy is not None else zero,
            "clip_frac": masked_mean((loss_clipped > loss_unclipped).to(logp.dtype), mask_f),
            "clip_frac_low": masked_mean(((ratio < 1.0 - eps_low) & (adv < 0)).to(logp.dtype), mask_f),
            "clip_frac_high": masked_mean(((ratio > 1.0 + eps_high) & (adv > 0)).to(logp.dtype), mask_f),
            "dual_clip_frac": masked_mean(dual_active.to(logp.dtype), mask_f),
            "ratio_mean": masked_mean(ratio, mask_f),
            "beta_mean": beta_rows.float().mean(),
            "beta_min": beta_rows.float().min(),
            "beta_max": beta_rows.float().max(),
        }
        if kl_tok is not None:
            stats_t["kl_mean"] = masked_mean(kl_tok, mask_f)
            stats_t["log_ratio_ref_mean"] = masked_mean(logp - logp_ref, mask_f)
        # One device sync for all stats.
        values = torch.stack([v.float().reshape(()) for v in stats_t.values()]).tolist()
    return loss, dict(zip(stats_t.keys(), values, strict=True))
