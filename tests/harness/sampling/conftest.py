"""Fixtures of the decoding tests: a tiny Qwen2.5-VL with LoRA adapters that change the logits, and a left-padded
batch of prompts (shared by test_lean_decode.py and test_fused_step.py)."""

from __future__ import annotations

import pytest

from harness.prompting.batching import encode_prompts
from tests.harness.sampling.test_lean_decode import INSTRUCTIONS, _lora_model


@pytest.fixture(scope="module")
def lora_model(tiny_tokenizer):
    return _lora_model(tiny_tokenizer)


@pytest.fixture(scope="module")
def batch(tiny_processor, xray_images):
    b = encode_prompts(tiny_processor, [[im] for im in xray_images] * 2, INSTRUCTIONS * 2)
    assert not bool(b["attention_mask"].all())  # left padding present
    return b
