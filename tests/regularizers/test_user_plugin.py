"""Regularizers and reference strategies from the user's code (`rl.regularizer=module:Class`, issue 45): loaded from
a file outside the package, run through an RL run that is killed after a checkpoint and resumed to the uninterrupted
result; and the plug-in contract: a plug-in whose state_dict() misses attributes is refused, naming them."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from harness.config import ConfigError, load_config
from harness.runs.records import RunDir
from tests.harness.grpo.test_trainer import _fresh_copy, _length_reward, _params, _trainer, prompt_set  # noqa: F401
from tests.killed_runs import KilledAt

README = Path(__file__).resolve().parents[2] / "README.md"

# A stateful reference strategy of the user's: the reference follows the policy every `period` steps, counted by
# the strategy itself (state: `count`).
USER_REFERENCE = '''

from dataclasses import dataclass, field
from regularizers.registry import ReferenceStrategy


@dataclass
class CountedRefresh(ReferenceStrategy):
    period: int = 3
    count: int = field(init=False, default=0)

    def after_step(self, store, step):
        self.count += 1
        if self.count % self.period == 0:
            store.capture("ref")
            return {"ref_refreshed": True}
        return {}

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = int(state["count"])
'''

LEAKY = '''
from dataclasses import dataclass
import torch
from regularizers.registry import Regularizer, ReferenceStrategy


@dataclass
class CountsInInit(Regularizer):
    def __post_init__(self):
        self.calls = 0

    def betas(self, advantages, h_ref=None):
        return torch.full_like(advantages, 0.1, dtype=torch.float32)


@dataclass
class CountsInStep(Regularizer):
    def betas(self, advantages, h_ref=None):
        return torch.full_like(advantages, 0.1, dtype=torch.float32)

    def after_step(self, kl_mean, n):
        self.calls = getattr(self, "calls", 0) + 1


@dataclass
class Derived(Regularizer):
    derived_attrs = ("scale",)

    def __post_init__(self):
        self.scale = 2.0

    def betas(self, advantages, h_ref=None):
        return torch.full_like(advantages, 0.05 * self.scale, dtype=torch.float32)


@dataclass
class RemembersValidations(ReferenceStrategy):
    def after_step(self, store, step):
        self.last_step = step
        return {}
'''


def _readme_stateful_example() -> str:
    section = README.read_text().split("## Extending", 1)[1].split("\n## ", 1)[0]
    blocks = [b for b in re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL) if "class RunningKL" in b]
    assert len(blocks) == 1
    return blocks[0]


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """The README's RunningKL plus a stateful reference strategy in my_kl.py, and leaky plug-ins in leaky.py, in a
    folder outside the package put on sys.path (as PYTHONPATH would)."""
    folder = tmp_path / "my_code"
    folder.mkdir()
    (folder / "my_kl.py").write_text(_readme_stateful_example() + textwrap.dedent(USER_REFERENCE))
    (folder / "leaky.py").write_text(LEAKY)
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for name in ("my_kl", "leaky"):  # the next test imports its own copy
        sys.modules.pop(name, None)


RL_ARGS = ["rl.reward=test_length", "rl.group_size=2", "rl.prompts_per_step=2", "rl.max_new_tokens=6",
           "rl.min_new_tokens=2"]


def test_a_user_regularizer_resumes_to_the_uninterrupted_run(user_code, tiny_model, tiny_processor, tmp_path,
                                                             prompt_set):  # noqa: F811 - the fixture
    cfg = load_config(None, ["rl.regularizer=my_kl:RunningKL", "rl.regularizer_args={decay: 0.5}",
                             "rl.reference=my_kl:CountedRefresh", "rl.reference_args={period: 3}", *RL_ARGS])
    assert (cfg.rl.regularizer, cfg.rl.reference) == ("my_kl:RunningKL", "my_kl:CountedRefresh")
    kw = dict(regularizer="my_kl:RunningKL", regularizer_args={"decay": 0.5}, reference="my_kl:CountedRefresh",
              reference_args={"period": 3}, kl_target=1e-4, epochs=2)
    whole = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / "whole", prompt_set, **kw)
    assert type(whole.regularizer).__module__ == "my_kl"
    whole.train()
    assert whole.step == 4

    killed = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / "cut", prompt_set, **kw)
    killed.run = KilledAt(tmp_path / "cut", 3)  # killed while step 3 logs; the epoch-1 checkpoint (step 2) stays
    with pytest.raises(KeyboardInterrupt):
        killed.train()
    assert killed.step == 3 and killed.regularizer.state_dict() != whole.regularizer.state_dict()
    assert (tmp_path / "cut" / "checkpoint").is_dir()
    resumed = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / "cut", prompt_set, **kw)
    assert isinstance(resumed.run, RunDir)
    resumed.train()
    assert resumed.step == 4
    assert resumed.regularizer.state_dict() == whole.regularizer.state_dict()
    assert resumed.reference.state_dict() == whole.reference.state_dict() == {"count": 4}
    for a, b in zip(_params(whole), _params(resumed), strict=True):
        assert torch.equal(a, b)
    rows = {r["step"]: r for r in resumed.run.steps()}
    for r in whole.run.steps():  # the hooks' log_stats and the betas, step by step
        assert (rows[r["step"]]["kl_running"], rows[r["step"]]["beta_mean"]) == (r["kl_running"], r["beta_mean"])
    betas = [r["beta_mean"] for r in whole.run.steps()]
    assert len(set(betas)) == 4  # the state moved beta every step: a resume from the initial state would differ
    assert [r.get("ref_refreshed", False) for r in whole.run.steps()] == [False, False, True, False]


@pytest.mark.parametrize("path,attrs", [("leaky:CountsInInit", "['calls']"), ("leaky:CountsInStep", "['calls']")])
def test_a_stateful_plugin_that_would_lose_its_state_is_refused_at_load(user_code, path, attrs):
    with pytest.raises(ConfigError) as e:
        load_config(None, [f"rl.regularizer={path}", *RL_ARGS])
    msg = str(e.value)
    assert f"'rl.regularizer' = '{path}'" in msg and f"holds attribute(s) {attrs}" in msg and "state_dict()" in msg
    assert "\n" not in msg


def test_derived_attributes_are_allowed_and_bad_paths_are_named(user_code):
    load_config(None, ["rl.regularizer=leaky:Derived", *RL_ARGS])
    for path, why in (("leaky:Nope", "has no attribute 'Nope'"), ("no_such_mod:X", "cannot import module"),
                      ("leaky:RemembersValidations", "not a subclass of Regularizer")):
        with pytest.raises(ConfigError, match=re.escape(f"'rl.regularizer' = '{path}' cannot be loaded")) as e:
            load_config(None, [f"rl.regularizer={path}", *RL_ARGS])
        assert why in str(e.value)


def test_a_reference_whose_state_appears_during_the_run_is_refused_before_a_checkpoint(
        user_code, tiny_model, tiny_processor, tmp_path, prompt_set):  # noqa: F811 - the fixture
    load_config(None, ["rl.reference=leaky:RemembersValidations", *RL_ARGS])  # nothing to see at load
    tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / "run", prompt_set, regularizer="constant",
                  reference="leaky:RemembersValidations")
    with pytest.raises(ValueError, match=r"reference strategy .* holds attribute\(s\) \['last_step'\]"):
        tr.train()
    assert not (tmp_path / "run" / "checkpoint").exists()  # no checkpoint that would resume without it
