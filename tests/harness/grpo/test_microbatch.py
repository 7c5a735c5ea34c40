"""RL micro-batches (rl.micro_batch_size): the micro-batched step gives the one-batch gradient."""

from __future__ import annotations

import pytest
import torch

from harness.config import ConfigError, RunConfig, validate
from harness.grpo.core import AGGREGATIONS, aggregate, aggregation_weights, policy_loss
from harness.grpo.rollout import concat_rollouts, response_logits, sample_rollout
from harness.grpo.trainer import PromptSet
from tests.harness.grpo.test_trainer import _fresh_copy, _trainer


def _random_mask(gen, n, t):
    mask = (torch.rand(n, t, generator=gen) < 0.7).double()
    mask[1] = 0.0  # a response without tokens
    mask[6:9] = 0.0  # and a whole group without tokens (G = 3: rows 6-8)
    return mask


@pytest.mark.parametrize("mode", AGGREGATIONS)
@pytest.mark.parametrize("seed", range(5))
def test_aggregation_weights_reproduce_aggregate(mode, seed):
    gen = torch.Generator().manual_seed(seed)
    n, t = 12, 1 + seed * 3
    x, mask = torch.randn(n, t, generator=gen, dtype=torch.float64), _random_mask(gen, n, t)
    w = aggregation_weights(mask, mode, group_size=3, max_len=t + 2)
    assert torch.equal(w == 0, mask == 0) or mode == "dr_grpo"
    torch.testing.assert_close((w * x).sum(), aggregate(x, mask, mode, group_size=3, max_len=t + 2),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", AGGREGATIONS)
@pytest.mark.parametrize("cuts", [(4,), (1, 5, 7), (2, 3, 10, 11)])
def test_micro_batch_losses_add_up_to_the_step_loss_and_gradient(mode, cuts):
    # Cuts split groups (G = 3): the normalisers must still be those of the whole step. Per-token advantages
    # (DiTPO weighting) and the entropy bonus with its gradient are on.
    gen = torch.Generator().manual_seed(7)
    n, t = 12, 5
    logp = (-torch.rand(n, t, generator=gen, dtype=torch.float64) * 3).requires_grad_()
    ent = (torch.rand(n, t, generator=gen, dtype=torch.float64) * 2).requires_grad_()
    old = logp.detach() + 0.1 * torch.randn(n, t, generator=gen, dtype=torch.float64)
    ref = logp.detach() + 0.2 * torch.randn(n, t, generator=gen, dtype=torch.float64)
    adv = torch.randn(n, t, generator=gen, dtype=torch.float64)
    beta = torch.rand(n, generator=gen, dtype=torch.float64) / 7
    mask = _random_mask(gen, n, t)
    kw = dict(aggregation=mode, group_size=3, max_len=t + 1, entropy_coef=0.013)
    whole, _ = policy_loss(logp, old, ref, adv, beta, mask, entropy=ent, **kw)
    g_whole = torch.autograd.grad(whole, [logp, ent])
    w = aggregation_weights(mask, mode, group_size=3, max_len=t + 1)
    total = 0.0
    bounds = (0, *cuts, n)
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        part, _ = policy_loss(logp[a:b], old[a:b], ref[a:b], adv[a:b], beta[a:b], mask[a:b], entropy=ent[a:b],
                              token_weights=w[a:b], **kw)
        total = total + part
    g_parts = torch.autograd.grad(total, [logp, ent])
    torch.testing.assert_close(total, whole, rtol=1e-12, atol=1e-12)
    for a, b in zip(g_parts, g_whole, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_token_weights_of_the_wrong_shape_are_refused():
    x = torch.zeros(4, 3)
    with pytest.raises(ValueError, match="token_weights"):
        policy_loss(x, x, None, torch.zeros(4), torch.zeros(4), torch.ones(4, 3), token_weights=torch.ones(4, 2))


# -- the trainer -------------------------------------------------------------------------------------------------
@pytest.fixture
def six_prompts(xray_images):
    refs = ["the heart size is normal .", "mild cardiomegaly . small left pleural effusion ."]
    return PromptSet([f"s{i}" for i in range(4)], [[xray_images[i], xray_images[(i + 1) % 4]] for i in range(4)],
                     ["write", "write the findings", "write", "write the report"], [refs[i % 2] for i in range(4)])


def _rollout_of(tr, idx=(0, 1)):
    tr.store.capture("old")
    ro = tr._rollout(list(idx))
    # The tiny random model rarely ends early: cut the responses to different lengths, so normalisers matter.
    width = ro.response_mask.shape[1]
    for i in range(len(ro)):
        ro.response_mask[i, 2 + i % (width - 2):] = 0
    return ro


def _step_grads(tr, ro, perturb: bool):
    """Gradients (before clipping and the optimizer) and the logged row of one step on the rollout `ro`."""
    tr.reference.on_start(tr.store)
    tr.store.capture("old")
    if perturb:  # old and ref differ from the live policy: their own (micro-batched) frozen passes
        with torch.no_grad():
            for i, p in enumerate(tr.params):
                p.add_(0.05 * torch.sin(torch.arange(p.numel(), dtype=p.dtype) + i).view_as(p))
    tr._rollout = lambda _idx: ro
    seen = {}
    tr.optimizer.register_step_pre_hook(
        lambda *_: seen.__setitem__("grads", [p.grad.detach().clone() for p in tr.params]))
    tr.tcfg.grad_clip = 0.0
    return seen, tr.train_step()


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("perturb", [False, True])
def test_micro_batched_step_equals_the_one_batch_step(aggregation, perturb, tiny_model, tiny_processor, tmp_path,
                                                      six_prompts):
    kw = dict(regularizer="rer", entropy_coef=0.01, token_weighting="tfidf", group_size=3, aggregation=aggregation,
              advantage_scale="none" if aggregation == "dr_grpo" else "std")
    base = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / "ro", six_prompts, **kw)
    ro = _rollout_of(base)
    assert ro.lengths.unique().numel() > 1  # responses of different lengths: the normalisers matter
    results = {}
    for mbs in (None, 2, 4):
        tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / str(mbs), six_prompts,
                      micro_batch_size=mbs, **kw)
        results[mbs] = _step_grads(tr, ro, perturb)
    (g1, row1) = results[None]
    assert any(g.abs().sum() > 0 for g in g1["grads"])
    for mbs in (2, 4):
        g, row = results[mbs]
        for a, b in zip(g["grads"], g1["grads"], strict=True):
            torch.testing.assert_close(a, b, rtol=2e-4, atol=1e-7)
        for key in ("loss", "pg_loss", "kl_loss", "entropy_loss", "kl_mean", "beta_mean", "ratio_mean",
                    "ref_entropy_mean", "entropy_mean"):
            assert row[key] == pytest.approx(row1[key], rel=1e-4, abs=1e-7), key


def test_gradient_token_weighting_and_dropped_groups_micro_batched(tiny_model, tiny_processor, tmp_path,
                                                                   six_prompts):
    kw = dict(regularizer="constant", token_weighting="gradient", group_size=3, zero_std_groups="drop",
              aggregation="group_token_mean")
    base = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / "ro", six_prompts, **kw)
    ro = _rollout_of(base)
    out = {}
    for mbs in (None, 1):
        tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / str(mbs), six_prompts,
                      micro_batch_size=mbs, **kw)
        out[mbs] = _step_grads(tr, ro, perturb=True)
    for a, b in zip(out[1][0]["grads"], out[None][0]["grads"], strict=True):
        torch.testing.assert_close(a, b, rtol=2e-4, atol=1e-7)
    assert out[1][1]["token_weight_max"] == pytest.approx(out[None][1]["token_weight_max"], rel=1e-5)


def test_frozen_passes_never_swap_parameters_under_a_live_graph(tiny_model, tiny_processor, tmp_path, six_prompts,
                                                                 monkeypatch):
    from harness.grpo import passes as passes_module  # the logits function is chosen there (issue 47)

    events = []
    real = passes_module.response_logits
    monkeypatch.setattr(passes_module, "response_logits", lambda m, ro, *memo: events.append(
        ("fwd", torch.is_grad_enabled(), len(ro))) or real(m, ro, *memo))
    for perturb, expected in ((False, [("fwd", False, 2)] * 3 + [("fwd", True, 2)] * 3),  # RER h_ref pass, no swap
                              (True, [("swap",)] + [("fwd", False, 2)] * 3 + [("swap",)] + [("fwd", False, 2)] * 3
                               + [("fwd", True, 2)] * 3)):
        tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / str(perturb), six_prompts, regularizer="rer",
                      group_size=3, micro_batch_size=2)
        ro = _rollout_of(tr)
        real_use = tr.store.use
        monkeypatch.setattr(tr.store, "use", lambda name, real_use=real_use: events.append(("swap",)) or real_use(name))
        events.clear()
        _step_grads(tr, ro, perturb)
        assert events == expected


def test_rollouts_in_prompt_micro_batches_concatenate_exactly(tiny_model, tiny_processor, six_prompts):
    # Prompts of different lengths and two views each: the concatenated rollout re-pads prompts and responses,
    # and cutting rows back out (with their images' patches) gives each row the logits it had alone.
    kw = dict(group_size=2, temperature=1.0, top_p=1.0, top_k=0, min_new_tokens=1, repetition_penalty=1.0)
    torch.manual_seed(0)
    parts = [sample_rollout(tiny_model, tiny_processor, six_prompts.images[i:i + 1], six_prompts.instructions[i:i + 1],
                            max_new_tokens=3 + 2 * i, **kw) for i in range(2)]
    assert parts[0].prompt_len != parts[1].prompt_len
    ro = concat_rollouts(parts, tiny_processor.tokenizer.pad_token_id)
    assert len(ro) == 4 and ro.images_per_row == [2, 2, 2, 2] and ro.texts == parts[0].texts + parts[1].texts
    for k, part in enumerate(parts):
        rows = ro.rows(2 * k, 2 * k + 2)
        torch.testing.assert_close(rows.pixel_values, part.pixel_values, rtol=0, atol=0)
        with torch.no_grad():
            alone, together = response_logits(tiny_model, part), response_logits(tiny_model, rows)
        width = part.response_mask.shape[1]
        m = part.response_mask.bool()
        assert torch.equal(rows.responses[:, :width][m], part.responses[m])
        torch.testing.assert_close(together[:, :width][m], alone[m], rtol=1e-5, atol=1e-5)


def test_rl_micro_batch_options_are_range_checked():
    for key, value in (("micro_batch_size", 0), ("max_nonfinite_steps", 0)):
        cfg = RunConfig()
        setattr(cfg.rl, key, value)
        with pytest.raises(ConfigError, match=f"rl.{key}"):
            validate(cfg)
