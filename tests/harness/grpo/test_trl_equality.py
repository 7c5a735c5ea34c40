"""regbench's policy_loss equals TRL's own loss code (GRPOTrainer._compute_loss) for every setting TRL expresses
(benchmarks/trl_equality.py: loss types, beta 0 / > 0, k3 / k3_is, token / sequence ratios, delta = dual clip), in
float32 and bfloat16, with a zero-length completion (issue 45). Skipped where TRL is not installed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "trl_equality.py"
_spec = importlib.util.spec_from_file_location("trl_equality", _PATH)
eq = sys.modules.setdefault("trl_equality", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(eq)  # registered first: its dataclass looks its module up

BF16_ULP = 2.0 ** -8  # bfloat16's spacing at 1: the two codes round in different orders


@pytest.mark.parametrize("setting", eq.settings(), ids=lambda s: s.name)
@pytest.mark.parametrize("stressed", [False, True], ids=["typical", "stressed"])
def test_policy_loss_equals_trl_float32(setting, stressed):
    for seed in range(2):
        dl, dg, _, _ = eq.compare(setting, eq.make_inputs(torch.float32, stressed, seed))
        assert dl < 1e-6 and dg < 1e-6, (dl, dg)


@pytest.mark.parametrize("setting", eq.settings(), ids=lambda s: s.name)
def test_policy_loss_equals_trl_bfloat16(setting):
    for stressed in (False, True):
        dl, dg, loss, grad = eq.compare(setting, eq.make_inputs(torch.bfloat16, stressed, 0))
        assert dl <= 4 * BF16_ULP * max(loss, 1.0) and dg <= 4 * BF16_ULP * max(grad, 1e-3), (dl, dg, loss, grad)


def test_the_k3_cap_is_what_separates_regbench_from_trl_on_stressed_inputs():
    """With rl.kl_cap 10 (the official code's, the default) the stressed inputs differ from TRL; null makes them
    equal (the float32 test above)."""
    capped = [eq.compare(s, eq.make_inputs(torch.float32, True, 0)) for s in eq.contrast_settings()]
    assert all(dl > 1e-4 for dl, *_ in capped)


def test_trl_setting_list_covers_its_loss_types():
    """Every TRL loss type regbench expresses is compared (vespo is not expressible: see the benchmark)."""
    assert {s.loss_type for s in eq.settings()} == {"grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo"}
    assert {s.level for s in eq.settings()} == {"token", "sequence"}
    assert {s.bias_correction for s in eq.settings() if s.beta} == {False, True}
