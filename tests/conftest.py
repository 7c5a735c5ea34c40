"""Shared fixtures: a tiny tokenizer/processor/model built offline, and a small synthetic data set."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CORPUS = [
    "the heart size is normal . there is no pleural effusion or pneumothorax .",
    "mild cardiomegaly . small left pleural effusion . no focal consolidation .",
    "the lungs are clear . no acute osseous abnormality .",
    "right lower lobe opacity may represent pneumonia . endotracheal tube in place .",
] * 20


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from harness.models.tiny import train_tokenizer

    return train_tokenizer(CORPUS, vocab_size=400)


@pytest.fixture(scope="session")
def tiny_processor(tiny_tokenizer):
    from harness.models.tiny import build_processor

    return build_processor(tiny_tokenizer, 56)


@pytest.fixture
def tiny_model(tiny_tokenizer):
    from harness.models.tiny import build_tiny_model

    return build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=1, vision_hidden=16,
                            vision_depth=1, image_size=56)


@pytest.fixture(scope="session")
def xray_images():
    from PIL import Image

    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 255, (64, 64), dtype=np.uint8)).convert("RGB") for _ in range(4)]
