"""The part of an output that is scored: MRG-R1's layout (paper 002), `<think>...</think>` then `<report>...</report>`.

A text has the layout when it is, exactly,

    optional whitespace, "<think>", THINK, "</think>", optional whitespace, "<report>", REPORT, "</report>",
    optional whitespace

where THINK and REPORT contain none of the four tags (so no nested, repeated or stray tags anywhere), and
REPORT has at least one non-whitespace character. THINK may be empty: the layout is structure, not reasoning.
Tags are matched exactly (lowercase, no spaces inside the angle brackets). Anything else is broken: a missing or
unclosed tag, tags in the wrong order, a second `<think>` or `<report>` block, text before `<think>` or after
`</report>`, an empty report.

`format_ok(text)` says whether the layout holds (the format reward, rewards/format.py, scores it).
`extract_report(text)` is the part that the clinical rewards score: REPORT (stripped) when the layout holds;
otherwise the whole text with every one of the four tags replaced by a space, then stripped. A plain report
without tags is thus returned unchanged (stripped), and a broken output is still scored on all its words
(the format reward is what penalises the broken structure).

Text only: no reward is registered here, so the composites (rewards/composite.py), the format reward and
harness/prompting/output_format.py all read it from below.
"""

from __future__ import annotations

import re

__all__ = ["TAGS", "extract_report", "format_ok"]

TAGS = ("<think>", "</think>", "<report>", "</report>")
_ANY_TAG = re.compile(r"</?(?:think|report)>")
_LAYOUT = re.compile(r"\s*<think>(.*?)</think>\s*<report>(.*?)</report>\s*", re.DOTALL)


def _report_part(text: str) -> str | None:
    """REPORT of a well-formed text, else None."""
    match = _LAYOUT.fullmatch(text)
    if match is None:
        return None
    think, report = match.group(1), match.group(2)
    if _ANY_TAG.search(think) or _ANY_TAG.search(report) or not report.strip():
        return None
    return report.strip()


def format_ok(text: str) -> bool:
    """True when `text` has MRG-R1's `<think>...</think><report>...</report>` layout (module docstring)."""
    if not isinstance(text, str):
        raise TypeError(f"texts must be strings, got {type(text).__name__}")
    return _report_part(text) is not None


def extract_report(text: str) -> str:
    """The report part of `text`; for a broken format, the text with the tags replaced by spaces, stripped."""
    if not isinstance(text, str):
        raise TypeError(f"texts must be strings, got {type(text).__name__}")
    report = _report_part(text)
    if report is not None:
        return report
    return _ANY_TAG.sub(" ", text).strip()
