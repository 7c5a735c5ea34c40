"""The regularizer registry, none/constant/adaptive, and state round-trips."""

from dataclasses import dataclass

import pytest
import torch

from harness.config import load_config
from regularizers import (
    REFERENCES,
    REGULARIZERS,
    ReferenceStrategy,
    Regularizer,
    available_references,
    available_regularizers,
    build_regularizer,
    register_reference,
    register_regularizer,
)
from regularizers.adaptive import adaptive_beta_update
from regularizers.registry import regularizer_from_config


def test_registry_names():
    # the built-ins, plus any a test file registers (tests/regularizers/test_plugin.py: names start with test_)
    assert [n for n in available_regularizers() if not n.startswith("test_")] == ["adaptive", "constant", "none",
                                                                                    "rer"]
    assert [n for n in available_references() if not n.startswith("test_")] == ["ema", "static", "vapr"]


def test_unknown_name_and_option_errors():
    with pytest.raises(ValueError, match="unknown regularizer 'nope'.*available"):
        build_regularizer("nope")
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['beta_max'\].*beta_base"):
        build_regularizer("constant", beta_max=0.2)


def test_register_requires_subclass_and_unique_name():
    with pytest.raises(TypeError):
        register_regularizer("bad")(object)
    with pytest.raises(ValueError, match="already registered"):

        @register_regularizer("constant")
        class Other(Regularizer):
            pass


@pytest.mark.parametrize("kind", ["regularizer", "reference strategy"])
def test_a_plugin_class_with_config_fields_but_no_dataclass_is_refused(kind):
    # Without @dataclass `beta_base` / `period` are no fields: the builders would pass the class no config values,
    # so rl.beta_base=0.05 would be dropped silently and the class default 0.1 used. Registration refuses it.
    class NoDataclassKL(Regularizer):
        beta_base: float = 0.1

        def betas(self, advantages, h_ref=None):
            return torch.full_like(advantages, self.beta_base)

    class NoDataclassRef(ReferenceStrategy):
        period: int = 50

    cls, register, table, available = {
        "regularizer": (NoDataclassKL, register_regularizer, REGULARIZERS, available_regularizers),
        "reference strategy": (NoDataclassRef, register_reference, REFERENCES, available_references)}[kind]
    field = next(iter(cls.__annotations__))
    decorator = register.__name__
    try:
        with pytest.raises(TypeError) as err:
            register("test_no_dataclass")(cls)
    finally:
        table.pop("test_no_dataclass", None)  # (registered only if the refusal is missing)
    message = str(err.value)
    for part in (f"{kind} 'test_no_dataclass'", cls.__qualname__, f"(module {__name__})", f"[{field!r}]",
                 "is not a dataclass", "silently ignored", f"add @dataclass to {cls.__qualname__}, directly under "
                 f"@{decorator}('test_no_dataclass')"):
        assert part in message, (part, message)
    assert "test_no_dataclass" not in available()


def test_a_dataclass_plugin_gets_its_config_fields():
    @register_regularizer("test_dataclass_kl")
    @dataclass
    class DataclassKL(Regularizer):
        beta_base: float = 0.1

        def betas(self, advantages, h_ref=None):
            return torch.full_like(advantages, self.beta_base)

    try:
        rl = load_config(None, ["rl.regularizer=test_dataclass_kl", "rl.beta_base=0.05"]).rl
        assert regularizer_from_config(rl).beta_base == 0.05
    finally:
        REGULARIZERS.pop("test_dataclass_kl")


def test_none_and_constant():
    A = torch.randn(2, 4)
    none = build_regularizer("none")
    assert none.needs_reference is False and none.needs_reference_entropy is False
    assert torch.equal(none.betas(A), torch.zeros(2, 4))
    const = build_regularizer("constant", beta_base=0.04)
    assert const.needs_reference is True and const.needs_reference_entropy is False
    assert torch.equal(const.betas(A, None), torch.full((2, 4), 0.04))
    with pytest.raises(ValueError):
        build_regularizer("constant", beta_base=-1.0)


def test_adaptive_three_steps_hand_computed():
    reg = build_regularizer("adaptive", beta_base=0.1, kl_target=0.05, kl_horizon=100)
    assert reg.needs_reference and not reg.needs_reference_entropy
    # step 1: KL 0.06 -> e = 0.06/0.05 - 1 = 0.2, n = 10 -> beta = 0.1 * (1 + 0.2*10/100) = 0.102
    reg.after_step(0.06, 10)
    assert reg.beta == pytest.approx(0.102)
    # step 2: KL 0.5 -> e = 9 clipped to 0.2, n = 20 -> 0.102 * 1.04 = 0.10608
    reg.after_step(0.5, 20)
    assert reg.beta == pytest.approx(0.10608)
    # step 3: KL 0.0 -> e = -1 clipped to -0.2, n = 50 -> 0.10608 * 0.9 = 0.095472
    reg.after_step(0.0, 50)
    assert reg.beta == pytest.approx(0.095472)
    assert torch.allclose(reg.betas(torch.zeros(1, 3)), torch.full((1, 3), 0.095472))
    assert reg.log_stats() == pytest.approx({"kl_ctl_error": -0.2})
    # inside the clip: e = 0.045/0.05 - 1 = -0.1 -> 1.0 * (1 - 0.1*10/100)
    assert adaptive_beta_update(1.0, 0.045, 0.05, 10, 100)[0] == pytest.approx(0.99)


def test_adaptive_state_round_trip():
    reg = build_regularizer("adaptive", beta_base=0.2, kl_target=0.01, kl_horizon=1000)
    for kl in (0.02, 0.005, 0.03):
        reg.after_step(kl, 32)
    state = reg.state_dict()
    fresh = build_regularizer("adaptive", beta_base=0.2, kl_target=0.01, kl_horizon=1000)
    assert fresh.beta == 0.2
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state and fresh.beta == reg.beta
    reg.after_step(0.02, 32)
    fresh.after_step(0.02, 32)
    assert fresh.beta == reg.beta


def test_adaptive_validation():
    with pytest.raises(ValueError, match="kl_target"):
        build_regularizer("adaptive", kl_target=0.0)
    with pytest.raises(ValueError, match="kl_horizon"):
        build_regularizer("adaptive", kl_horizon=0)


def test_adaptive_beta_never_turns_negative():
    # e = -0.2 (KL far below target) with n / horizon = 6: 1 - 0.2 * 6 < 0 would flip beta's sign.
    reg = build_regularizer("adaptive", beta_base=0.1, kl_target=0.05, kl_horizon=5)
    with pytest.raises(ValueError, match="kl_horizon must exceed"):
        reg.after_step(0.0, 30)
    assert reg.beta == 0.1
    with pytest.raises(ValueError, match="kl_mean"):
        reg.after_step(None, 30)


def test_adaptive_default_target_is_the_config_default():
    from harness.config import RLConfig

    reg, rl = build_regularizer("adaptive"), RLConfig()
    assert (reg.beta_base, reg.kl_target, reg.kl_horizon) == (rl.beta_base, rl.kl_target, rl.kl_horizon)


def test_stateless_regularizers_round_trip():
    for name in ("none", "constant", "rer"):
        reg = build_regularizer(name)
        reg.load_state_dict(reg.state_dict())
        assert reg.log_stats() == {}
