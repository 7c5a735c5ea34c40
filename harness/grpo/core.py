"""Pure-function core of the GRPO engine (REVA-PO Sec. 3.3, Eq. 2-6).

Rows are responses in group-major order: row ``b*G + g`` is sample ``g`` of prompt ``b``; ``N = B*G``.
Everything here is a function of tensors only: no model, no optimizer, no config object. The RL loop
(``harness/grpo/trainer.py``) plugs these together; tests and benchmarks call them directly.
"""

from __future__ import annotations

import torch

# The chunked log-prob / entropy kernels and the loss aggregations live in their own modules; they are
# re-exported here because the loss is built from them and callers know them as part of the core.
from harness.aggregation import (
    AGGREGATIONS,
    aggregate,
    aggregation_normalizer,
    aggregation_weights,
    get_aggregation,
)
from harness.grpo.masked import masked_mean, per_token, response_mean
from harness.policy.logprobs import DEFAULT_CHUNK_ROWS, token_entropy, token_logprobs

__all__ = [
    "AGGREGATIONS",
    "aggregation_normalizer",
    "DEFAULT_CHUNK_ROWS",
    "KL_ESTIMATORS",
    "aggregate",
    "aggregation_weights",
    "group_advantages",
    "importance_ratio",
    "kl_penalty",
    "masked_mean",
    "policy_loss",
    "response_mean",
    "surrogate_loss",
    "token_entropy",
    "token_logprobs",
    "zero_std_groups",
]

# Clamp on log-ratios before exp(): keeps exp() finite for tokens the other policy all but rules out.
LOG_RATIO_CLAMP = 20.0
# Cap on the k3 estimator per token (Eq. 6 as in the official code): one outlier token cannot dominate.
K3_MAX = 10.0

# k3_is: k3 times the importance ratio current / old (DeepSeek-V3.2; TRL's use_bias_correction_kl).
KL_ESTIMATORS = ("k1", "k2", "k3", "k3_is")
ADVANTAGE_SCALES = ("std", "none")
ADVANTAGE_STDS = ("population", "bessel")
IMPORTANCE_SAMPLING = ("token", "sequence")
SURROGATES = ("clip", "cispo", "sapo")


# ----------------------------------------------------------------------------------------------------------
# Advantages (Eq. 2)
# ----------------------------------------------------------------------------------------------------------
def group_advantages(rewards: torch.Tensor, eps: float = 1e-6, scale: str = "std",
                     std: str = "population") -> torch.Tensor:
    """Group-relative advantages, REVA-PO Eq. 2: ``A = (R - mean_G R) / (std_G R + eps)``.

    ``rewards`` is ``[B, G]``; ``std="population"`` divides by G (the official code), ``"bessel"`` by G - 1
    (TRL's ``rewards.std()``: advantages sqrt((G - 1) / G) times the population ones). ``scale="none"`` drops
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
    if std not in ADVANTAGE_STDS:
        raise ValueError(f"advantage std must be one of {ADVANTAGE_STDS}, got {std!r}")
    r = rewards if rewards.is_floating_point() else rewards.float()
    centred = r - r.mean(dim=1, keepdim=True)
    sd = r.std(dim=1, keepdim=True, unbiased=std == "bessel")
    adv = centred / (sd + eps) if scale == "std" else centred
    return torch.where(zero_std_groups(r).unsqueeze(1), torch.zeros_like(adv), adv)


def zero_std_groups(rewards: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: groups whose rewards are all equal (they carry no policy-gradient signal).

    The loop logs the mean of this as ``frac_reward_zero_std`` and uses it for ``zero_std_groups: drop``.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, G], got shape {tuple(rewards.shape)}")
    return (rewards == rewards[:, :1]).all(dim=1)


# ----------------------------------------------------------------------------------------------------------
# KL estimators and aggregation
# ----------------------------------------------------------------------------------------------------------
def kl_penalty(logp: torch.Tensor, logp_ref: torch.Tensor, estimator: str = "k3", cap: float | None = K3_MAX,
               ratio: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token estimate of KL(pi_theta || pi_ref) from samples of the old policy (Eq. 6 for k3).

    With ``d = clamp(logp_ref - logp, -20, 20)``: ``k1 = -d``, ``k2 = d^2 / 2``,
    ``k3 = clamp(exp(d) - d - 1, max=cap)`` (non-negative, unbiased before the cap; the default; ``cap`` 10 as the
    official code, None: no cap, as TRL), ``k3_is = ratio * k3`` with ``ratio`` = pi_theta / pi_old (with grad):
    the importance-corrected k3 whose gradient is the unbiased reverse-KL gradient off-policy (DeepSeek-V3.2,
    TRL's ``use_bias_correction_kl``).
    """
    d = torch.clamp(logp_ref - logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d * d
    if estimator in ("k3", "k3_is"):
        k3 = torch.exp(d) - d - 1.0
        k3 = k3 if cap is None else torch.clamp(k3, max=cap)
        if estimator == "k3":
            return k3
        if ratio is None:
            raise ValueError("kl_estimator k3_is needs the importance ratio pi_theta / pi_old")
        return ratio * k3
    raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


def importance_ratio(logp: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor,
                     level: str = "token") -> torch.Tensor:
    """``r = pi_theta / pi_old`` with the log-ratio clamped to [-20, 20]: per token ``[N, T]`` (``level="token"``),
    or per sequence ``[N, 1]``: ``exp(mean_t log r_t)`` over the response's tokens, the geometric mean of the
    token ratios (GSPO, Zheng et al. 2025, Eq. 7; TRL's ``importance_sampling_level="sequence"``); clipped at the
    sequence level by the surrogate, as one value per response."""
    log_ratio = torch.clamp(logp - logp_old.detach(), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    if level == "sequence":
        m = mask.to(log_ratio.dtype)
        log_ratio = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    elif level != "token":
        raise ValueError(f"importance_sampling must be one of {IMPORTANCE_SAMPLING}, got {level!r}")
    return torch.exp(log_ratio)


def surrogate_loss(ratio: torch.Tensor, adv: torch.Tensor, logp: torch.Tensor, kind: str = "clip", *,
                   eps_low: float = 0.2, eps_high: float = 0.28, sapo_tau_pos: float = 1.0,
                   sapo_tau_neg: float = 1.05) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token policy loss ``-l`` (to minimise), and the unclipped / clipped losses for the clip statistics.

    - ``clip``: ``max(-r A, -clip(r, 1 - eps_low, 1 + eps_high) A)`` (PPO; asymmetric clip, DAPO);
    - ``cispo``: ``-sg(min(r, 1 + eps_high)) A log pi_theta``: the ratio is clipped and detached, every token keeps
      its gradient (MiniMax-M1, Sec. 3.1; TRL's ``loss_type="cispo"`` with its ``epsilon_high`` = 1 + eps_high);
    - ``sapo``: ``-sigmoid(tau (r - 1)) 4 / tau A``, tau = sapo_tau_pos for A > 0 else sapo_tau_neg: a soft gate
      in place of the hard clip (Gao et al. 2025, SAPO; TRL's ``loss_type="sapo"``).
    """
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    if kind == "clip":
        per_tok = torch.maximum(loss_unclipped, loss_clipped)
    elif kind == "cispo":
        per_tok = -torch.clamp(ratio, max=1.0 + eps_high).detach() * adv * logp
    elif kind == "sapo":
        tau = torch.where(adv > 0, torch.full_like(adv, sapo_tau_pos), torch.full_like(adv, sapo_tau_neg))
        per_tok = -torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau * adv
    else:
        raise ValueError(f"surrogate must be one of {SURROGATES}, got {kind!r}")
    return per_tok, loss_unclipped, loss_clipped


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
    kl_cap: float | None = K3_MAX,
    importance_sampling: str = "token",
    surrogate: str = "clip",
    sapo_tau_pos: float = 1.0,
    sapo_tau_neg: float = 1.05,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The negated REVA-PO objective (Eq. 3), to minimise.

    ``loss = agg(-l_{i,t}) + agg(beta_i * KL_{i,t}) - entropy_coef * agg(H_{i,t})`` with

    - ``r = exp(clamp(logp - logp_old, -20, 20))`` per token, or per sequence (``importance_sampling``, GSPO:
      :func:`importance_ratio`) and the clipped surrogate ``l = min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)``
      (asymmetric clip, DAPO), or CISPO's / SAPO's (``surrogate``, :func:`surrogate_loss`);
    - dual clip: for ``A < 0`` the per-token loss ``-l`` is capped at ``dual_clip * |A|`` (``None``: off; clip
      surrogate only);
    - ``KL`` from :func:`kl_penalty` with ``kl_cap`` (``logp_ref=None``: no KL term; ``kl_mean`` and
      ``log_ratio_ref_mean`` are then absent from the stats, never 0: nothing was measured); ``k3_is`` weighs k3
      by the same ratio ``r`` as the surrogate;
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
    get_aggregation(aggregation)  # an unknown name fails here, listing the registered ones
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (or None), got {dual_clip}")
    if dual_clip is not None and surrogate != "clip":
        raise ValueError(f"dual_clip caps the clip surrogate's loss; set it to None for surrogate {surrogate!r}")

    adv = per_token(advantages, shape, logp, "advantages")
    beta_rows = torch.as_tensor(beta, dtype=logp.dtype, device=logp.device)
    beta_tok = per_token(beta_rows, shape, logp, "beta")
    mask_f = mask.to(logp.dtype)

    # Clipped surrogate l_{i,t} of Eq. 3. The old policy's log-probs carry no gradient.
    ratio = importance_ratio(logp, logp_old, mask_f, importance_sampling)  # [N, T], or [N, 1] per sequence
    pg_tok, loss_unclipped, loss_clipped = surrogate_loss(
        ratio, adv, logp, surrogate, eps_low=eps_low, eps_high=eps_high, sapo_tau_pos=sapo_tau_pos,
        sapo_tau_neg=sapo_tau_neg)
    ratio = ratio.expand(shape)
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
        kl_tok = kl_penalty(logp, logp_ref.detach(), kl_estimator, kl_cap, ratio)
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
