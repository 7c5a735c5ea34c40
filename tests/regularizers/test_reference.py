"""Reference strategies (static, ema, vapr) driven through their hooks as the RL loop calls them."""

import pytest
import torch
from torch import nn

from harness.policy.snapshots import SnapshotStore
from regularizers import build_reference


def _one_param_model(value=0.0):
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(value)
    return model


def _set(model, value):
    with torch.no_grad():
        model.weight.fill_(value)


def _snap(store, name):
    return store.state_dict()["snapshots"][name]["weight"].item()


def test_on_start_takes_ref_and_old():
    model = _one_param_model(1.0)
    store = SnapshotStore(model)
    build_reference("static").on_start(store)
    assert store.names() == ["ref", "old"]
    assert store.equal_to_live("ref") and store.equal_to_live("old")


def test_static_never_changes_and_ema_rate_zero_equals_static():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    stores = {name: SnapshotStore(model) for name in ("static", "ema")}
    strategies = {"static": build_reference("static"), "ema": build_reference("ema", ema_rate=0.0, ema_period=1)}
    for name in stores:
        strategies[name].on_start(stores[name])
    ref0 = {k: v.clone() for k, v in stores["static"].state_dict()["snapshots"]["ref"].items()}
    for step in range(1, 51):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        for name in stores:
            strategies[name].after_step(stores[name], step)
    for name in stores:
        ref = stores[name].state_dict()["snapshots"]["ref"]
        assert all(torch.equal(ref[k], v) for k, v in ref0.items()), name


def test_ema_rate_and_period_math():
    model = _one_param_model(0.0)
    store = SnapshotStore(model, dtype=torch.float64)
    ema = build_reference("ema", ema_rate=0.5, ema_period=2)
    ema.on_start(store)  # ref = 0
    _set(model, 1.0)
    assert ema.after_step(store, 1) == {}  # step 1: not a multiple of 2
    assert _snap(store, "ref") == 0.0
    assert ema.after_step(store, 2) == {"ref_updated": True}  # ref = 0.5 * 0 + 0.5 * 1
    assert _snap(store, "ref") == pytest.approx(0.5)
    _set(model, 3.0)
    ema.after_step(store, 3)
    assert _snap(store, "ref") == pytest.approx(0.5)
    ema.after_step(store, 4)  # 0.5 * 0.5 + 0.5 * 3
    assert _snap(store, "ref") == pytest.approx(1.75)
    assert _snap(store, "old") == 0.0  # EMA touches only the reference
    with pytest.raises(ValueError):
        build_reference("ema", ema_rate=-0.1)
    with pytest.raises(ValueError):
        build_reference("ema", ema_period=0)


def test_vapr_resets_to_the_loops_best_at_epoch_m():
    from harness.grpo.selection import BestTracker

    model = _one_param_model(0.0)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.0)
    store = SnapshotStore(model)
    vapr = build_reference("vapr", reset_every_epochs=3)
    best = BestTracker()
    assert vapr.val_every_steps is None
    vapr.on_start(store)
    assert not best.observe(store, 0.9, step=0, epoch=0)  # the starting policy is no candidate by default

    def train_epoch(value):
        opt.zero_grad()
        model(torch.ones(1, 1)).sum().backward()
        opt.step()
        _set(model, value)  # pin the live weight to a known value for this epoch
        store.capture("old")

    events, improved = [], []
    for epoch, (value, score) in enumerate([(1.0, 0.1), (2.0, 0.3), (3.0, 0.2)], start=1):
        train_epoch(value)
        assert len(opt.state) == 1
        improved.append(best.observe(store, score, step=10 * epoch, epoch=epoch))
        events.append(vapr.after_validation(store, opt, epoch, step=10 * epoch))

    assert improved == [True, True, False]
    assert [e["reset"] for e in events] == [False, False, True]
    assert (best.score, best.epoch, best.step) == (0.3, 2, 20) and vapr.num_resets == 1
    # live == best == ref == old, and the optimizer has forgotten its moments
    assert model.weight.item() == 2.0
    for name in ("best", "ref", "old"):
        assert store.equal_to_live(name), name
    assert len(opt.state) == 0


def test_vapr_never_resets_after_the_last_validation_or_mid_epoch():
    model = _one_param_model(0.0)
    store = SnapshotStore(model)
    vapr = build_reference("vapr", reset_every_epochs=1, val_every_steps=5)
    vapr.on_start(store)
    assert not vapr.after_validation(store, None, epoch=1, step=5)["reset"]  # no best yet: nothing to reset to
    store.capture("best")
    _set(model, 4.0)
    assert not vapr.after_validation(store, None, epoch=1, step=5, end_of_epoch=False)["reset"]
    # the last validation: no training follows, so no reset (rl.select decides what is saved)
    assert not vapr.after_validation(store, None, epoch=1, step=10, final=True)["reset"]
    assert model.weight.item() == 4.0
    assert vapr.after_validation(store, None, epoch=1, step=10)["reset"] and model.weight.item() == 0.0
    # epoch 0 (a validation before training) never resets
    assert not vapr.after_validation(store, None, epoch=0, step=0)["reset"]


def test_best_tracker_rules():
    from harness.grpo.selection import BestTracker

    model = _one_param_model(0.0)
    store = SnapshotStore(model)
    best = BestTracker(include_start=True)
    assert best.observe(store, 0.2, step=0, epoch=0)  # with include_start the start may be best
    _set(model, 1.0)
    assert not best.observe(store, float("nan"), step=3, epoch=1)  # NaN is never best
    assert not best.observe(store, 0.2, step=3, epoch=1)  # a tie keeps the earlier policy
    assert not best.observe(store, 0.9, step=4, epoch=1.5, candidate=False)  # a cut run's last validation
    assert _snap(store, "best") == 0.0
    assert best.observe(store, 0.5, step=6, epoch=2) and _snap(store, "best") == 1.0
    fresh = BestTracker()
    fresh.load_state_dict(best.state_dict())
    assert fresh.state_dict() == {"score": 0.5, "step": 6, "epoch": 2}


def test_vapr_state_round_trip():
    model = _one_param_model(0.0)
    store = SnapshotStore(model)
    vapr = build_reference("vapr", reset_every_epochs=2)
    vapr.on_start(store)
    store.capture("best")
    vapr.after_validation(store, None, epoch=1, step=3)
    vapr.after_validation(store, None, epoch=2, step=6)
    fresh = build_reference("vapr", reset_every_epochs=2)
    fresh.load_state_dict(vapr.state_dict())
    assert fresh.state_dict() == vapr.state_dict() == {"num_resets": 1}
    assert fresh.log_stats() == {"vapr_num_resets": 1.0}
    with pytest.raises(ValueError):
        build_reference("vapr", reset_every_epochs=0)


def test_stateless_strategies_round_trip():
    for name in ("static", "ema"):
        strategy = build_reference(name)
        strategy.load_state_dict(strategy.state_dict())
        with pytest.raises(ValueError):
            strategy.load_state_dict({"x": 1})
