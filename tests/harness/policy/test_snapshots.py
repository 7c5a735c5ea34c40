"""SnapshotStore: exact swaps, frozen parameters left alone, EMA, checkpoints, optimizer reset."""

import pytest
import torch
from torch import nn

from harness.policy.snapshots import SnapshotStore, reset_optimizer_state


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.base = nn.Linear(4, 4)  # frozen "base model"
        self.head = nn.Linear(4, 2)  # trainable
        self.lora = nn.Parameter(torch.zeros(4))  # trainable
        for p in self.base.parameters():
            p.requires_grad_(False)

    def forward(self, x):
        return self.head(self.base(x) + self.lora)


def _perturb(model, scale=1.0):
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * scale)


def _live(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_only_trainable_params_are_stored():
    torch.manual_seed(0)
    model = Small()
    store = SnapshotStore(model)
    assert store.param_names() == ["lora", "head.weight", "head.bias"]  # named_parameters() order
    store.capture("ref")
    assert set(store.state_dict()["snapshots"]["ref"]) == {"head.weight", "head.bias", "lora"}
    assert store.num_bytes() == (8 + 2 + 4) * 4


def test_capture_restore_and_use_are_exact():
    torch.manual_seed(0)
    model = Small()
    x = torch.randn(3, 4)
    params_before = [id(p) for p in model.parameters()]
    store = SnapshotStore(model)
    store.capture("ref")
    out_ref = model(x)
    frozen = model.base.weight.detach().clone()
    _perturb(model)
    live = _live(model)
    assert not store.equal_to_live("ref")
    with store.use("ref"):
        torch.testing.assert_close(model(x), out_ref, rtol=0, atol=0)
    for n, p in model.named_parameters():
        assert torch.equal(p, live[n]), n  # live values back bit for bit
    assert torch.equal(model.base.weight, frozen)
    # the body raising still puts the live values back
    with pytest.raises(RuntimeError), store.use("ref"):
        raise RuntimeError("boom")
    assert all(torch.equal(p, live[n]) for n, p in model.named_parameters())
    store.restore("ref")
    assert store.equal_to_live("ref")
    assert [id(p) for p in model.parameters()] == params_before  # in place, no new Parameters
    torch.testing.assert_close(model(x), out_ref, rtol=0, atol=0)
    assert torch.equal(model.base.weight, frozen)


def test_use_nests():
    torch.manual_seed(1)
    model = Small()
    store = SnapshotStore(model)
    store.capture("a")
    _perturb(model)
    store.capture("b")
    _perturb(model)
    live = _live(model)
    with store.use("a"):
        assert store.equal_to_live("a")
        with store.use("b"):
            assert store.equal_to_live("b")
        assert store.equal_to_live("a")
    assert all(torch.equal(p, live[n]) for n, p in model.named_parameters())


def test_ema_rate_zero_and_one_and_copy():
    torch.manual_seed(2)
    model = Small()
    store = SnapshotStore(model)
    store.capture("ref")
    ref0 = {k: v.clone() for k, v in store.state_dict()["snapshots"]["ref"].items()}
    _perturb(model)
    store.ema_("ref", 0.0)
    assert all(torch.equal(store.state_dict()["snapshots"]["ref"][k], v) for k, v in ref0.items())
    store.ema_("ref", 1.0)
    assert store.equal_to_live("ref")
    store.copy("ref", "best")
    assert store.equal_to_live("best") and store.names() == ["ref", "best"]
    with pytest.raises(ValueError):
        store.ema_("ref", 1.5)
    with pytest.raises(KeyError, match="nope"):
        store.restore("nope")


def test_ema_math_one_parameter():
    model = nn.Linear(1, 1, bias=False)
    store = SnapshotStore(model, dtype=torch.float64)
    with torch.no_grad():
        model.weight.fill_(0.0)
    store.capture("ref")
    with torch.no_grad():
        model.weight.fill_(1.0)
    store.ema_("ref", 0.25)
    assert store.state_dict()["snapshots"]["ref"]["weight"].item() == pytest.approx(0.25)
    store.capture("other")
    store.ema_("ref", 0.5, source="other")
    assert store.state_dict()["snapshots"]["ref"]["weight"].item() == pytest.approx(0.625)


def test_state_dict_round_trip():
    torch.manual_seed(3)
    model = Small()
    store = SnapshotStore(model)
    store.capture("ref")
    _perturb(model)
    store.capture("old")
    state = store.state_dict()
    other = SnapshotStore(model)
    other.load_state_dict(state)
    assert other.names() == ["ref", "old"] and other.equal_to_live("old") and not other.equal_to_live("ref")
    other.restore("ref")
    assert store.equal_to_live("ref")
    bad = {"snapshots": {"ref": {"head.weight": torch.zeros(2, 4)}}}
    with pytest.raises(ValueError, match="missing"):
        other.load_state_dict(bad)


def _step(model, opt, x):
    opt.zero_grad()
    model(x).pow(2).sum().backward()
    opt.step()


def test_restore_plus_optimizer_reset_really_holds():
    torch.manual_seed(4)
    model = Small().double()
    lr = 1e-3
    opt = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0, eps=1e-12
    )
    store = SnapshotStore(model)
    store.capture("best")
    for _ in range(5):  # build up moments that point elsewhere
        _step(model, opt, torch.randn(8, 4, dtype=torch.float64))
    store.restore("best")
    assert reset_optimizer_state(opt, store.parameters()) == 3
    assert len(opt.state) == 0
    best = {k: v.clone() for k, v in store.state_dict()["snapshots"]["best"].items()}
    _step(model, opt, torch.randn(8, 4, dtype=torch.float64))
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        delta = (p.detach() - best[n]).abs()
        nonzero = p.grad != 0
        # a fresh Adam step moves each coordinate by lr * |g| / (|g| + eps) = lr
        torch.testing.assert_close(delta[nonzero], torch.full_like(delta[nonzero], lr), rtol=1e-6, atol=0)
        assert (delta[~nonzero] == 0).all()


def test_without_reset_the_step_is_not_fresh():
    torch.manual_seed(4)
    model = Small().double()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3, weight_decay=0.0)
    store = SnapshotStore(model)
    store.capture("best")
    for _ in range(5):
        _step(model, opt, torch.randn(8, 4, dtype=torch.float64))
    store.restore("best")
    _step(model, opt, torch.randn(8, 4, dtype=torch.float64))
    delta = (model.head.weight.detach() - store.state_dict()["snapshots"]["best"]["head.weight"]).abs()
    assert not torch.allclose(delta, torch.full_like(delta, 1e-3), rtol=1e-3)


def test_master_sync_hooks_are_called():
    calls = []
    model = Small()
    store = SnapshotStore(model, master_sync=lambda: calls.append("store"))
    store.capture("ref")
    store.restore("ref")
    opt = torch.optim.AdamW(store.parameters())
    reset_optimizer_state(opt, master_sync=lambda: calls.append("opt"))
    assert calls == ["store", "opt"]


def test_reset_only_selected_params():
    model = Small()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    _step(model, opt, torch.randn(2, 4))
    assert reset_optimizer_state(opt, [model.lora]) == 1
    assert model.lora not in opt.state and model.head.weight in opt.state


def test_model_without_trainable_params_is_an_error():
    model = nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(ValueError, match="trainable"):
        SnapshotStore(model)
