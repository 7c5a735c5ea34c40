"""The tiny preset's conv classifier (`classifier.arch: tiny_cnn`): builds, learns, saves and loads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.constants import OBSERVATIONS
from harness.models.classifier import (
    build_classifier,
    choose_thresholds,
    classifier_targets,
    load_classifier,
    predict_labels,
    predict_proba,
    preprocess,
    save_classifier,
    train_classifier,
)
from harness.models.classifier.tiny_cnn import TinyCNN
from tests.harness.models.test_classifier import CARDIOMEGALY, EFFUSION, IMG, square_images, tiny_cfg


def _data(n, seed):
    images, labels = square_images(n, seed)
    return preprocess(images, IMG), torch.from_numpy(classifier_targets(labels))


def test_tiny_cnn_learns_saves_and_loads(tmp_path):
    cfg = tiny_cfg(arch="tiny_cnn", epochs=8)
    model = build_classifier(cfg)
    assert isinstance(model, TinyCNN)
    assert model(torch.zeros(2, 3, IMG, IMG)).shape == (2, len(OBSERVATIONS))
    # Seeded: the same config builds the same weights, another seed others.
    assert torch.equal(build_classifier(cfg).head.weight, model.head.weight)
    assert not torch.equal(build_classifier(tiny_cfg(arch="tiny_cnn", seed=9)).head.weight, model.head.weight)
    (tx, ty), (vx, vy) = _data(96, 0), _data(48, 1)
    train_classifier(model, tx, ty, vx, vy, cfg, progress=False)
    probs = predict_proba(model, vx)
    targets = vy.numpy()
    thresholds = choose_thresholds(probs, targets)
    pred = predict_labels(probs, thresholds)
    for c in (CARDIOMEGALY, EFFUSION):
        tp = int(((pred[:, c] == 1) & (targets[:, c] == 1)).sum())
        assert 2 * tp / (pred[:, c].sum() + targets[:, c].sum()) >= 0.95, OBSERVATIONS[c]
    save_classifier(model, cfg, thresholds, tmp_path / "clf")
    loaded, cfg2, _ = load_classifier(tmp_path / "clf")
    assert cfg2.arch == "tiny_cnn" and isinstance(loaded, TinyCNN)
    np.testing.assert_array_equal(predict_proba(loaded, vx), probs)  # batch-norm statistics saved too


def test_tiny_cnn_runs_channels_last_and_matches_the_nchw_net_to_rounding():
    """issue 27: the conv weights are NHWC (about 2x faster on a CPU core); the outputs and gradients are those of
    the same net on NCHW tensors up to float rounding, and its saved weights load into either layout."""
    torch.manual_seed(0)
    model = TinyCNN(len(OBSERVATIONS))
    conv = model.features[0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    plain = TinyCNN(len(OBSERVATIONS))
    plain.load_state_dict({k: v.contiguous() for k, v in model.state_dict().items()})
    plain.features.to(memory_format=torch.contiguous_format)
    plain.forward = lambda x: plain.head(plain.features(x).amax(dim=(2, 3)))
    x = torch.randn(4, 3, 48, 48)
    out, ref = model(x), plain(x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    out.square().sum().backward()
    ref.square().sum().backward()
    torch.testing.assert_close(model.features[0].weight.grad, plain.features[0].weight.grad, rtol=1e-3, atol=1e-4)


def test_predictions_on_the_cpu_go_32_images_a_pass_with_the_probabilities_of_any_batching():
    """issue 27: on a CPU predict_proba passes 32 images at a time (faster than 256: the activations stay in the
    caches); in eval mode an image's output is its own, so any batching gives its probabilities."""
    from harness.models.classifier.training import PREDICT_BATCH

    torch.manual_seed(3)
    model = TinyCNN(len(OBSERVATIONS))
    x = torch.rand(70, 3, 40, 40)
    sizes = []
    handle = model.features.register_forward_hook(lambda _m, inp, _out: sizes.append(len(inp[0])))
    probs = predict_proba(model, x)
    handle.remove()
    assert PREDICT_BATCH["cpu"] == 32 and sizes == [32, 32, 6]
    for batch_size in (256, 7):
        np.testing.assert_allclose(predict_proba(model, x, batch_size=batch_size), probs, rtol=0, atol=1e-6)
    assert model.training  # the mode it had is restored


def test_amp_bf16_trains_and_predicts_under_bf16_autocast(monkeypatch):
    """issue 27: classifier.amp_bf16 reaches a CPU too (it used to apply on CUDA only): training, validation and
    predictions run the convolutions in bf16 under autocast, weights and batch norm in fp32. The CPU's native-bf16
    check is patched on so the test runs anywhere (emulated bf16 computes the same, only slower)."""
    from harness.models.classifier import training

    monkeypatch.setattr(training, "native_cpu_bf16", lambda: True)
    (tx, ty), (vx, vy) = _data(64, 0), _data(32, 1)
    runs = {}
    for amp in (False, True):
        cfg = tiny_cfg(arch="tiny_cnn", epochs=2, amp_bf16=amp)
        model = build_classifier(cfg)
        history = train_classifier(model, tx, ty, vx, vy, cfg, progress=False)
        runs[amp] = (model, history)
    fp32, bf16 = runs[False][0], runs[True][0]
    assert all(p.dtype == torch.float32 for p in bf16.parameters())
    # The same seed and batches, other arithmetic: the weights and losses move apart, but only a little.
    assert not torch.equal(fp32.head.weight, bf16.head.weight)
    torch.testing.assert_close(bf16.head.weight, fp32.head.weight, rtol=0, atol=0.05)
    assert runs[True][1]["val_loss"] != runs[False][1]["val_loss"]
    # Predictions under the flag are the autocast forward's, not the fp32 one's.
    probs = predict_proba(bf16, vx, amp_bf16=True)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = torch.sigmoid(bf16(vx).float()).double().numpy()
    np.testing.assert_array_equal(probs, expected)
    plain = predict_proba(bf16, vx)
    assert not np.array_equal(probs, plain)
    np.testing.assert_allclose(probs, plain, rtol=0, atol=0.05)


def test_amp_bf16_is_refused_on_a_cpu_without_native_bf16(monkeypatch):
    from harness.models.classifier import training

    monkeypatch.setattr(training, "native_cpu_bf16", lambda: False)
    model = build_classifier(tiny_cfg(arch="tiny_cnn"))
    x, y = _data(8, 0)
    with pytest.raises(ValueError, match=r"classifier\.amp_bf16 = true needs a CUDA device or a CPU with native"):
        train_classifier(model, x, y, None, None, tiny_cfg(arch="tiny_cnn", epochs=1, amp_bf16=True),
                         progress=False)
    with pytest.raises(ValueError, match="classifier.amp_bf16"):
        predict_proba(model, x, amp_bf16=True)
    assert predict_proba(model, x).shape == (8, len(OBSERVATIONS))  # fp32 needs nothing
