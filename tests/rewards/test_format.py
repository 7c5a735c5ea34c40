"""Tests of MRG-R1's format reward (rewards/format.py) and report extraction (rewards/report_part.py)."""

from __future__ import annotations

import numpy as np
import pytest

from rewards.format import format_reward
from rewards.report_part import extract_report, format_ok
from rewards.spec import compute_reward

GOOD = [
    "<think>look at the bases</think><report>small left effusion .</report>",
    "  <think>a</think>\n\n<report>\n the lungs are clear .\n</report>\n",
    "<think></think><report>x</report>",  # empty reasoning is allowed
    "<think>multi\nline</think> <report>multi\nline report</report>",
]
BAD = {
    "plain text": "the lungs are clear .",
    "empty": "",
    "missing think": "<report>the lungs are clear .</report>",
    "missing report": "<think>hm</think>",
    "unclosed report": "<think>hm</think><report>the lungs are clear .",
    "unclosed think": "<think>hm<report>x</report>",
    "wrong order": "<report>x</report><think>hm</think>",
    "closing tags swapped": "<think>hm<report></think>x</report>",
    "nested think": "<think>a <think>b</think> c</think><report>x</report>",
    "nested report": "<think>a</think><report>x <report>y</report></report>",
    "tag inside think": "<think>a </report> b</think><report>x</report>",
    "repeated report": "<think>a</think><report>x</report><report>y</report>",
    "repeated think": "<think>a</think><think>b</think><report>x</report>",
    "repeated pair": "<think>a</think><report>x</report><think>b</think><report>y</report>",
    "empty report": "<think>a</think><report></report>",
    "whitespace report": "<think>a</think><report>  \n </report>",
    "text before": "sure! <think>a</think><report>x</report>",
    "text after": "<think>a</think><report>x</report> done",
    "text between": "<think>a</think> so <report>x</report>",
    "upper-case tags": "<THINK>a</THINK><REPORT>x</REPORT>",
    "spaced tags": "< think >a</ think ><report>x</report>",
}


@pytest.mark.parametrize("text", GOOD)
def test_well_formed(text):
    assert format_ok(text)
    assert format_reward([text], [""])[0] == 1.0


@pytest.mark.parametrize("name", sorted(BAD))
def test_broken(name):
    assert not format_ok(BAD[name])
    assert format_reward([BAD[name]], [""])[0] == 0.0


def test_extract_report_well_formed():
    assert extract_report(GOOD[0]) == "small left effusion ."
    assert extract_report(GOOD[1]) == "the lungs are clear ."
    assert extract_report(GOOD[3]) == "multi\nline report"


def test_extract_report_broken_strips_tags():
    assert extract_report("  the lungs are clear . ") == "the lungs are clear ."
    assert extract_report("") == ""
    assert extract_report("<think>hm</think>") == "hm"
    assert extract_report("<think>a</think><report>x</report><report>y</report>") == "a  x  y"
    assert extract_report("<think>no effusion</think><report>") == "no effusion"
    assert extract_report(BAD["empty report"]) == "a"
    # tags never glue two words together
    assert extract_report("left</think>effusion") == "left effusion"


def test_registered_reward_batch_and_errors():
    texts = [GOOD[0], BAD["plain text"], "", GOOD[2]]
    out = compute_reward("format", texts, [""] * 4)
    assert out.tolist() == [1.0, 0.0, 0.0, 1.0]
    assert format_reward([], []).shape == (0,)
    assert np.isfinite(out).all()
    with pytest.raises(TypeError):
        format_ok(None)
    with pytest.raises(TypeError):
        extract_report(3)
