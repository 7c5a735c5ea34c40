"""The token-weighter registry (rl.token_weighting; DiTPO, issue 24 item 4) and DiTPO's reward."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from harness.config import ConfigError, RLConfig
from harness.token_weighting.gradient import GradientWeighting
from harness.token_weighting.registry import (
    _REGISTRY,
    TokenWeighting,
    available_token_weightings,
    build_token_weighting,
    register_token_weighting,
)
from harness.token_weighting.tfidf import TfidfWeighting
from rewards.spec import compute_reward


def test_builtin_weighters_registered_and_built_from_the_rl_config():
    assert {"none", "gradient", "tfidf"} <= set(available_token_weightings())
    assert build_token_weighting(RLConfig(token_weighting="none"), None, []) is None
    g = build_token_weighting(RLConfig(token_weighting="gradient", token_weight_max=3.0), None, ["a b"])
    assert isinstance(g, GradientWeighting) and g.token_weight_max == 3.0
    t = build_token_weighting(RLConfig(token_weighting="tfidf", token_weight_boost=4.0), None, ["a b", "a"])
    assert isinstance(t, TfidfWeighting) and t.token_weight_boost == 4.0 and t.idf["a"] == 1.0


def test_a_registered_weighter_is_one_class(monkeypatch):
    monkeypatch.setattr(_REGISTRY, "entries", dict(_REGISTRY.entries))

    @register_token_weighting("uniform_test")
    @dataclass
    class Uniform(TokenWeighting):
        token_weight_boost: float = 1.0

        def weights(self, model, rollout):
            return rollout.response_mask.float()

    assert "uniform_test" in available_token_weightings()
    w = build_token_weighting(RLConfig(token_weighting="uniform_test", token_weight_boost=5.0), None, [])
    assert isinstance(w, Uniform) and w.token_weight_boost == 5.0


def test_unknown_weighter_is_a_config_error_listing_the_registered_ones():
    from harness.config import load_config

    with pytest.raises(ConfigError, match="rl.token_weighting.*registered: .*gradient"):
        load_config(None, ["rl.token_weighting=gradients"])


def test_diagnostic_f1_is_the_per_report_f1_of_binarised_labels():
    refs = ["mild cardiomegaly . small right pleural effusion .", "no acute cardiopulmonary process ."]
    cands = ["mild cardiomegaly . no pleural effusion .", "no acute cardiopulmonary process ."]
    r = compute_reward("diagnostic_f1", cands, refs)
    # Report 1: reference positives {cardiomegaly, effusion}, candidate {cardiomegaly}: F1 = 2 / (2 + 0 + 1).
    np.testing.assert_allclose(r, [2 / 3, 1.0])
    np.testing.assert_array_equal(r, compute_reward("chexpert_f1", cands, refs))
