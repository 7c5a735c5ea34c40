"""The "Extending" examples are real code: each one registers its plug-in, and a config naming it loads.

docs/extending.md holds every example; the README's "Extending" shows some of them, verbatim (issue 46)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.aggregation import aggregate, available_aggregations
from harness.aggregation import registry as aggregation_registry
from harness.config import load_config
from harness.token_weighting import registry as weighting_registry
from regularizers.registry import (
    REFERENCES,
    REGULARIZERS,
    available_references,
    available_regularizers,
    build_reference,
    build_regularizer,
)
from rewards.registry import REWARDS, available_rewards, get_reward

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXTENDING = ROOT / "docs" / "extending.md"


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def _readme_examples() -> list[str]:
    return _python_blocks(README.read_text().split("## Extending", 1)[1].split("\n## ", 1)[0])


def _extending_examples() -> list[str]:
    return _python_blocks(EXTENDING.read_text())


@pytest.fixture
def registered():
    """Run every example; take what they registered out of the registries again afterwards."""
    available_aggregations(), available_regularizers(), available_references(), available_rewards()  # built-ins in
    weighting_registry.available_token_weightings()
    weightings = weighting_registry._REGISTRY.entries
    before = (dict(REGULARIZERS), dict(REFERENCES), dict(REWARDS), dict(aggregation_registry._REGISTRY),
              dict(weightings))
    names = []
    for i, code in enumerate(_extending_examples()):
        module = types.ModuleType(f"readme_example_{i}")  # dataclasses look their module up in sys.modules
        sys.modules[module.__name__] = module
        names.append(module.__name__)
        exec(compile(code, str(EXTENDING), "exec"), module.__dict__)  # noqa: S102 - our own README
    yield
    for name in names:
        del sys.modules[name]
    for table, old in zip((REGULARIZERS, REFERENCES, REWARDS, aggregation_registry._REGISTRY, weightings), before,
                          strict=True):
        table.clear()
        table.update(old)


def test_every_extending_example_registers_a_working_plugin(registered):
    assert len(_extending_examples()) == 6
    cfg = load_config(None, ["rl.regularizer=scaled", "rl.regularizer_args={scale: 0.5}", "rl.reference=periodic",
                             "rl.reference_args={period: 20}", "rl.reward=words", "rl.aggregation=row_sum_mean",
                             "rl.token_weighting=uniform", "rl.token_weight_boost=3"])
    weighter = weighting_registry.build_token_weighting(cfg.rl, "tok", [])
    assert (type(weighter).__name__, weighter.token_weight_boost, weighter.tokenizer) == ("Uniform", 3.0, "tok")
    reg = build_regularizer("scaled", beta_base=cfg.rl.beta_base, scale=0.5)
    assert reg.betas(torch.zeros(2, 3)).flatten().tolist() == pytest.approx([cfg.rl.beta_base * 0.5] * 6)
    assert build_reference("periodic", period=20).period == 20
    # "the heart is normal" vs "the heart size is normal": 4 of the reference's 5 words are shared.
    assert get_reward("words")(["the heart is normal"], ["the heart size is normal"]) == pytest.approx(np.array([0.8]))
    x = torch.tensor([[0.3, 0.7], [0.2, 0.0]], dtype=torch.float64)
    assert aggregate(x, torch.tensor([[1, 1], [1, 0]]), "row_sum_mean").item() == pytest.approx(0.6)


def test_the_readme_examples_are_the_docs_examples_verbatim():
    # so the test above runs each of them
    readme = _readme_examples()
    assert len(readme) == 2 and set(readme) <= set(_extending_examples())
