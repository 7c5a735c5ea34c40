"""harness/grpo/format_effect.py: what the format term of MRG-R1's reward does to the advantages of recorded groups."""

from __future__ import annotations

import json

import pytest
import torch

from harness.grpo.core import group_advantages
from harness.grpo.format_effect import format_reward_summary

GOOD = "<think> the heart is normal </think> <report> no acute process . </report>"
BAD = "no acute process ."


def write_run(tmp_path, groups: list[tuple[list[str], list[float]]], step: int = 1):
    """A fake RL run: one recorded step whose rewards are 0.75 mccs + 0.25 format, advantages as logged."""
    cands = [c for g, _ in groups for c in g]
    rewards = [[0.75 * m + 0.25 * (1.0 if c == GOOD else 0.0) for c, m in zip(g, ms, strict=True)] for g, ms in groups]
    adv = group_advantages(torch.tensor(rewards)).tolist()
    (tmp_path / "samples.jsonl").write_text(json.dumps({"step": step, "ids": [], "candidates": cands,
                                                        "rewards": rewards, "advantages": adv}) + "\n")
    (tmp_path / "manifest.json").write_text(json.dumps({"config": {"rl": {"advantage_scale": "std"}}}))
    return tmp_path


def test_the_format_term_separates_equal_clinical_rewards_and_flips_signs(tmp_path):
    run = write_run(tmp_path, [
        ([GOOD, BAD], [0.3, 0.3]),        # equal MCCS: only the format term separates them
        ([BAD, BAD], [0.2, 0.6]),         # no layout anywhere: advantages as MCCS alone
        ([GOOD, BAD], [0.1, 0.2]),        # format outweighs a small MCCS gap: both signs flip
    ])
    s = format_reward_summary(run)
    assert (s["groups"], s["candidates"], s["steps"]) == (3, 6, 1)
    assert s["well_formatted_sampled"] == pytest.approx(2 / 6)
    assert s["groups_format_varies"] == 2 and s["groups_equal_mccs_separated_by_format"] == 1
    # group 1: A = (+1, -1) against (0, 0) alone; group 3: rewards 0.325 / 0.15 -> (+1, -1) against (-1, +1)
    assert s["advantage_sign_changes"] == 4
    assert s["advantage_diff_max"] == pytest.approx(2.0, abs=1e-4)
    assert s["advantage_diff_mean"] == pytest.approx((1 + 1 + 0 + 0 + 2 + 2) / 6, abs=1e-4)
    assert s["logged_vs_recomputed_max"] == 0.0


def test_a_run_without_recorded_samples_says_how_to_record_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="samples_every"):
        format_reward_summary(tmp_path, scale="std")
