from __future__ import annotations

import pytest
import torch

from harness.prompting.batching import IGNORE, encode_prompts, encode_repeated, encode_sft, instruction_text


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


@pytest.mark.parametrize("repeats", [1, 2, 4])
def test_encode_repeated_equals_encoding_the_repeated_prompts(tiny_processor, xray_images, repeats):
    """One encoding per prompt, repeated, gives the tensors of encoding every repeated prompt: prompts of
    different lengths (left padding), one or two views, images of different sizes."""
    small = xray_images[3].resize((40, 52))
    images = [[xray_images[0]], [xray_images[1], small], [small]]
    instructions = ["describe", "write the findings section of the report please", "x y"]
    want = encode_prompts(tiny_processor, [v for v in images for _ in range(repeats)],
                          [s for s in instructions for _ in range(repeats)])
    got = encode_repeated(tiny_processor, images, instructions, repeats)
    assert set(got) == set(want)
    assert not bool(want["attention_mask"].all())
    assert len(set(want["image_grid_thw"][:, 1:].prod(-1).tolist())) > 1
    for key in want:
        assert got[key].dtype == want[key].dtype and torch.equal(got[key], want[key]), key
