"""check_stage_model accepts every stage model format (regression: it asked for the legacy file only, so
every SFT after a warm-up that writes merger.safetensors failed its preflight)."""

from __future__ import annotations

import json

import pytest

from harness.checks.preflight import check_stage_model
from harness.config import ConfigError


@pytest.mark.parametrize("weights", ["merger.safetensors", "adapter_model.safetensors", "trainable.safetensors"])
def test_every_stage_format_passes(tmp_path, weights):
    (tmp_path / "spec.json").write_text(json.dumps({"base": str(tmp_path / "no-such-base")}))
    (tmp_path / weights).write_bytes(b"x")
    check_stage_model(tmp_path, "init_from")


def test_a_folder_without_weights_is_refused_naming_the_files(tmp_path):
    (tmp_path / "spec.json").write_text(json.dumps({"base": str(tmp_path)}))
    with pytest.raises(ConfigError, match="init_from.*adapter_model.safetensors.*merger.safetensors"):
        check_stage_model(tmp_path, "init_from")


@pytest.mark.parametrize("device, refused", [("cpu", True), ("cuda", False)])
def test_a_bf16_classifier_is_refused_only_where_it_would_run_on_a_cpu_without_bf16(monkeypatch, device, refused):
    """The classifier trains on model.device: a GPU has bf16 even where the host CPU has none."""
    import torch

    import harness.checks.preflight as preflight
    from harness.config import load_config

    cfg = load_config(None, ["classifier.amp_bf16=true"], stage="classifier")
    monkeypatch.setattr("harness.models.classifier.training.native_cpu_bf16", lambda: False)
    monkeypatch.setattr(preflight, "model_device", lambda cfg: torch.device(device))
    if refused:
        with pytest.raises(ConfigError, match="classifier.amp_bf16 = true"):
            preflight.check_classifier_precision(cfg.classifier, cfg.model)
    else:
        preflight.check_classifier_precision(cfg.classifier, cfg.model)
