"""The KL choices of issue 45 that no library defines as a loss function: KL in the reward (verl's formula written
out by hand here), the advantage std, the k3 cap, and their config checks; and the trainer's reward placement.
(TRL-expressible settings are compared with TRL's own code: test_trl_equality.py.)"""

from __future__ import annotations

import json

import pytest
import torch

from harness.config import ConfigError, RunConfig, validate
from harness.grpo.core import group_advantages, kl_penalty, policy_loss
from harness.grpo.kl_reward import kl_shaped_rewards, response_kl
from tests.harness.grpo.test_microbatch import _rollout_of, six_prompts  # noqa: F401 - fixture
from tests.harness.grpo.test_trainer import _fresh_copy, _trainer


def _verl_grpo_advantages(scores, logp_old, logp_ref, mask, beta, group_size, kl_penalty_name="kl", eps=1e-6):
    """verl, written out from its documented definition: apply_kl_penalty (ray_trainer.py) puts
    token_level_rewards = token_level_scores - beta * kld, kld = kl_penalty(old_log_probs, ref_log_prob) * mask, with
    the score on the response's last token; compute_grpo_outcome_advantage sums the token-level rewards per response
    and normalises per group by torch.std (Bessel) + eps."""
    n, t = logp_old.shape
    if kl_penalty_name == "kl":  # k1
        kld = logp_old - logp_ref
    else:  # "mse": k2
        kld = 0.5 * (logp_old - logp_ref) ** 2
    kld = kld * mask
    token_scores = torch.zeros(n, t, dtype=logp_old.dtype)
    for i in range(n):
        last = int(mask[i].sum()) - 1
        if last >= 0:
            token_scores[i, last] = scores[i]
    seq = (token_scores - beta.unsqueeze(1) * kld).sum(-1)
    adv = torch.empty(n, dtype=logp_old.dtype)
    for g0 in range(0, n, group_size):
        grp = seq[g0:g0 + group_size]
        adv[g0:g0 + group_size] = (grp - grp.mean()) / (torch.std(grp) + eps)
    return adv


@pytest.mark.parametrize("estimator,verl_name", [("k1", "kl"), ("k2", "mse")])
def test_kl_in_reward_equals_verls_use_kl_in_reward(estimator, verl_name):
    g = torch.Generator().manual_seed(3)
    n, t, G = 8, 6, 4
    logp_old = -torch.rand(n, t, generator=g, dtype=torch.float64) * 3
    logp_ref = logp_old + 0.4 * torch.randn(n, t, generator=g, dtype=torch.float64)
    mask = (torch.arange(t) < torch.tensor([6, 3, 5, 1, 6, 2, 4, 6]).unsqueeze(1)).double()
    scores = torch.rand(n, generator=g, dtype=torch.float64)
    beta = torch.full((n,), 0.05, dtype=torch.float64)
    kl = response_kl(logp_old, logp_ref, mask, estimator, None, "sum")
    ours = group_advantages(kl_shaped_rewards(scores.view(-1, G), kl, beta), std="bessel").reshape(-1)
    theirs = _verl_grpo_advantages(scores, logp_old, logp_ref, mask, beta, G, verl_name)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    # ... and not what the population std gives (regbench's default): 1.155x at G = 4
    pop = group_advantages(kl_shaped_rewards(scores.view(-1, G), kl, beta)).reshape(-1)
    torch.testing.assert_close(pop, theirs * (4 / 3) ** 0.5, rtol=1e-5, atol=1e-9)


def test_kl_in_reward_mean_reduction_and_refusals():
    lp, ref = torch.tensor([[-1.0, -2.0, -3.0]]), torch.tensor([[-1.5, -2.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert float(response_kl(lp, ref, mask, "k1", None, "sum")) == pytest.approx(0.5)
    assert float(response_kl(lp, ref, mask, "k1", None, "mean")) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="k3_is"):
        response_kl(lp, ref, mask, "k3_is")
    with pytest.raises(ValueError, match="reduction"):
        response_kl(lp, ref, mask, "k1", reduce="max")


def test_bessel_advantages_are_trls():
    r = torch.tensor([[0.1, 0.5, 0.2, 0.9], [0.3, 0.3, 0.3, 0.3]])
    adv = group_advantages(r, std="bessel")
    want = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-6)  # torch's default std: Bessel
    torch.testing.assert_close(adv[0], want[0])
    assert torch.equal(adv[1], torch.zeros(4))  # equal rewards: exactly 0 either way
    torch.testing.assert_close(group_advantages(r)[0] / adv[0], torch.full((4,), (4 / 3) ** 0.5), rtol=1e-5, atol=0)


def test_kl_cap_none_and_k3_is_by_hand():
    lp, ref = torch.tensor([[-0.1]]), torch.tensor([[-4.0]])
    big = kl_penalty(ref, lp, "k3", cap=None)  # d = logp_ref - logp = 3.9: k3 = e^3.9 - 4.9 = 44.5
    assert float(big) == pytest.approx(2.718281828 ** 3.9 - 4.9, rel=1e-5)
    assert float(kl_penalty(ref, lp, "k3")) == 10.0  # the official cap
    ratio = torch.tensor([[1.3]])
    assert float(kl_penalty(ref, lp, "k3_is", cap=None, ratio=ratio)) == pytest.approx(1.3 * float(big))
    # the default policy_loss (cap 10, token ratios, clip surrogate) is unchanged by the new keywords
    gen = torch.Generator().manual_seed(0)
    logp = -torch.rand(4, 5, generator=gen) * 3
    old, ref4 = logp + 0.2 * torch.randn(4, 5, generator=gen), logp + 3 * torch.randn(4, 5, generator=gen)
    args = (logp, old, ref4, torch.randn(4, generator=gen), torch.full((4,), 0.1), torch.ones(4, 5))
    assert policy_loss(*args)[0] == policy_loss(*args, kl_cap=10.0, importance_sampling="token", surrogate="clip")[0]
    assert policy_loss(*args)[0] != policy_loss(*args, kl_cap=None)[0]


@pytest.mark.parametrize("override,key", [
    ({"kl_placement": "both"}, "rl.kl_placement"),
    ({"kl_placement": "reward", "kl_estimator": "k3_is"}, "rl.kl_estimator"),
    ({"kl_estimator": "k4"}, "rl.kl_estimator"),
    ({"kl_cap": 0.0}, "rl.kl_cap"),
    ({"advantage_std": "sample"}, "rl.advantage_std"),
    ({"importance_sampling": "group"}, "rl.importance_sampling"),
    ({"surrogate": "ppo"}, "rl.surrogate"),
    ({"surrogate": "cispo"}, "rl.dual_clip"),  # dual_clip 10 (the default) caps the clip surrogate only
    ({"surrogate": "sapo", "dual_clip": None, "sapo_tau_neg": 0.0}, "rl.sapo_tau_pos/sapo_tau_neg"),
    ({"kl_reward_reduce": "max"}, "rl.kl_reward_reduce"),
])
def test_bad_kl_choices_are_refused_naming_the_key(override, key):
    cfg = RunConfig()
    for k, v in override.items():
        setattr(cfg.rl, k, v)
    with pytest.raises(ConfigError, match=f"'{key}'"):
        validate(cfg)


def test_new_kl_choices_validate():
    cfg = RunConfig()
    for k, v in {"kl_placement": "reward", "kl_estimator": "k1", "kl_cap": None, "advantage_std": "bessel",
                 "importance_sampling": "sequence", "surrogate": "sapo", "dual_clip": None,
                 "aggregation": "seq_mean_token_mean_all"}.items():
        setattr(cfg.rl, k, v)
    validate(cfg)


# -- the trainer: KL in the reward ---------------------------------------------------------------------------------
def _perturb(tr, scale):
    with torch.no_grad():
        for i, p in enumerate(tr.params):
            p.add_(scale * torch.sin(torch.arange(p.numel(), dtype=p.dtype) * (1 + scale) + i).view_as(p))


def _step_with_three_policies(tr, ro):
    """One step on rollout `ro` with reference, old and current policy all different; (logged row, {"grads"})."""
    tr.reference.on_start(tr.store)  # ref = the start
    _perturb(tr, 0.05)
    tr.store.capture("old")
    _perturb(tr, 0.03)
    tr._rollout = lambda _idx: ro
    seen = {}
    tr.optimizer.register_step_pre_hook(
        lambda *_: seen.__setitem__("grads", [p.grad.detach().clone() for p in tr.params]))
    tr.tcfg.grad_clip = 0.0
    return tr.train_step(), seen


@pytest.mark.parametrize("regularizer", ["constant", "rer"])
def test_kl_in_reward_step(regularizer, tiny_model, tiny_processor, tmp_path, six_prompts):  # noqa: F811
    """A step with rl.kl_placement reward: no KL term in the loss, the logged KL is the old-vs-reference
    estimator, the advantages are those of the shaped rewards R - beta KL (samples.jsonl), and micro-batches give
    the one-batch gradient."""
    kw = dict(regularizer=regularizer, group_size=3, kl_placement="reward", kl_estimator="k1", beta_base=0.5,
              beta_max=0.6)
    base = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / "ro", six_prompts, **kw)
    ro = _rollout_of(base)
    results = {}
    for mbs in (None, 2):
        tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / str(mbs), six_prompts,
                      micro_batch_size=mbs, **kw)
        row, seen = _step_with_three_policies(tr, ro)
        results[mbs] = (seen["grads"], row, tr)
    (g1, row1, tr1), (g2, row2, _) = results[None], results[2]
    for a, b in zip(g2, g1, strict=True):
        torch.testing.assert_close(a, b, rtol=2e-4, atol=1e-7)
    assert row1["kl_loss"] == 0.0 and abs(row1["kl_mean"]) > 1e-6
    assert row2["kl_mean"] == pytest.approx(row1["kl_mean"], rel=1e-5)
    # The shaped rewards by hand: the old and reference passes of this rollout, k1 summed per response.
    with torch.no_grad():
        lp_old = tr1._frozen_pass("old", ro, [(0, len(ro))], False)[0]
        lp_ref = tr1._frozen_pass("ref", ro, [(0, len(ro))], False)[0]
    kl = ((lp_old - lp_ref) * ro.response_mask.float()).sum(-1)
    sample = json.loads((tr1.run.path / "samples.jsonl").read_text().splitlines()[-1])
    rewards, adv, betas = (torch.tensor(sample[k], dtype=torch.float32) for k in ("rewards", "advantages", "betas"))
    want = group_advantages(rewards - betas * kl.view_as(rewards))
    torch.testing.assert_close(adv, want, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(adv, group_advantages(rewards), atol=1e-3)  # the KL moved the advantages
    assert row1["kl_reward_mean"] == pytest.approx(float((betas * kl.view_as(betas)).mean()), rel=1e-4)
