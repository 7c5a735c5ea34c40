"""Hand-computed checks of the GRPO pure functions (REVA-PO Eq. 2-6)."""

import math

import pytest
import torch

from harness.grpo import (
    aggregate,
    aggregation_normalizer,
    group_advantages,
    kl_penalty,
    policy_loss,
    response_mean,
    token_entropy,
    token_logprobs,
    zero_std_groups,
)

LN2 = math.log(2.0)


# -- advantages --------------------------------------------------------------------------------------------
def test_group_advantages_hand_computed():
    rewards = torch.tensor([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0]])
    a = group_advantages(rewards)
    std = math.sqrt(2.0 / 3.0)  # population std of (1, 2, 3)
    expected = torch.tensor([[-1 / (std + 1e-6), 0.0, 1 / (std + 1e-6)], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(a, expected, rtol=0, atol=1e-6)
    assert torch.equal(a[1], torch.zeros(3))  # all-equal group: exactly 0
    assert zero_std_groups(rewards).tolist() == [False, True]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equal_reward_groups_get_exactly_zero_advantage_and_rer_beta_base(dtype):
    # 0.1, 1/3 and 0.7 are not exact in binary: the float mean of G copies is not always the value itself
    # (float32, G = 8, 0.7 leaves 6e-8, which / (std + 1e-6) used to give every sample A = 0.056).
    from regularizers.rer import rer_betas

    for G in range(2, 17):
        for value in (0.1, 1 / 3, 0.7):
            rewards = torch.tensor([[value] * G, [value] * (G - 1) + [0.9]], dtype=dtype)
            a = group_advantages(rewards)
            assert torch.equal(a[0], torch.zeros(G, dtype=dtype)), (G, value)
            assert (a[1] != 0).all()
            beta = rer_betas(a, torch.rand(2, G, dtype=dtype), 0.05, 0.1, 0.12)
            assert (beta[0] == 0.1).all(), (G, value)


def test_group_advantages_without_std_scale_is_dr_grpo():
    rewards = torch.tensor([[0.1, 0.4, 0.7], [1 / 3, 1 / 3, 1 / 3]], dtype=torch.float64)
    a = group_advantages(rewards, scale="none")
    torch.testing.assert_close(a[0], torch.tensor([-0.3, 0.0, 0.3], dtype=torch.float64), rtol=0, atol=1e-15)
    assert torch.equal(a[1], torch.zeros(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="scale"):
        group_advantages(rewards, scale="max")


def test_no_reference_logs_no_kl():
    # No reference pass: the KL was not measured, so it is absent, never a 0 that plots as "no drift".
    _, stats = policy_loss(X * 0, X * 0, None, torch.ones(2), torch.zeros(2), MASK)
    assert "kl_mean" not in stats and "log_ratio_ref_mean" not in stats and stats["kl_loss"] == 0.0
    _, stats = policy_loss(X * 0, X * 0, X * 0 - 0.1, torch.ones(2), torch.zeros(2), MASK)
    assert stats["kl_mean"] == pytest.approx(math.exp(-0.1) + 0.1 - 1, rel=1e-5)


def test_group_advantages_single_sample_group_is_zero():
    a = group_advantages(torch.tensor([[3.0], [-1.0]]))
    assert torch.equal(a, torch.zeros(2, 1))


def test_group_advantages_two_samples_and_eps():
    a = group_advantages(torch.tensor([[0.0, 1.0]]), eps=0.5)
    # mean 0.5, population std 0.5 -> (+-0.5) / (0.5 + 0.5)
    torch.testing.assert_close(a, torch.tensor([[-0.5, 0.5]]))


def test_group_advantages_rejects_1d():
    with pytest.raises(ValueError, match="B, G"):
        group_advantages(torch.ones(4))


# -- KL estimators -----------------------------------------------------------------------------------------
def test_kl_estimators_hand_computed():
    logp = torch.tensor([math.log(0.5)])
    logp_ref = torch.tensor([math.log(0.25)])
    # d = logp_ref - logp = -ln 2
    torch.testing.assert_close(kl_penalty(logp, logp_ref, "k1"), torch.tensor([LN2]))
    torch.testing.assert_close(kl_penalty(logp, logp_ref, "k2"), torch.tensor([0.5 * LN2**2]))
    torch.testing.assert_close(kl_penalty(logp, logp_ref, "k3"), torch.tensor([0.5 + LN2 - 1.0]))


def test_kl_estimators_clamps():
    logp = torch.zeros(2)
    logp_ref = torch.tensor([30.0, -30.0])  # d clamped to +-20
    torch.testing.assert_close(kl_penalty(logp, logp_ref, "k1"), torch.tensor([-20.0, 20.0]))
    torch.testing.assert_close(kl_penalty(logp, logp_ref, "k2"), torch.tensor([200.0, 200.0]))
    # exp(20) - 21 and exp(-20) + 19 are both capped at 10
    torch.testing.assert_close(kl_penalty(logp, logp_ref, "k3"), torch.tensor([10.0, 10.0]))
    assert torch.isfinite(kl_penalty(logp, torch.tensor([1e4, -1e4]), "k3")).all()
    with pytest.raises(ValueError, match="kl_estimator"):
        kl_penalty(logp, logp_ref, "k4")


def test_kl_is_zero_when_policies_agree():
    logp = torch.randn(3, 4)
    for est in ("k1", "k2", "k3"):
        assert torch.equal(kl_penalty(logp, logp.clone(), est), torch.zeros(3, 4))


# -- clipped surrogate ---------------------------------------------------------------------------------------
def _pl(logp, logp_old, adv, **kw):
    n, t = logp.shape
    kw.setdefault("dual_clip", None)
    return policy_loss(logp, logp_old, None, adv, torch.zeros(n), torch.ones(n, t), **kw)


def test_clip_low_and_high_activation():
    # rows (ratio, A): (1.5, +1) clipped at 1.28; (1.5, -1) not; (0.5, +1) not; (0.5, -1) clipped at 0.8
    ratio = torch.tensor([[1.5], [1.5], [0.5], [0.5]])
    logp = ratio.log().requires_grad_(True)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss, stats = _pl(logp, torch.zeros(4, 1), adv)
    torch.testing.assert_close(loss, torch.tensor((-1.28 + 1.5 - 0.5 + 0.8) / 4))
    assert stats["clip_frac"] == pytest.approx(0.5)
    assert stats["clip_frac_high"] == pytest.approx(0.25)
    assert stats["clip_frac_low"] == pytest.approx(0.25)
    assert stats["ratio_mean"] == pytest.approx(1.0)
    loss.backward()
    # clipped tokens get no gradient; unclipped ones get -A * r / 4
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0], [1.5 / 4], [-0.5 / 4], [0.0]]))


def test_ratio_is_one_when_logp_equals_old():
    logp = torch.randn(3, 5)
    loss, stats = _pl(logp, logp.clone(), torch.tensor([1.0, -2.0, 0.5]))
    assert stats["ratio_mean"] == 1.0
    assert stats["clip_frac"] == 0.0
    torch.testing.assert_close(loss, torch.tensor(-(1.0 - 2.0 + 0.5) / 3))


def test_ratio_log_clamp_keeps_loss_finite():
    logp = torch.tensor([[100.0]])
    loss, stats = _pl(logp, torch.zeros(1, 1), torch.tensor([-1.0]))
    assert stats["ratio_mean"] == pytest.approx(math.exp(20.0), rel=1e-5)
    assert math.isfinite(loss.item())


def test_dual_clip_caps_negative_advantage_loss():
    logp = torch.tensor([[math.log(20.0)], [math.log(20.0)], [math.log(5.0)]], requires_grad=True)
    adv = torch.tensor([-1.0, 1.0, -1.0])
    loss, stats = _pl(logp, torch.zeros(3, 1), adv, dual_clip=10.0)
    # row 0: -A r = 20 capped at 10 |A|; row 1: A > 0, clipped to -1.28; row 2: 5 < 10, untouched
    torch.testing.assert_close(loss, torch.tensor((10.0 - 1.28 + 5.0) / 3))
    assert stats["dual_clip_frac"] == pytest.approx(1 / 3)
    loss.backward()
    assert logp.grad[0, 0] == 0.0 and logp.grad[1, 0] == 0.0
    torch.testing.assert_close(logp.grad[2, 0], torch.tensor(5.0 / 3))
    loss_off, stats_off = _pl(logp.detach(), torch.zeros(3, 1), adv, dual_clip=None)
    torch.testing.assert_close(loss_off, torch.tensor((20.0 - 1.28 + 5.0) / 3))
    assert stats_off["dual_clip_frac"] == 0.0


# -- aggregation ----------------------------------------------------------------------------------------
X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])


# Four responses in two groups of G = 2; the last response is empty.
X4 = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [0.1, 0.2, 0.3], [7.0, 8.0, 9.0]], dtype=torch.float64)
MASK4 = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]])
AGG = {"group_size": 2, "max_len": 5}


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token_mean", (1 + 2 + 4 + 0.1 + 0.2 + 0.3) / 6),  # all 6 masked tokens of the step
        ("group_token_mean", ((1 + 2 + 4) / 3 + (0.1 + 0.2 + 0.3) / 3) / 2),  # Eq. 3 per group, mean of groups
        ("seq_mean_token_mean", ((1 + 2) / 2 + 4 / 1 + 0.6 / 3) / 3),  # the empty response is left out
        ("dr_grpo", (1 + 2 + 4 + 0.1 + 0.2 + 0.3) / (4 * 5)),  # N x max_new_tokens, not the padded width 3
    ],
)
def test_aggregations_hand_computed(mode, expected):
    assert aggregate(X4, MASK4, mode, **AGG).item() == pytest.approx(expected, rel=1e-12)
    # the same through policy_loss: ratio 1 and per-token advantages -X make the per-token loss X
    loss, stats = policy_loss(X4 * 0, X4 * 0, None, -X4, torch.zeros(4), MASK4.bool(), aggregation=mode, **AGG)
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    assert stats["pg_loss"] == pytest.approx(expected, rel=1e-6)  # stats are reported in float32


@pytest.mark.parametrize(("mode", "normalizer", "numerator"), [
    ("token_mean", 6.0, 7.6), ("group_token_mean", 2.0, 7 / 3 + 0.2), ("seq_mean_token_mean", 3.0, 1.5 + 4 + 0.2),
    ("dr_grpo", 20.0, 7.6)])
def test_aggregation_normalizer_is_the_denominator(mode, normalizer, numerator):
    assert aggregation_normalizer(MASK4, mode, **AGG).item() == normalizer
    # aggregate = (sum of what it averages) / normalizer
    assert aggregate(X4, MASK4, mode, **AGG).item() == pytest.approx(numerator / normalizer, rel=1e-12)
    assert aggregation_normalizer(torch.tensor([[1, 0], [0, 0]]), "seq_mean_token_mean").item() == 1.0
    with pytest.raises(ValueError, match="aggregation"):
        aggregation_normalizer(MASK, "sum")


def test_group_token_mean_skips_groups_without_tokens_and_needs_whole_groups():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]])
    assert aggregate(X4, mask, "group_token_mean", group_size=2).item() == pytest.approx(7 / 3, rel=1e-12)
    assert aggregation_normalizer(mask, "group_token_mean", group_size=2).item() == 1.0
    with pytest.raises(ValueError, match="group_size"):
        aggregate(X4, MASK4, "group_token_mean", group_size=3)
    with pytest.raises(ValueError, match="max_len"):
        aggregate(X4, MASK4, "dr_grpo")


def test_seq_mean_skips_empty_rows_and_bad_mode():
    assert aggregate(X, torch.tensor([[1, 1, 0], [0, 0, 0]]), "seq_mean_token_mean").item() == 1.5
    assert aggregate(X, torch.zeros(2, 3), "token_mean").item() == 0.0
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(X, MASK, "sum")


def test_kl_term_weighted_per_response():
    logp = torch.zeros(2, 3)
    logp_ref = torch.full((2, 3), -LN2)
    k3 = 0.5 + LN2 - 1.0
    beta = torch.tensor([0.1, 0.2])
    loss, stats = policy_loss(logp, logp, logp_ref, torch.zeros(2), beta, MASK)
    assert stats["kl_loss"] == pytest.approx((0.1 * 2 + 0.2 * 1) * k3 / 3)
    assert loss.item() == pytest.approx(stats["kl_loss"])
    assert stats["kl_mean"] == pytest.approx(k3)
    assert stats["log_ratio_ref_mean"] == pytest.approx(LN2)
    assert (stats["beta_mean"], stats["beta_min"], stats["beta_max"]) == pytest.approx((0.15, 0.1, 0.2))
    _, s1 = policy_loss(logp, logp, logp_ref, torch.zeros(2), beta, MASK, kl_estimator="k1")
    assert s1["kl_mean"] == pytest.approx(LN2)


def test_beta_zero_equals_no_reference():
    torch.manual_seed(0)
    logp, old, ref = torch.randn(4, 6), torch.randn(4, 6), torch.randn(4, 6)
    adv, mask = torch.randn(4), torch.rand(4, 6) > 0.3
    loss0, s0 = policy_loss(logp, old, ref, adv, torch.zeros(4), mask)
    loss1, s1 = policy_loss(logp, old, None, adv, torch.zeros(4), mask)
    assert torch.equal(loss0, loss1)
    assert s1["kl_loss"] == 0.0 and "kl_mean" not in s1 and "log_ratio_ref_mean" not in s1
    assert s0["kl_mean"] > 0.0


def test_entropy_bonus_sign():
    logp = torch.zeros(2, 3)
    ent = torch.full((2, 3), 2.0, requires_grad=True)
    base, _ = policy_loss(logp, logp, None, torch.zeros(2), torch.zeros(2), MASK)
    loss, stats = policy_loss(
        logp, logp, None, torch.zeros(2), torch.zeros(2), MASK, entropy=ent, entropy_coef=0.1
    )
    assert loss.item() == pytest.approx(base.item() - 0.2)  # higher entropy -> lower loss
    assert stats["entropy_mean"] == pytest.approx(2.0)
    loss.backward()
    assert (ent.grad[MASK.bool()] < 0).all() and (ent.grad[~MASK.bool()] == 0).all()


def test_policy_loss_shape_errors():
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), None, torch.zeros(3), torch.zeros(2), MASK)
    with pytest.raises(ValueError, match="mask"):
        policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), None, torch.zeros(2), torch.zeros(2), MASK[:, :2])


# -- chunked log-probs and entropies ---------------------------------------------------------------------
def _ref_logprobs(logits, tokens, temperature=1.0):
    return torch.log_softmax(logits.float() / temperature, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def _ref_entropy(logits, temperature=1.0):
    lp = torch.log_softmax(logits.float() / temperature, -1)
    return -(lp.exp() * lp).sum(-1)


@pytest.mark.parametrize("chunk", [1, 2, 3, None])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_chunked_equal_unchunked_with_grads(chunk, temperature):
    torch.manual_seed(1)
    logits = torch.randn(5, 4, 33, requires_grad=True)
    tokens = torch.randint(0, 33, (5, 4))
    w = torch.randn(5, 4)
    ours = token_logprobs(logits, tokens, temperature=temperature, chunk_size=chunk)
    (g_ours,) = torch.autograd.grad((ours * w).sum(), logits)
    ref = _ref_logprobs(logits, tokens, temperature)
    (g_ref,) = torch.autograd.grad((ref * w).sum(), logits)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-6)
    torch.testing.assert_close(g_ours, g_ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("chunk", [1, 2, None])
def test_entropy_chunked_equal_unchunked(chunk):
    torch.manual_seed(2)
    logits = torch.randn(5, 4, 33, requires_grad=True)
    ours = token_entropy(logits, temperature=0.7, chunk_size=chunk)
    assert not ours.requires_grad  # no grad unless asked
    torch.testing.assert_close(ours, _ref_entropy(logits, 0.7).detach(), rtol=0, atol=1e-6)
    w = torch.randn(5, 4)
    with_grad = token_entropy(logits, temperature=0.7, chunk_size=chunk, requires_grad=True)
    (g_ours,) = torch.autograd.grad((with_grad * w).sum(), logits)
    (g_ref,) = torch.autograd.grad((_ref_entropy(logits, 0.7) * w).sum(), logits)
    torch.testing.assert_close(g_ours, g_ref, rtol=0, atol=1e-6)


def test_bf16_logits_upcast_per_chunk():
    torch.manual_seed(3)
    logits = torch.randn(4, 3, 50).to(torch.bfloat16).requires_grad_(True)
    tokens = torch.randint(0, 50, (4, 3))
    lp = token_logprobs(logits, tokens, chunk_size=1)
    assert lp.dtype == torch.float32
    torch.testing.assert_close(lp, _ref_logprobs(logits, tokens), rtol=0, atol=1e-6)
    lp.sum().backward()
    assert logits.grad.dtype == torch.bfloat16
    ent = token_entropy(logits, chunk_size=2)
    torch.testing.assert_close(ent, _ref_entropy(logits).detach(), rtol=0, atol=1e-5)


def test_entropy_of_uniform_and_masked_vocab():
    h = token_entropy(torch.zeros(1, 2, 8))
    torch.testing.assert_close(h, torch.full((1, 2), math.log(8.0)))
    logits = torch.zeros(1, 1, 8)
    logits[..., 4:] = float("-inf")  # a masked vocabulary half: entropy ln 4, not NaN
    torch.testing.assert_close(token_entropy(logits), torch.full((1, 1), math.log(4.0)))


def test_gradcheck_float64():
    torch.manual_seed(4)
    x = torch.randn(3, 2, 7, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 7, (3, 2))
    assert torch.autograd.gradcheck(lambda z: token_logprobs(z, t, 0.9, 2), (x,))
    assert torch.autograd.gradcheck(lambda z: token_entropy(z, 0.9, 2, requires_grad=True), (x,))


def test_response_mean_is_eq7_average():
    torch.testing.assert_close(response_mean(X, MASK), torch.tensor([1.5, 4.0]))
    torch.testing.assert_close(response_mean(X, torch.zeros(2, 3)), torch.zeros(2))


def test_no_fp32_vocab_tensor_saved_for_backward():
    """The graph keeps the bf16 logits and [N, T] statistics, never an fp32 [rows, T, V] chunk."""
    logits = torch.randn(6, 5, 40).to(torch.bfloat16).requires_grad_(True)
    tokens = torch.randint(0, 40, (6, 5))
    saved = []

    def pack(t):
        saved.append((t.dtype, tuple(t.shape)))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lp = token_logprobs(logits, tokens, temperature=0.7, chunk_size=2)
        ent = token_entropy(logits, temperature=0.7, chunk_size=2, requires_grad=True)
    (lp.sum() + ent.sum()).backward()
    assert saved, "nothing was saved: the test does not observe the graph"
    assert all(not (dtype == torch.float32 and len(shape) == 3) for dtype, shape in saved), saved


def test_forward_and_backward_never_build_full_fp32_logits():
    from torch.utils._python_dispatch import TorchDispatchMode

    n, t, v = 6, 5, 40
    logits = torch.randn(n, t, v).to(torch.bfloat16).requires_grad_(True)
    tokens = torch.randint(0, 40, (n, t))
    biggest = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for o in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(o, torch.Tensor) and o.dtype == torch.float32:
                    biggest.append(o.numel())
            return out

    with Watch():
        lp = token_logprobs(logits, tokens, chunk_size=2)
        lp.sum().backward()
        token_entropy(logits, chunk_size=2)
    assert max(biggest) <= 2 * t * v  # one chunk of rows at a time
