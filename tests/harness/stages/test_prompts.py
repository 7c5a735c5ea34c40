"""harness/stages/prompts.py: the classifier's predictions for a list of samples are computed once and read back, keyed
by the classifier's files and the samples' images (random-weight tiny classifier, thresholds spread so that some
observations are predicted and some are not)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import harness.stages.prompts as prompts
from harness.data.datasets import Sample
from harness.models.classifier import ClassifierConfig, build_classifier, save_classifier
from harness.stages.prompts import PREDICTIONS_FOLDER, predicted_diseases


def _samples(folder: Path, n: int = 6) -> list[Sample]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        path = folder / f"img{i}.png"
        Image.fromarray(rng.integers(0, 255, (48, 48), dtype=np.uint8)).save(path)
        out.append(Sample(id=f"s{i}", report="no acute findings .", image_paths=[path]))
    return out


@pytest.fixture
def classifier(tmp_path) -> Path:
    cfg = ClassifierConfig.preset("tiny", img_size=32, seed=1)
    thresholds = np.linspace(0.2, 0.8, 14)
    save_classifier(build_classifier(cfg), cfg, thresholds, tmp_path / "clf")
    return tmp_path / "clf"


def test_predictions_are_made_once_and_read_back(classifier, tmp_path, monkeypatch):
    samples = _samples(tmp_path)
    calls = []
    real = prompts.predict_proba
    monkeypatch.setattr(prompts, "predict_proba", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = predicted_diseases(classifier, samples)
    assert len(calls) == 1 and len(list((classifier / PREDICTIONS_FOLDER).glob("*.json"))) == 1
    assert len(first) == len(samples) and any(first) and not all(len(n) == 14 for n in first)
    assert predicted_diseases(classifier, samples) == first and len(calls) == 1  # read, not computed
    # Another sample list, or another image under the same name: computed (a file of its own).
    assert predicted_diseases(classifier, samples[:3]) == first[:3] and len(calls) == 2
    Image.fromarray(np.zeros((48, 48), dtype=np.uint8)).save(samples[0].image_paths[0])
    predicted_diseases(classifier, samples)
    assert len(calls) == 3 and len(list((classifier / PREDICTIONS_FOLDER).glob("*.json"))) == 3


def test_a_folder_that_cannot_be_written_still_gets_its_predictions(classifier, tmp_path, monkeypatch):
    samples = _samples(tmp_path)

    def refuse(*args, **kwargs):
        raise PermissionError("read-only")

    import harness.runs.records as records

    monkeypatch.setattr(records, "atomic_write_text", refuse)
    assert len(predicted_diseases(classifier, samples)) == len(samples)
    assert not list((classifier / PREDICTIONS_FOLDER).glob("*.json"))


@pytest.mark.parametrize("amp", [False, True])
def test_predictions_use_the_precision_the_classifier_was_trained_in(tmp_path, monkeypatch, amp):
    """issue 27: a classifier saved with amp_bf16 predicts the prompts' diseases under bf16 autocast, as it was
    validated and its thresholds chosen; one saved without it predicts in fp32."""
    cfg = ClassifierConfig.preset("tiny", img_size=32, seed=1, amp_bf16=amp)
    save_classifier(build_classifier(cfg), cfg, np.linspace(0.2, 0.8, 14), tmp_path / "clf")
    seen = []
    real = prompts.predict_proba
    monkeypatch.setattr("harness.models.classifier.training.native_cpu_bf16", lambda: True)
    monkeypatch.setattr(prompts, "predict_proba", lambda *a, **k: seen.append(k.get("amp_bf16")) or real(*a, **k))
    predicted_diseases(tmp_path / "clf", _samples(tmp_path))
    assert seen == [amp]


def test_predictions_run_on_the_device_they_are_given(classifier, tmp_path, monkeypatch):
    """The stages pass their model.device (instructions_for, stage 2): the classifier is loaded there."""
    import torch

    samples = _samples(tmp_path)
    devices = []
    real = prompts.load_classifier
    monkeypatch.setattr(prompts, "load_classifier", lambda d, device="cpu": devices.append(device) or real(d, device))
    cpu = predicted_diseases(classifier, samples, torch.device("cpu"))
    assert devices == [torch.device("cpu")] and len(cpu) == len(samples)


def test_instructions_for_asks_on_the_stage_device(classifier, tmp_path, monkeypatch):
    """instructions_for (evaluation and RL prompts of a stage-2 model) hands predicted_diseases the config's
    model.device, not the function's CPU default (a sentinel device shows it is the config's that arrives)."""
    from harness.config.run import RunConfig

    sentinel, seen = object(), []
    monkeypatch.setattr(prompts, "model_device", lambda cfg: sentinel)
    monkeypatch.setattr(prompts, "predicted_diseases",
                        lambda d, samples, device="cpu", **kw: seen.append(device) or [["Edema"]] * len(samples))
    cfg = RunConfig()
    out = prompts.instructions_for(cfg.prompt, cfg.model, _samples(tmp_path, 2), {"classifier_dir": str(classifier)})
    assert seen == [sentinel] and len(out) == 2 and all("edema" in o for o in out)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a GPU (the prepared device check)")
def test_the_classifier_stage_and_its_predictions_run_on_a_gpu(tmp_path):
    """model.device = cuda: the classifier trains with its parameters on the GPU and the prompts' predictions run
    there too (the paper's ViT-B/16 on MIMIC-CXR would not train on a CPU)."""
    import torch

    from harness.models.classifier import load_classifier, train_classifier

    cfg = ClassifierConfig.preset("tiny", img_size=32, seed=1, epochs=1, batch_size=4)
    model = build_classifier(cfg).to("cuda")
    x = torch.randn(8, 3, 32, 32)
    y = (torch.rand(8, 14) > 0.5).float()
    train_classifier(model, x, y, x, y, cfg, progress=False)
    assert all(p.device.type == "cuda" for p in model.parameters())
    save_classifier(model, cfg, np.linspace(0.2, 0.8, 14), tmp_path / "gpu_clf")
    loaded, _, _ = load_classifier(tmp_path / "gpu_clf", device="cuda")
    assert next(loaded.parameters()).device.type == "cuda"
    assert len(predicted_diseases(tmp_path / "gpu_clf", _samples(tmp_path), torch.device("cuda"))) == 6
