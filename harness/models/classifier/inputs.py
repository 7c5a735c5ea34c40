"""Classifier inputs: PIL images to normalised tensors, CheXpert labels to binary training targets."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image

from harness.constants import NO_FINDING, NUM_OBSERVATIONS, POSITIVE

# ImageNet statistics: timm's ViT-B/16 and Medical-MAE (which follows MAE's ImageNet recipe) both use them.
IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)
# Chest X-ray statistics, one value on every channel: the official REVA-PO code normalises the classifier's input
# with them (reva_po/datasets/datasets/dataset.py, cls_transform, MIMIC-CXR and IU-Xray alike), as Medical-MAE's
# chest X-ray fine-tuning does (util/datasets.py, the classifier's initialisation).
CXR_MEAN: tuple[float, float, float] = (0.5056, 0.5056, 0.5056)
CXR_STD: tuple[float, float, float] = (0.252, 0.252, 0.252)
NORMALIZATIONS: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "imagenet": (IMAGENET_MEAN, IMAGENET_STD),
    "cxr": (CXR_MEAN, CXR_STD),
}


def _pad_square(image: Image.Image) -> Image.Image:
    width, height = image.size
    if width == height:
        return image
    side = max(width, height)
    canvas = Image.new(image.mode, (side, side))  # black, like the X-ray background
    canvas.paste(image, ((side - width) // 2, (side - height) // 2))
    return canvas


def preprocess(images: Sequence[Image.Image], img_size: int, *, pad_to_square: bool = True,
               normalization: str = "imagenet") -> torch.Tensor:
    """PIL images -> float tensor [N, 3, img_size, img_size], normalised with `NORMALIZATIONS[normalization]`.

    Grayscale X-rays are replicated to RGB; images are padded to square first (as the official code does) so
    the anatomy is not stretched, then resized bicubically (timm's ViT default).
    """
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"unknown classifier normalization {normalization!r}; choose one of {sorted(NORMALIZATIONS)}")
    if not images:
        return torch.empty(0, 3, img_size, img_size)
    mean = np.asarray(NORMALIZATIONS[normalization][0], dtype=np.float32)
    std = np.asarray(NORMALIZATIONS[normalization][1], dtype=np.float32)
    arrays = []
    for image in images:
        rgb = image.convert("RGB")
        if pad_to_square:
            rgb = _pad_square(rgb)
        rgb = rgb.resize((img_size, img_size), Image.Resampling.BICUBIC)
        arr = np.asarray(rgb, dtype=np.float32) / 255.0
        arrays.append(((arr - mean) / std).transpose(2, 0, 1))
    return torch.from_numpy(np.stack(arrays))


def classifier_targets(labels: np.ndarray) -> np.ndarray:
    """CheXpert labels [N, 14] (1, 0, -1, nan) -> binary training targets [N, 14] (float32).

    Supp. D.2: only positives count (uncertain, negative and blank are 0); a row with no positive gets
    No Finding = 1 "so that each image has at least one label".
    """
    labels = np.asarray(labels, dtype=np.float64)
    if labels.ndim != 2 or labels.shape[1] != NUM_OBSERVATIONS:
        raise ValueError(f"labels must have shape [N, {NUM_OBSERVATIONS}], got {labels.shape}")
    targets = (labels == POSITIVE).astype(np.float32)  # nan == 1 is False
    targets[targets.sum(axis=1) == 0, NO_FINDING] = 1.0
    return targets
