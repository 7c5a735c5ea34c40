"""train.deepspeed's config checks (harness/parallel/zero.py): they need no deepspeed, so they run everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.parallel.zero import plugin_for, stage_config

REPO = Path(__file__).resolve().parents[3]


def test_the_shipped_configs_load_with_the_train_clip():
    for name in ("zero1.json", "zero2.json"):
        config = stage_config(REPO / "experiments" / "deepspeed" / name, 0.37)
        assert config["gradient_clipping"] == 0.37 and config["zero_optimization"]["stage"] in (1, 2)


@pytest.mark.parametrize(("text", "message"), [
    (None, r"train.deepspeed = '.*ds.json': no such file"),
    ("{not json", r"train.deepspeed = '.*ds.json': not valid JSON"),
    (json.dumps({"zero_optimization": {"stage": 3}}), r"zero_optimization.stage is 3; .* ZeRO-1 or ZeRO-2"),
    (json.dumps({"train_micro_batch_size_per_gpu": 1}), r"zero_optimization.stage is 0"),
    (json.dumps({"zero_optimization": {"stage": 1}, "fp16": {"enabled": True}}), r"fp16 / bf16 enabled"),
])
def test_bad_configs_are_named(tmp_path, text, message):
    path = tmp_path / "ds.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        plugin_for(str(path), 1.0, world=2)


def test_one_process_or_no_config_means_no_deepspeed(capsys):
    assert plugin_for("", 1.0, world=8) is None
    assert plugin_for(str(REPO / "experiments" / "deepspeed" / "zero1.json"), 1.0, world=1) is None
    assert "one process" in capsys.readouterr().out


def test_an_optimizer_with_its_own_reset_does_it():
    """reset_optimizer_state hands the reset to an optimizer keyed by something else (ZeRO's flat partitions,
    harness/parallel/zero.ZeroReset) and still runs the master sync."""
    import torch

    from harness.policy.snapshots import reset_optimizer_state

    calls = []

    class OwnReset:
        def reset_state(self, params):
            calls.append(("reset", len(params)))
            return 5

    params = [torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.zeros(3))]
    assert reset_optimizer_state(OwnReset(), params, master_sync=lambda: calls.append(("sync",))) == 5
    assert calls == [("reset", 2), ("sync",)]
