"""harness/grpo/start_validation.py: the key ignores only what validation does not read, and the shared scores are
used only while the live policy is the start snapshot (hand-made validator on a two-parameter policy)."""

from __future__ import annotations

import math

import pytest
import torch

from harness.config import RunConfig, to_dict
from harness.grpo.start_validation import FOLDER, shared_start_validation, start_validation_key
from harness.parallel.distributed import Dist
from harness.policy.snapshots import SnapshotStore


def _cfg(model_dir, **sets) -> dict:
    """The resolved config's record (what the RL stage hands the start validation)."""
    cfg = RunConfig()
    cfg.init_from = str(model_dir)
    for dotted, value in sets.items():
        section, _, name = dotted.rpartition("__")
        setattr(getattr(cfg, section) if section else cfg, name, value)
    return to_dict(cfg)


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "sft" / "model"
    d.mkdir(parents=True)
    (d / "adapter_model.safetensors").write_bytes(b"weights")
    (d / "spec.json").write_text("{}")
    return d


def test_the_key_ignores_training_settings_and_follows_what_validation_reads(model_dir, tmp_path):
    key = start_validation_key(_cfg(model_dir))
    same = [_cfg(model_dir, rl__regularizer="none", rl__reference="vapr", seed=3, out_dir="/elsewhere",
                 train__lr=0.5, rl__group_size=8, rl__ema_rate=0.2)]
    assert all(start_validation_key(c) == key for c in same)
    other = [_cfg(model_dir, generation__max_new_tokens=7), _cfg(model_dir, rl__reward="chexpert_f1"),
             _cfg(model_dir, rl__val_max_samples=3), _cfg(model_dir, rl__temperature=0.9)]
    assert len({start_validation_key(c) for c in other} | {key}) == len(other) + 1
    (model_dir / "adapter_model.safetensors").write_bytes(b"weightz")  # another model
    assert start_validation_key(_cfg(model_dir)) != key
    assert start_validation_key(to_dict(RunConfig())) is None  # RL from the base model: not shared


def test_shared_scores_only_for_the_start_policy(model_dir):
    policy = torch.nn.Linear(2, 1)
    start = SnapshotStore(policy)
    start.capture("start")
    calls = []

    def validate(model):
        calls.append(float(model.weight.sum()))
        return {"val": 0.1 + float(model.weight.sum()), "nan": math.nan, "rows": [[1, "a"]]}

    cfg = _cfg(model_dir)
    first = shared_start_validation(validate, cfg, start, Dist())(policy)
    assert len(calls) == 1 and len(list((model_dir.parent / FOLDER).glob("*.json"))) == 1
    again = shared_start_validation(validate, cfg, start, Dist())  # another run from the same model
    got = again(policy)
    assert len(calls) == 1 and got["val"] == first["val"] and math.isnan(got["nan"]) and got["rows"] == [[1, "a"]]
    with torch.no_grad():
        policy.weight.add_(1e-7)  # one step later: computed
    assert again(policy)["val"] != first["val"] and len(calls) == 2
    start.restore("start")  # back at the start policy (a reset to it): shared again
    assert again(policy)["val"] == first["val"] and len(calls) == 2
    # A snapshot kept in another dtype cannot say the policy is the start one bit for bit: never shared.
    low = SnapshotStore(policy, dtype=torch.float16)
    low.capture("start")
    shared_start_validation(validate, cfg, low, Dist())(policy)
    assert len(calls) == 3
