from __future__ import annotations

import pytest
import torch

from harness.batching import IGNORE, encode_sft, instruction_text


def test_labels_cover_exactly_the_report_and_end_token(tiny_processor, xray_images):
    tok = tiny_processor.tokenizer
    reports = ["the heart size is normal .", "mild cardiomegaly . small left pleural effusion ."]
    batch = encode_sft(tiny_processor, [[xray_images[0]], [xray_images[1]]], ["a", "a longer instruction"],
                       reports, max_report_tokens=50)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    for i, r in enumerate(reports):
        lab = batch["labels"][i]
        kept = lab[lab != IGNORE].tolist()
        assert kept == tok(r, add_special_tokens=False)["input_ids"] + [end]
        # left padding: the report is the tail of the row
        assert (lab[-len(kept):] != IGNORE).all()


def test_reports_are_truncated(tiny_processor, xray_images):
    batch = encode_sft(tiny_processor, [[xray_images[0]]], ["a"], ["the heart size is normal . " * 10], 5)
    assert int((batch["labels"] != IGNORE).sum()) == 6


def test_instruction_with_diseases():
    assert instruction_text("Write.", None) == "Write."
    assert instruction_text("Write.", ["Cardiomegaly", "Lung Opacity"]) == (
        "Write. The classifier suggests: cardiomegaly, lung opacity.")
    assert instruction_text("Write.", []) == "Write. The classifier suggests: no finding."


def test_mismatched_lengths_raise(tiny_processor, xray_images):
    with pytest.raises(ValueError):
        encode_sft(tiny_processor, [[xray_images[0]]], ["a", "b"], ["x"], 5)
    assert torch.is_tensor(encode_sft(tiny_processor, [[xray_images[0]]], ["a"], ["x"], 5)["labels"])
