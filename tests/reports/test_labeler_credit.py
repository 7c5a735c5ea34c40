"""reports/labeler_credit.py: the labeler-credited findings the gold reader does not read (issue 44)."""

from __future__ import annotations

from harness.constants import NUM_OBSERVATIONS, OBSERVATIONS
from reports.labeler_credit import credit_count, examples_markdown


def _row(rid: str, text: str, hyp: dict, ref: dict, gold: dict, present: set) -> dict:
    def vec(values: dict) -> list:
        return [values.get(i) for i in range(NUM_OBSERVATIONS)]
    return {"id": rid, "generated": text, "hyp_labels": vec(hyp), "ref_labels": vec(ref), "gold_labels": vec(gold),
            "present": [int(i in present) for i in range(NUM_OBSERVATIONS)]}


def test_counts_credit_unread_and_image_truth_per_observation():
    rows = [
        # Observation 3: credited (labeler positive in both) and read by gold; 5: credited, unread, in the image;
        # 7: the labeler reads it positive but the reference does not, so no credit.
        _row("r2", "b", hyp={3: 1.0, 5: 1.0, 7: 1.0}, ref={3: 1.0, 5: 1.0, 7: 0.0}, gold={3: 1.0, 5: 0.0},
             present={3, 5}),
        # 2: credited, gold reads nothing (null), the image does not hold it; 4: uncertain in the labeler, no credit.
        _row("r1", "a", hyp={2: 1.0, 4: -1.0}, ref={2: 1.0, 4: 1.0}, gold={}, present=set()),
    ]
    c = credit_count(rows, n_examples=5)
    assert (c.credited, c.unread, c.unread_in_image) == (3, 2, 1)
    # examples in report-id order, one per unread observation
    assert c.examples == [("r1", OBSERVATIONS[2], "a"), ("r2", OBSERVATIONS[5], "b")]
    assert credit_count(rows, n_examples=1).examples == [("r1", OBSERVATIONS[2], "a")]
    md = examples_markdown({("no_kl", 0): c})
    assert f"- no_kl seed 0, `r2`, {OBSERVATIONS[5]}: \"b\"" in md


def test_rows_without_the_gold_labels_give_no_count():
    row = _row("r1", "a", hyp={}, ref={}, gold={}, present=set())
    del row["gold_labels"]  # a run from before the gold reader
    assert credit_count([row]) is None and credit_count([]) is None


def test_seeds_of_one_policy_share_a_row_and_an_arm_without_rl_has_no_reward():
    from types import SimpleNamespace

    from reports.labeler_credit import CreditCount, credit_table

    same = CreditCount(credited=10, unread=1, unread_in_image=1, examples=[("r1", OBSERVATIONS[1], "a")])
    other = CreditCount(credited=12, unread=3, unread_in_image=2)
    counts = {("sft", 0): same, ("sft", 1): CreditCount(10, 1, 1, [("r1", OBSERVATIONS[1], "a")]),
              ("rl", 0): same, ("rl", 1): other}
    exp = SimpleNamespace(factors=lambda arm: {"reward": "bleu4"} if arm == "rl" else {}, rl_config=lambda arm: {})
    rows = credit_table(exp, counts).rows
    assert [r[:5] for r in rows] == [["sft", "–", "0, 1", "10", "1"], ["rl", "bleu4", "0", "10", "1"],
                                     ["rl", "bleu4", "1", "12", "3"]]
    md = examples_markdown(counts)
    assert md.count("`r1`") == 2 and "- sft seed 0, 1, `r1`" in md
    # An arm whose factors name no reward (the RL-vs-SFT study's BLEU-4 arms) reads it from its runs' RL config.
    exp = SimpleNamespace(factors=lambda arm: {}, rl_config=lambda arm: {"reward": "bleu4"} if arm == "rl" else {})
    assert [r[1] for r in credit_table(exp, counts).rows] == ["–", "bleu4", "bleu4"]
