"""What a model is taught to write (`prompt.output_format`): the plain report (REVA-PO), or MRG-R1's layout
(paper 002) `<think> REASONING </think> <report> REPORT </report>`, which its format reward checks
(rewards/format.py) and which nothing would teach a model otherwise.

MRG-R1 states the layout ("a format-only reward that enforces a <think> -> <report> structure"), the reward
weights (0.75 clinical + 0.25 format) and that the report is what its clinical reward and CE metrics read. It
does not state how the layout is taught, what the reasoning contains, or how a badly formatted output is scored
at test time. This project's choices, each named here:

- The instruction: the stage's instruction (with the classifier's hint in stage 2) followed by `FORMAT_HINT`
  (project's wording).
- The SFT target: `<think> R </think> <report> REPORT </report>` (single spaces around the tags), where R is
  `reasoning_text(labels)`: the names of the observations the reference's labels state present (1) or possible
  (-1), lowercase, in the order of harness.constants.OBSERVATIONS, joined by " , "; "no finding" when none is
  (the "observations considered" of the case). Labels are the data set's (the phantom's stored ones;
  `harness.stages.prompts.reference_labels` otherwise).
- Scoring (validation, test, and every reward except the format reward itself): `report_part(text, fmt)`. For
  `think_report` that is `rewards.report_part.extract_report`: the `<report>` part of a well-formed output; for a badly
  formatted one the whole text with the four tags replaced by spaces (MRG-R1 says nothing on this; the text is
  scored as it stands, so a broken layout is penalised by the format reward, and by the metrics only as far as
  its words are wrong). For `plain` the text is scored unchanged.
- RL rewards (`reward_inputs`): a reward that judges the raw output (`scores_raw_text`: the format reward, the
  composites, which extract the report part themselves) gets the output; any other gets `report_part`.
- `well_formatted_fraction(texts)`: the share of texts with the layout (rewards.report_part.format_ok); validation
  rows and test scores log it for every arm (`well_formatted`), so a plain arm shows 0.
- `format_token_ids(tokenizer)`: the tokens the four tags are written with in a target, whose embedding and
  output rows `model.train_format_tokens` trains (the tiny tokenizer, trained on report text, writes each tag
  as 5-6 pieces, among them `<`, `/` and `>`, which no stage-0 target contains).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from harness.constants import OBSERVATIONS
from rewards.report_part import TAGS, extract_report, format_ok
from rewards.spec import resolve_reward

__all__ = [
    "FORMAT_HINT",
    "OUTPUT_FORMATS",
    "format_instruction",
    "format_token_ids",
    "reasoning_text",
    "report_part",
    "reward_inputs",
    "training_target",
    "well_formatted_fraction",
]

OUTPUT_FORMATS = ("plain", "think_report")
FORMAT_HINT = (
    "First list the findings you see inside <think> </think>, then write the report inside <report> </report>."
)


def _check(fmt: str) -> str:
    if fmt not in OUTPUT_FORMATS:
        raise ValueError(f"prompt.output_format must be one of {', '.join(OUTPUT_FORMATS)}, got {fmt!r}")
    return fmt


def format_instruction(instruction: str, fmt: str) -> str:
    """The instruction a model of format `fmt` is given: unchanged for plain, + FORMAT_HINT for think_report."""
    return instruction if _check(fmt) == "plain" else f"{instruction} {FORMAT_HINT}"


def reasoning_text(labels: Sequence[float] | np.ndarray) -> str:
    """The reasoning span of an SFT target: observations labelled present (1) or possible (-1), or "no finding"."""
    row = np.asarray(labels, dtype=np.float64)
    if row.shape != (len(OBSERVATIONS),):
        raise ValueError(
            f"labels must have {len(OBSERVATIONS)} entries (harness.constants.OBSERVATIONS), got shape {row.shape}"
        )
    names = [
        name.lower() for name, v in zip(OBSERVATIONS, row, strict=True) if v in (1.0, -1.0) and name != "No Finding"
    ]
    return " , ".join(names) if names else "no finding"


def training_target(report: str, labels: Sequence[float] | np.ndarray | None, fmt: str) -> str:
    """The SFT target of a sample: the report (plain) or `<think> R </think> <report> REPORT </report>`."""
    if _check(fmt) == "plain":
        return report
    if labels is None:
        raise ValueError("output_format think_report needs the sample's labels to write the reasoning span")
    return f"<think> {reasoning_text(labels)} </think> <report> {report.strip()} </report>"


def report_part(text: str, fmt: str) -> str:
    """What validation, test and the clinical rewards score: the text (plain) or its report part (module doc)."""
    return text if _check(fmt) == "plain" else extract_report(text)


def well_formatted_fraction(texts: Sequence[str]) -> float:
    """Share of `texts` with MRG-R1's `<think>...</think><report>...</report>` layout (0.0 for no texts)."""
    return float(np.mean([format_ok(t) for t in texts])) if len(texts) else 0.0


def reward_inputs(reward, texts: Sequence[str], fmt: str) -> list[str]:
    """The texts the reward `reward` (a registered name, `module:function` or a weighted mix, or the function one
    resolved to) scores: raw outputs for a reward with `scores_raw_text` (a mix extracts the parts itself) or a
    plain model, else their report parts."""
    fn = reward if callable(reward) else None  # resolved once per run by the RL loop (harness/grpo/reward.py)
    if _check(fmt) == "plain" or getattr(fn or resolve_reward(reward), "scores_raw_text", False):
        return list(texts)
    return [report_part(t, fmt) for t in texts]


def format_token_ids(tokenizer) -> list[int]:
    """Sorted ids of the tokens that overlap one of the four tags when `tokenizer` encodes an SFT target (the
    tags are split the same way whatever the reasoning and the report: spaces separate them from both)."""
    text = training_target("x", np.zeros(len(OBSERVATIONS)), "think_report")
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans = [(at, at + len(tag)) for tag in TAGS for at in _occurrences(text, tag)]
    return sorted({int(i) for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"], strict=True)
                   if any(a < end and start < b for start, end in spans)})


def _occurrences(text: str, tag: str) -> list[int]:
    out, at = [], text.find(tag)
    while at >= 0:
        out.append(at)
        at = text.find(tag, at + 1)
    return out
