"""Findings the rule labeler credits and the gold reader does not read: labeler hacking a reader can check (issue 44).

The clinical rewards (chexpert_f1, MCCS, entity F1; rewards/chexpert.py) pay a generated report for the positive
findings it shares with its reference, both read by the rule labeler. Per test report the eval stage writes
(predictions_final_test.jsonl) `hyp_labels` (the labeler on the generated report), `ref_labels` (the labeler on the
reference), `gold_labels` (the phantom's gold reader on the generated report; harness/data/phantom/) and `present`
(what the image holds). Per run this counts

- credited: observations the labeler reads positive (1) in both reports, what the clinical reward pays for;
- unread: of them, those the gold reader does not read as stated positive in the generated report;
- in image: of the unread, those the image holds (so the finding is right and only its wording is rejected).

A policy that learns to write what the labeler reads and a reader rejects (a sentence repeated back to back, a
finding stated and negated in one report) shows as a rising unread share. The examples are the first such reports
by id, with the observation, so that each can be read by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.constants import OBSERVATIONS
from reports.examples import positive_indices
from reports.experiment import Experiment, read_jsonl
from reports.html import Table

NEEDED_KEYS = ("hyp_labels", "ref_labels", "gold_labels", "present")


@dataclass
class CreditCount:
    credited: int = 0
    unread: int = 0
    unread_in_image: int = 0
    examples: list[tuple[str, str, str]] = field(default_factory=list)  # (report id, observation, generated text)


def credit_count(rows: list[dict], n_examples: int = 3) -> CreditCount | None:
    """The counts over one run's per-report test rows; None when the rows lack a key (runs before the gold reader)."""
    if not rows or any(k not in r for r in rows for k in NEEDED_KEYS):
        return None
    out = CreditCount()
    for row in sorted(rows, key=lambda r: str(r.get("id", ""))):
        gold = positive_indices(row["gold_labels"])
        for i in sorted(positive_indices(row["hyp_labels"]) & positive_indices(row["ref_labels"])):
            out.credited += 1
            if i in gold:
                continue
            out.unread += 1
            out.unread_in_image += int(row["present"][i] == 1)
            if len(out.examples) < n_examples:
                out.examples.append((str(row.get("id", "?")), OBSERVATIONS[i], str(row.get("generated", ""))))
    return out


def credit_counts(exp: Experiment, n_examples: int = 3) -> dict[tuple[str, int], CreditCount]:
    """(arm, seed) -> counts, for every complete run whose test predictions carry the four label vectors."""
    out = {}
    for a in exp.arms:
        for run in exp.runs_of(a.name):
            count = credit_count(read_jsonl(run.predictions_path), n_examples) if run.predictions_path else None
            if count is not None:
                out[(a.name, run.seed)] = count
    return out


def _reward(exp: Experiment, arm: str) -> str:
    """The arm's RL reward: its factor, else its runs' RL config; '–' for an arm without RL (an SFT arm)."""
    reward = exp.factors(arm).get("reward") or exp.rl_config(arm).get("reward")
    return str(reward) if reward else "–"


def _grouped(counts: dict[tuple[str, int], CreditCount]) -> list[tuple[str, list[int], CreditCount]]:
    """Runs of one arm with equal counts and examples share a row: the seeds of a study whose SFT arm is one model
    tested once per seed (stage_seeds) are one policy, not twelve."""
    groups: list[tuple[str, list[int], CreditCount]] = []
    for (arm, seed), c in counts.items():
        same = next((g for g in groups if g[0] == arm and g[2] == c), None)
        if same is None:
            groups.append((arm, [seed], c))
        else:
            same[1].append(seed)
    return groups


def _seeds(seeds: list[int]) -> str:
    return ", ".join(str(s) for s in seeds)


def credit_table(exp: Experiment, counts: dict[tuple[str, int], CreditCount]) -> Table:
    rows = []
    for arm, seeds, c in _grouped(counts):
        share = f"{c.unread / c.credited:.3f}" if c.credited else "–"
        rows.append([arm, _reward(exp, arm), _seeds(seeds), str(c.credited), str(c.unread), share,
                     str(c.unread_in_image)])
    header = ["arm", "reward", "seed", "credited (labeler: positive in both)", "unread by gold", "unread share",
              "unread, in image"]
    notes = ["credited: observations the rule labeler (rewards/chexpert.py) reads positive in the generated report and "
             "in its reference, on the test split: what the clinical rewards pay for. unread: of them, those the gold "
             "reader (no reward sees it) does not read as stated positive. in image: of the unread, those the image "
             "holds. Seeds with equal counts share a row. reports/labeler_credit.py."]
    return Table("Labeler-credited findings the gold reader does not read (test split)", header, rows, notes)


def examples_markdown(counts: dict[tuple[str, int], CreditCount]) -> str:
    """Every run's examples as a list a reader can check: report id, observation, the generated text."""
    lines = ["### Examples (first reports by id; the labeler reads the observation positive, the gold reader does not)",
             ""]
    for arm, seeds, c in _grouped(counts):
        for rid, name, text in c.examples:
            lines.append(f"- {arm} seed {_seeds(seeds)}, `{rid}`, {name}: \"{text}\"")
    return "\n".join(lines) + "\n"
