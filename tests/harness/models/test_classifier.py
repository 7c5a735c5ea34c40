"""Tests for harness.models.classifier: targets, thresholds, training, persistence, pretrained loading."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from harness.constants import NUM_OBSERVATIONS, OBSERVATIONS
from harness.models.classifier import (
    META_FILE,
    WEIGHTS_FILE,
    ClassifierConfig,
    build_classifier,
    choose_thresholds,
    classifier_targets,
    load_classifier,
    load_pretrained,
    positive_names,
    predict_labels,
    predict_proba,
    preprocess,
    save_classifier,
    train_classifier,
)

CARDIOMEGALY = OBSERVATIONS.index("Cardiomegaly")
EFFUSION = OBSERVATIONS.index("Pleural Effusion")
IMG = 64  # the tiny ViT at 64 px: 4x4 patches, trains in about a second


def tiny_cfg(**overrides) -> ClassifierConfig:
    base = {"img_size": IMG, "epochs": 12, "batch_size": 16, "lr": 2e-3, "weight_decay": 0.0, "seed": 3}
    return ClassifierConfig.preset("tiny", **{**base, **overrides})


def square_images(n: int, seed: int) -> tuple[list[Image.Image], np.ndarray]:
    """Gray noise; a bright square top-left -> Cardiomegaly, a bright band at the base -> Pleural Effusion.

    (Two squares told apart by position alone sit on a long plateau: the tiny ViT first learns "how many
    squares", and its small position embeddings take ~70 epochs to separate them. Shapes that differ keep the
    test to a second.)
    """
    rng = np.random.default_rng(seed)
    images, labels = [], np.full((n, NUM_OBSERVATIONS), np.nan)
    for i in range(n):
        pixels = rng.integers(0, 60, size=(IMG, IMG), dtype=np.uint8)
        if rng.random() < 0.5:
            pixels[4:28, 4:28] = 230
            labels[i, CARDIOMEGALY] = 1
        else:
            labels[i, CARDIOMEGALY] = 0
        if rng.random() < 0.5:
            pixels[44:60, :] = 200  # "fluid at the lung base"
            labels[i, EFFUSION] = 1
        else:
            labels[i, EFFUSION] = -1  # uncertain counts as negative
        images.append(Image.fromarray(pixels, mode="L"))
    return images, labels


@pytest.fixture(scope="module")
def square_data() -> dict[str, torch.Tensor]:
    train_img, train_lab = square_images(96, seed=0)
    val_img, val_lab = square_images(48, seed=1)
    return {
        "train_x": preprocess(train_img, IMG),
        "train_y": torch.from_numpy(classifier_targets(train_lab)),
        "val_x": preprocess(val_img, IMG),
        "val_y": torch.from_numpy(classifier_targets(val_lab)),
    }


@pytest.fixture(scope="module")
def trained(square_data):
    model = build_classifier(tiny_cfg())
    epochs: list[tuple[int, float, float | None]] = []
    history = train_classifier(model, square_data["train_x"], square_data["train_y"], square_data["val_x"],
                               square_data["val_y"], tiny_cfg(), on_epoch=lambda *a: epochs.append(a),
                               progress=False)
    return model, history, epochs


# ------------------------------------------------------------------------------------------------ targets


def test_targets_keep_positives_only_and_add_no_finding():
    labels = np.full((4, NUM_OBSERVATIONS), np.nan)
    labels[0, CARDIOMEGALY] = 1
    labels[0, EFFUSION] = -1
    labels[1, EFFUSION] = 0  # a negative only: no positive -> No Finding
    labels[2, :] = -1  # all uncertain -> No Finding
    labels[3, 0] = 1  # No Finding already positive
    targets = classifier_targets(labels)
    assert targets.dtype == np.float32
    expected = np.zeros((4, NUM_OBSERVATIONS), dtype=np.float32)
    expected[0, CARDIOMEGALY] = 1
    expected[1:, 0] = 1
    np.testing.assert_array_equal(targets, expected)
    assert (targets.sum(axis=1) >= 1).all()


def test_targets_reject_wrong_shape():
    with pytest.raises(ValueError, match="shape"):
        classifier_targets(np.zeros((2, 13)))


# --------------------------------------------------------------------------------------------- thresholds


def _column(probs: list[float], targets: list[int], c: int = 5) -> tuple[np.ndarray, np.ndarray]:
    p = np.full((len(probs), NUM_OBSERVATIONS), 0.1)
    t = np.zeros((len(probs), NUM_OBSERVATIONS), dtype=int)
    p[:, c] = probs
    t[:, c] = targets
    return p, t


def test_threshold_maximises_f1_by_hand():
    # prob >= 0.30 -> TP 3, FP 1, FN 0, F1 = 6/7; >= 0.35 -> 4/6; >= 0.45 -> 2/5; >= 0.5 -> 2/4;
    # >= 0.2 -> 6/8; >= 0.1 -> 6/9; >= 0.9 -> 2/4.
    p, t = _column([0.9, 0.35, 0.3, 0.45, 0.2, 0.1], [1, 1, 1, 0, 0, 0])
    thresholds = choose_thresholds(p, t)
    assert thresholds.shape == (NUM_OBSERVATIONS,)
    assert thresholds[5] == pytest.approx(0.3)
    pred = predict_labels(p, thresholds)[:, 5]
    np.testing.assert_array_equal(pred, [1, 1, 1, 1, 0, 0])


def test_threshold_ties_go_to_closest_to_half():
    # Positives 0.8, 0.9 and negatives 0.1, 0.2: every threshold in (0.2, 0.8] gives F1 = 1.
    p, t = _column([0.8, 0.9, 0.1, 0.2], [1, 1, 0, 0])
    assert choose_thresholds(p, t)[5] == 0.5  # the default candidates include 0.5
    assert choose_thresholds(p, t, grid=np.linspace(0, 1, 11))[5] == pytest.approx(0.5)
    assert choose_thresholds(p, t, grid=[0.3, 0.45, 0.6, 0.7])[5] == pytest.approx(0.45)
    assert choose_thresholds(p, t, grid=[0.4, 0.6])[5] == pytest.approx(0.6)  # equidistant: the larger


def test_threshold_class_without_positives_is_half():
    p, t = _column([0.9, 0.7, 0.2], [0, 0, 0])
    thresholds = choose_thresholds(p, t)
    assert thresholds[5] == 0.5
    assert (thresholds[np.arange(NUM_OBSERVATIONS) != 5] == 0.5).all()  # all-zero columns too


def test_threshold_shape_checks():
    with pytest.raises(ValueError):
        choose_thresholds(np.zeros((3, 14)), np.zeros((2, 14)))
    with pytest.raises(ValueError):
        predict_labels(np.zeros((3, 14)), np.zeros(13))


def test_positive_names_in_order_and_default():
    row = np.zeros(NUM_OBSERVATIONS, dtype=int)
    assert positive_names(row) == ["No Finding"]
    row[EFFUSION] = 1
    row[CARDIOMEGALY] = 1
    assert positive_names(row) == ["Cardiomegaly", "Pleural Effusion"]


# ------------------------------------------------------------------------------------- config and data


def test_presets_carry_paper_defaults():
    mimic = ClassifierConfig.preset("mimic_cxr")
    iu = ClassifierConfig.preset("iu_xray")
    assert (mimic.batch_size, mimic.lr, mimic.adam_beta2, mimic.epochs, mimic.weight_decay) == (
        1600, 1.5e-3, 0.95, 20, 0.05)
    assert (iu.batch_size, iu.lr, iu.adam_beta2, iu.epochs, iu.weight_decay) == (64, 6.25e-5, 0.999, 20, 0.05)
    assert mimic.arch == iu.arch == "vit_base_patch16_224" and mimic.img_size == 224
    tiny = ClassifierConfig.preset("tiny")
    assert (tiny.arch, tiny.img_size) == ("tiny_vit", 112)
    with pytest.raises(ValueError, match="unknown classifier preset"):
        ClassifierConfig.preset("chexpert")
    with pytest.raises(ValueError, match="adam_beta2"):
        ClassifierConfig(adam_beta2=1.0)
    with pytest.raises(ValueError, match="unknown ClassifierConfig fields"):
        ClassifierConfig.from_dict({"lr": 1e-3, "momentum": 0.9})


def test_preprocess_shapes_and_normalisation():
    wide = Image.fromarray(np.full((20, 40), 255, dtype=np.uint8), mode="L")
    rgb = Image.fromarray(np.zeros((30, 30, 3), dtype=np.uint8), mode="RGB")
    x = preprocess([wide, rgb], 32)
    assert x.shape == (2, 3, 32, 32) and x.dtype == torch.float32
    white = (1 - 0.485) / 0.229
    black = (0 - 0.485) / 0.229
    assert x[0, 0, 16, 16].item() == pytest.approx(white, abs=1e-4)
    assert x[0, 0, 0, 16].item() == pytest.approx(black, abs=1e-4)  # padding rows above the wide image
    assert x[1, 0].max().item() == pytest.approx(black, abs=1e-4)
    assert x[0, 2, 16, 16].item() == pytest.approx((1 - 0.406) / 0.225, abs=1e-4)  # per-channel statistics
    assert preprocess([], 32).shape == (0, 3, 32, 32)


def test_cxr_normalisation_equals_torchvision_with_the_official_statistics():
    """normalization="cxr": torchvision's Normalize with mean 0.5056 / std 0.252 (the official REVA-PO classifier
    transform) on the same padded, resized pixels; the ImageNet default is unchanged."""
    from torchvision.transforms import functional as TF

    rng = np.random.default_rng(7)
    image = Image.fromarray(rng.integers(0, 256, (37, 29), dtype=np.uint8), mode="L")
    imagenet, cxr = preprocess([image], 24), preprocess([image], 24, normalization="cxr")
    square = Image.new("RGB", (37, 37))
    square.paste(image.convert("RGB"), (4, 0))
    pixels = TF.to_tensor(square.resize((24, 24), Image.Resampling.BICUBIC))
    expected = TF.normalize(pixels, [0.5056] * 3, [0.252] * 3)
    torch.testing.assert_close(cxr[0], expected, rtol=0, atol=2e-6)
    torch.testing.assert_close(imagenet[0], TF.normalize(pixels, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
                               rtol=0, atol=2e-6)
    assert not torch.allclose(cxr, imagenet)
    with pytest.raises(ValueError, match="normalization 'chexpert'"):
        preprocess([image], 24, normalization="chexpert")


def test_normalisation_defaults_per_preset_and_for_old_files():
    assert ClassifierConfig().normalization == "cxr"  # the class defaults are the paper's MIMIC-CXR setting
    assert ClassifierConfig.preset("mimic_cxr").normalization == "cxr"
    assert ClassifierConfig.preset("iu_xray").normalization == "cxr"
    assert ClassifierConfig.preset("tiny").normalization == "imagenet"  # this project's preset keeps its inputs
    # A classifier.json written before the option: its model saw ImageNet-normalised inputs.
    old = ClassifierConfig.preset("iu_xray").to_dict()
    del old["normalization"]
    assert ClassifierConfig.from_dict(old).normalization == "imagenet"
    with pytest.raises(ValueError, match="normalization must be cxr or imagenet"):
        ClassifierConfig(normalization="CXR")


def test_saved_classifier_keeps_its_normalisation(tmp_path: Path):
    cfg = tiny_cfg(epochs=1, normalization="cxr")
    save_classifier(build_classifier(cfg), cfg, np.full(NUM_OBSERVATIONS, 0.5), tmp_path)
    assert load_classifier(tmp_path)[1].normalization == "cxr"


# ---------------------------------------------------------------------------------------------- training


def test_training_learns_separable_squares(trained, square_data):
    model, history, epochs = trained
    assert len(history["train_loss"]) == len(history["val_loss"]) == 12
    assert [e[0] for e in epochs] == list(range(1, 13))
    assert history["train_loss"][-1] < 0.2 * history["train_loss"][0]
    assert history["best_val_loss"] < 0.1
    assert history["best_val_loss"] == min(history["val_loss"])
    assert history["val_loss"][history["best_epoch"] - 1] == history["best_val_loss"]
    assert not model.training

    probs = predict_proba(model, square_data["val_x"], batch_size=10)
    assert probs.shape == (48, NUM_OBSERVATIONS) and ((probs >= 0) & (probs <= 1)).all()
    targets = square_data["val_y"].numpy()
    pred = predict_labels(probs, choose_thresholds(probs, targets))
    for c in (CARDIOMEGALY, EFFUSION, 0):
        tp = int(((pred[:, c] == 1) & (targets[:, c] == 1)).sum())
        f1 = 2 * tp / (pred[:, c].sum() + targets[:, c].sum())
        assert f1 >= 0.95, (OBSERVATIONS[c], f1)
    # The restored weights are the best epoch's: recomputing the val loss gives it back.
    logits = torch.logit(torch.from_numpy(probs).clamp(1e-7, 1 - 1e-7))
    val = torch.nn.functional.binary_cross_entropy_with_logits(logits, square_data["val_y"].double()).item()
    assert val == pytest.approx(history["best_val_loss"], rel=1e-3)


def test_training_is_deterministic(square_data):
    cfg = tiny_cfg(epochs=2)
    weights = []
    for _ in range(2):
        model = build_classifier(cfg)
        train_classifier(model, square_data["train_x"], square_data["train_y"], square_data["val_x"],
                         square_data["val_y"], cfg, progress=False)
        weights.append(model.state_dict())
    for key in weights[0]:
        assert torch.equal(weights[0][key], weights[1][key]), key
    other = build_classifier(tiny_cfg(seed=4)).state_dict()["head.weight"]
    assert not torch.equal(other, build_classifier(cfg).state_dict()["head.weight"])


def test_micro_batches_give_the_same_update(square_data):
    x, y = square_data["train_x"][:32], square_data["train_y"][:32]
    states = []
    for micro in (None, 5):
        cfg = tiny_cfg(epochs=1, micro_batch_size=micro)
        model = build_classifier(cfg)
        train_classifier(model, x, y, None, None, cfg, progress=False)
        states.append(model.state_dict())
    for key in states[0]:
        torch.testing.assert_close(states[0][key], states[1][key], rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------- persistence


def test_save_load_round_trip(trained, square_data, tmp_path: Path):
    model, _, _ = trained
    cfg = tiny_cfg()
    thresholds = np.linspace(0.2, 0.8, NUM_OBSERVATIONS)
    out = tmp_path / "clf"
    save_classifier(model, cfg, thresholds, out)
    assert sorted(p.name for p in out.iterdir()) == sorted([WEIGHTS_FILE, META_FILE])  # no temp files left
    meta = json.loads((out / META_FILE).read_text())
    assert meta["observations"] == list(OBSERVATIONS)

    loaded, cfg2, thr2 = load_classifier(out)
    assert cfg2 == cfg
    np.testing.assert_array_equal(thr2, thresholds)
    assert not loaded.training
    assert all(not p.requires_grad for p in loaded.parameters())
    np.testing.assert_array_equal(predict_proba(loaded, square_data["val_x"]),
                                  predict_proba(model, square_data["val_x"]))


def test_load_names_missing_file(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match=META_FILE):
        load_classifier(tmp_path)
    save_classifier(build_classifier(tiny_cfg()), tiny_cfg(), np.full(NUM_OBSERVATIONS, 0.5), tmp_path)
    (tmp_path / WEIGHTS_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=WEIGHTS_FILE):
        load_classifier(tmp_path)


# ------------------------------------------------------------------------------------ pretrained weights


def _imagenet_style_checkpoint(source: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The source backbone with a 1000-class head and an extra key, as a foreign checkpoint would have."""
    state = {k: v.clone() for k, v in source.state_dict().items()}
    state["head.weight"] = torch.randn(1000, state["head.weight"].shape[1])
    state["head.bias"] = torch.randn(1000)
    state["decoder_pred.weight"] = torch.randn(4, 4)  # e.g. an MAE decoder weight
    return state


@pytest.mark.parametrize("fmt", ["pth", "safetensors"])
def test_pretrained_path_loads_backbone(tmp_path: Path, fmt: str, caplog):
    source = build_classifier(tiny_cfg(seed=11))
    state = _imagenet_style_checkpoint(source)
    path = tmp_path / f"backbone.{fmt}"
    if fmt == "pth":
        torch.save({"model": state, "epoch": 3}, path)  # MAE-style wrapper
    else:
        from safetensors.torch import save_file

        save_file(state, str(path))
    with caplog.at_level(logging.WARNING):
        model = build_classifier(tiny_cfg(seed=12, pretrained_path=str(path)))
    mine = model.state_dict()
    assert torch.equal(mine["blocks.0.attn.qkv.weight"], source.state_dict()["blocks.0.attn.qkv.weight"])
    assert torch.equal(mine["head.weight"], build_classifier(tiny_cfg(seed=12)).state_dict()["head.weight"])
    assert "decoder_pred.weight" in caplog.text

    report = load_pretrained(build_classifier(tiny_cfg()), path)
    assert report["skipped"] == ["head.bias", "head.weight"]
    assert report["unexpected"] == ["decoder_pred.weight"]
    assert report["missing"] == ["head.bias", "head.weight"]


def test_pretrained_pos_embed_resampled(tmp_path: Path):
    source = build_classifier(tiny_cfg(img_size=32))  # 2x2 grid
    path = tmp_path / "small.pth"
    torch.save(source.state_dict(), path)
    model = build_classifier(tiny_cfg(pretrained_path=str(path)))  # 4x4 grid
    assert model.state_dict()["pos_embed"].shape == (1, 17, 64)
    assert torch.equal(model.state_dict()["cls_token"], source.state_dict()["cls_token"])


def test_pretrained_head_only_or_wrong_arch_is_an_error(tmp_path: Path):
    head_only = tmp_path / "head.pth"
    torch.save({"head.weight": torch.zeros(14, 64), "head.bias": torch.zeros(14)}, head_only)
    with pytest.raises(ValueError, match="no backbone weight"):
        build_classifier(tiny_cfg(pretrained_path=str(head_only)))
    wrong = tmp_path / "wrong.pth"
    torch.save({"blocks.0.attn.qkv.weight": torch.zeros(3, 3)}, wrong)
    with pytest.raises(ValueError, match="shape mismatch"):
        build_classifier(tiny_cfg(pretrained_path=str(wrong)))
    with pytest.raises(FileNotFoundError, match="missing.pth"):
        build_classifier(tiny_cfg(pretrained_path=str(tmp_path / "missing.pth")))


def test_real_architecture_builds():
    model = build_classifier(ClassifierConfig.preset("mimic_cxr")).eval()
    image = Image.fromarray(np.zeros((256, 200), dtype=np.uint8), mode="L")
    with torch.no_grad():
        out = model(preprocess([image], 224))
    assert out.shape == (1, NUM_OBSERVATIONS)
    assert sum(p.numel() for p in model.parameters()) > 80_000_000  # ViT-B/16


def test_saved_files_keep_their_bytes(tmp_path: Path):
    """The files are written through harness.runs.records now; their bytes are what safetensors' own file writer and
    an unsorted indented json.dump gave before (readers and hashes of classifier folders rely on them)."""
    from safetensors.torch import save_file

    cfg = tiny_cfg(epochs=1)
    model = build_classifier(cfg)
    thresholds = np.linspace(0.11, 0.87, NUM_OBSERVATIONS)
    save_classifier(model, cfg, thresholds, tmp_path / "clf")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "direct.safetensors"))
    assert (tmp_path / "clf" / WEIGHTS_FILE).read_bytes() == (tmp_path / "direct.safetensors").read_bytes()
    text = (tmp_path / "clf" / META_FILE).read_text(encoding="utf-8")
    assert text.startswith('{\n  "format_version": 1,\n  "config": {\n    "arch": "tiny_vit",')
    assert text.endswith("]\n}\n")
    assert json.loads(text)["thresholds"] == [float(t) for t in thresholds]
    assert not [p.name for p in (tmp_path / "clf").iterdir() if p.name.endswith(".tmp")]
