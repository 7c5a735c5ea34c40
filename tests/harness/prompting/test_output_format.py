"""MRG-R1's <think>/<report> layout taught and scored (harness/prompting/output_format.py, issue 24 item 3)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.constants import OBSERVATIONS
from harness.grpo.core import group_advantages
from harness.prompting.output_format import (
    FORMAT_HINT,
    format_instruction,
    reasoning_text,
    report_part,
    reward_inputs,
    training_target,
    well_formatted_fraction,
)
from rewards.report_part import format_ok
from rewards.spec import compute_reward

NAN = float("nan")


def labels(**states) -> np.ndarray:
    row = np.full(len(OBSERVATIONS), NAN)
    for name, v in states.items():
        row[OBSERVATIONS.index(name.replace("_", " "))] = v
    return row


def test_reasoning_names_present_and_possible_observations_in_order():
    row = labels(Pleural_Effusion=1, Cardiomegaly=-1, Pneumothorax=0)
    assert reasoning_text(row) == "cardiomegaly , pleural effusion"
    assert reasoning_text(labels(Pneumothorax=0)) == "no finding"
    assert reasoning_text(labels(**{"No_Finding": 1})) == "no finding"
    with pytest.raises(ValueError, match="14 entries"):
        reasoning_text([1.0, 0.0])


def test_training_target_has_the_layout_the_format_reward_accepts():
    report = "mild cardiomegaly . no pneumothorax ."
    row = labels(Cardiomegaly=1, Pneumothorax=0)
    target = training_target(report, row, "think_report")
    assert target == "<think> cardiomegaly </think> <report> mild cardiomegaly . no pneumothorax . </report>"
    assert format_ok(target)
    assert report_part(target, "think_report") == report
    assert training_target(report, None, "plain") == report
    with pytest.raises(ValueError, match="labels"):
        training_target(report, None, "think_report")
    with pytest.raises(ValueError, match="output_format"):
        training_target(report, row, "xml")


def test_instruction_and_plain_texts_unchanged():
    assert format_instruction("Write it.", "plain") == "Write it."
    assert format_instruction("Write it.", "think_report") == f"Write it. {FORMAT_HINT}"
    assert report_part(" <think> x </think> words ", "plain") == " <think> x </think> words "


def test_well_formatted_fraction():
    texts = ["<think> a </think> <report> b </report>", "<report> b </report>", "b", ""]
    assert well_formatted_fraction(texts) == 0.25
    assert well_formatted_fraction([]) == 0.0


def test_reward_inputs_give_raw_text_only_to_rewards_that_judge_it():
    texts = ["<think> a </think> <report> no pneumothorax . </report>"]
    assert reward_inputs("mrg_r1", texts, "think_report") == texts  # the composite extracts itself
    assert reward_inputs("format", texts, "think_report") == texts
    assert reward_inputs("mccs", texts, "think_report") == ["no pneumothorax ."]
    assert reward_inputs("mccs", texts, "plain") == texts
    # A weighted mix from the config (and a user's module:function) resolves as RL resolves it: the mix extracts
    # the report part itself (get_reward of a mapping raised before).
    assert reward_inputs({"mccs": 0.75, "format": 0.25}, texts, "think_report") == texts
    assert reward_inputs("rewards.format:format_reward", texts, "think_report") == texts


def test_format_reward_varies_on_a_controlled_batch_so_mrg_r1_and_mccs_advantages_differ():
    """A group of four outputs of one prompt, as a tagged SFT model samples them: the same report, once well
    formed, once with the closing tag cut by the length cap, once without the think span, once plain. MCCS sees
    the same report in all four (equal rewards, zero advantages); MRG-R1's reward separates them by format."""
    ref = "mild cardiomegaly . small right pleural effusion . no pneumothorax ."
    body = "mild cardiomegaly . small right pleural effusion . no pneumothorax ."
    group = [
        f"<think> cardiomegaly , pleural effusion </think> <report> {body} </report>",
        f"<think> cardiomegaly , pleural effusion </think> <report> {body}",
        f"<report> {body} </report>",
        body,
    ]
    refs = [ref] * 4
    fmt = compute_reward("format", group, refs)
    assert fmt.tolist() == [1.0, 0.0, 0.0, 0.0]
    mccs = compute_reward("mccs", reward_inputs("mccs", group, "think_report"), refs)
    mrg = compute_reward("mrg_r1", group, refs)
    np.testing.assert_allclose(mrg, 0.75 * mccs + 0.25 * fmt)
    a_mccs = group_advantages(torch.tensor(mccs, dtype=torch.float32).view(1, 4))
    a_mrg = group_advantages(torch.tensor(mrg, dtype=torch.float32).view(1, 4))
    assert torch.all(a_mccs == 0)
    assert float((a_mrg - a_mccs).abs().max()) > 1.0  # the well-formed output stands out by 1.5 std


def test_prompts_follow_the_format_the_checkpoint_was_taught():
    from harness.config import ConfigError, load_config
    from harness.stages.prompts import instructions_for

    cfg = load_config(None, ["prompt.output_format=think_report"])
    samples = [object(), object()]
    spec = {"stage": "sft", "output_format": "think_report"}
    expected = [format_instruction(cfg.prompt.instruction, "think_report")] * 2
    assert instructions_for(cfg.prompt, cfg.model, samples, spec) == expected
    with pytest.raises(ConfigError, match="trained with 'plain'.*prompt.output_format=plain"):
        instructions_for(cfg.prompt, cfg.model, samples, {"stage": "sft"})  # a spec without the key: a plain model
    plain = load_config(None, [])
    with pytest.raises(ConfigError, match="trained with 'think_report'"):
        instructions_for(plain.prompt, plain.model, samples, spec)
    assert instructions_for(plain.prompt, plain.model, samples, {}) == [plain.prompt.instruction] * 2


def test_output_format_is_validated():
    from harness.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="prompt.output_format.*plain or think_report"):
        load_config(None, ["prompt.output_format=xml"])


def test_format_token_ids_are_the_tags_pieces_and_nothing_else(tiny_tokenizer):
    """The rows model.train_format_tokens trains (issue 24): every token of the four tags as a target writes them,
    no token of the reasoning or the report around them."""
    from harness.prompting.output_format import format_token_ids
    from rewards.report_part import TAGS

    ids = format_token_ids(tiny_tokenizer)
    tag_pieces = {p for tag in TAGS for p in tiny_tokenizer.convert_ids_to_tokens(
        tiny_tokenizer(tag, add_special_tokens=False)["input_ids"])}
    assert set(tiny_tokenizer.convert_ids_to_tokens(ids)) == tag_pieces and ids == sorted(ids)
    assert {"<", ">", "/"} <= tag_pieces
    # The space before a tag and the words beside it are not the tag's.
    assert not {"Ġ", "Ġthe", "Ġ."} & set(tiny_tokenizer.convert_ids_to_tokens(ids))
