"""rl.reward from the user's code (issue 25): package.module:function and weighted sums, checked when the config
loads with an error naming the function or the weight (the RL stage runs them: tests/harness/stages/
test_trackers_and_user_rewards.py)."""

from __future__ import annotations

import re
import sys
import textwrap

import numpy as np
import pytest

from harness.config import ConfigError, build_config, load_config
from rewards.spec import check_reward, compute_reward, reward_label

USER = '''
import numpy as np

NOT_A_FUNCTION = 3


def shared(candidates, references, **context):
    return np.array([len(set(c.split()) & set(r.split())) / max(len(set(r.split())), 1)
                     for c, r in zip(candidates, references)])


def two_args(candidates, references):
    return np.zeros(len(candidates))


def one_arg(candidates, **context):
    return np.zeros(len(candidates))


class Scorer:
    @staticmethod
    def score(candidates, references, **context):
        return np.ones(len(candidates))
'''
CANDS = ["no pleural effusion .", "mild cardiomegaly ."]
REFS = ["no pleural effusion or pneumothorax .", "the heart is normal ."]


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "user_rewards_mod.py").write_text(textwrap.dedent(USER))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("user_rewards_mod", None)


def test_a_function_by_module_path(user_module):
    import user_rewards_mod

    cfg = load_config(None, ["rl.reward=user_rewards_mod:shared"])
    assert cfg.rl.reward == "user_rewards_mod:shared"
    assert compute_reward(cfg.rl.reward, CANDS, REFS) == pytest.approx(user_rewards_mod.shared(CANDS, REFS))
    assert compute_reward("user_rewards_mod:Scorer.score", CANDS, REFS).tolist() == [1.0, 1.0]


def test_a_weighted_sum_of_registered_and_user_rewards(user_module):
    import user_rewards_mod

    from rewards.bleu import bleu4

    cfg = load_config(None, ["rl.reward={bleu4: 0.5, user_rewards_mod:shared: 0.25}"])
    assert cfg.rl.reward == {"bleu4": 0.5, "user_rewards_mod:shared": 0.25}
    expected = 0.5 * np.asarray(bleu4(CANDS, REFS)) + 0.25 * user_rewards_mod.shared(CANDS, REFS)
    assert compute_reward(cfg.rl.reward, CANDS, REFS) == pytest.approx(expected)
    assert reward_label(cfg.rl.reward) == "0.5*bleu4+0.25*user_rewards_mod:shared"


def test_a_weighted_sum_from_a_study_mapping_keeps_dotted_names(user_module):
    """A key with a colon is a name, not a section path (build_config expands `a.b: v` keys of studies)."""
    cfg = build_config({"rl": {"reward": {"user_rewards_mod:shared": 1.0}}, "rl.beta_base": 0.1})
    assert cfg.rl.reward == {"user_rewards_mod:shared": 1.0}


@pytest.mark.parametrize("spec, message", [
    ("user_rewards_mod:nope", "module 'user_rewards_mod' has no attribute 'nope'"),
    ("user_rewards_mod:NOT_A_FUNCTION", "'user_rewards_mod:NOT_A_FUNCTION' is a int, not a function"),
    ("no_such_module_xyz:fn", "cannot import module 'no_such_module_xyz'"),
    ("user_rewards_mod:", "must look like package.module:function"),
    ("user_rewards_mod:two_args", "two_args(candidates, references) must also take **context"),
    ("user_rewards_mod:one_arg", "one_arg(candidates, **context) cannot be called as fn(candidates, references"),
    ("bleu5", "unknown reward 'bleu5'; available: bleu4"),
    ({"bleu4": 0.5, "chexpert_f1": -0.5}, "weight of 'chexpert_f1' must be finite and >= 0, got -0.5"),
    ({"bleu4": float("nan")}, "weight of 'bleu4' must be finite and >= 0"),
    ({"bleu4": "heavy"}, "weight of 'bleu4' is not a number: 'heavy'"),
    ({"bleu4": 0.0}, "weights must sum to > 0"),
    ({}, "weights must be a non-empty mapping"),
    ({"bleu4": 0.5, "user_rewards_mod:nope": 0.5}, "component 'user_rewards_mod:nope' of the weighted reward: "
                                                  "reward 'user_rewards_mod:nope': module 'user_rewards_mod' has no "
                                                  "attribute 'nope'"),
])
def test_bad_rewards_fail_when_the_config_loads_naming_the_function_or_weight(user_module, spec, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_reward(spec)
    def yaml(v):
        return ".nan" if isinstance(v, float) and np.isnan(v) else v

    value = f"'{spec}'" if isinstance(spec, str) else "{" + ", ".join(f"{k}: {yaml(v)}" for k, v in spec.items()) + "}"
    with pytest.raises(ConfigError, match=re.escape(f"override 'rl.reward={value}': 'rl.reward' = ") + ".*"
                       + re.escape(message)):
        load_config(None, [f"rl.reward={value}"])


def test_a_bad_weight_in_yaml_names_the_file(tmp_path):
    path = tmp_path / "mix.yaml"
    path.write_text("rl:\n  reward: {bleu4: 0.5, chexpert_f1: -1}\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}: 'rl.reward' = ") + ".*weight of 'chexpert_f1'"):
        load_config(path)


def test_every_registered_reward_has_the_reward_signature():
    from rewards.registry import REWARDS, available_rewards, check_signature

    for name in available_rewards():
        check_signature(name, REWARDS[name])
