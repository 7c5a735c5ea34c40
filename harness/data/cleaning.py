"""R2Gen-style report cleaning (own implementation of the convention, not a port).

The cleaned form is what every reference report, BLEU reward and NLG metric in the harness sees:
lowercase sentences of letters, digits and single spaces, joined with " . " and ending with " .".
"""

from __future__ import annotations

import re

STYLES: tuple[str, ...] = ("iu_xray", "mimic_cxr")

# A list marker: one or two digits and a dot at the start of the text or after whitespace, followed by
# whitespace or a letter ("1. the heart", "2.lungs"). A dot followed by a digit is a decimal point instead.
_NUMBERING = re.compile(r"(^|\s)\d{1,2}\.(?=\s|[a-z])")
_REPEATED_DOTS = re.compile(r"\.(\s*\.)+")
# Sentence boundary: any dot that is not a decimal point between two digits.
_SENTENCE_DOT = re.compile(r"(?<!\d)\.|\.(?!\d)")
# Characters removed without leaving a gap, so words keep their letters ("patient's" -> "patients",
# "2.5" -> "25" as in R2Gen's cleaned references).
_JOINERS = re.compile(r"[\"'`\u2018\u2019\u201c\u201d.]")
_NON_WORD = re.compile(r"[^a-z0-9]+")


def clean_report(text: str, style: str = "iu_xray") -> str:
    """Return the R2Gen-style cleaned form of a radiology report.

    Rules, applied in order:
    1. Lowercase; every run of whitespace (newlines included) becomes one space.
    2. Runs of dots, possibly separated by spaces (``".."``, ``". ."``), become one dot.
    3. List numbering (one or two digits then a dot, at the start or after whitespace, followed by a
       space or a letter: ``"1. "``, ``"2.lungs"``) becomes a sentence boundary. As in R2Gen, a small number
       that ends a sentence right before the next one ("rib 5. no effusion") is taken for numbering too.
    4. The text is split into sentences at every dot that is not a decimal point between two digits.
    5. In each sentence, quotes, apostrophes and decimal points are deleted; every other character that is
       not a letter or digit (punctuation, hyphens, slashes, underscores, symbols) becomes a space; then
       whitespace is collapsed and trimmed.
    6. Empty sentences are dropped; the rest are joined with ``" . "`` and the result ends with ``" ."``.
       A report with no words left becomes ``""``.

    Both styles follow these rules. R2Gen's MIMIC-CXR cleaner differs from its IU-Xray one only in also
    flattening newlines, underscore runs (the "___" de-identification placeholders) and double spaces;
    rules 1 and 5 already do that for every report, so ``style`` only checks the caller's intent.

    The function is idempotent: ``clean_report(clean_report(t)) == clean_report(t)``.
    """
    if style not in STYLES:
        raise ValueError(f"unknown cleaning style {style!r}; expected one of {STYLES}")
    text = " ".join(text.lower().split())
    text = _REPEATED_DOTS.sub(".", text)
    text = _NUMBERING.sub(r"\1. ", text)
    sentences = (_clean_sentence(part) for part in _SENTENCE_DOT.split(text))
    kept = [s for s in sentences if s]
    return " . ".join(kept) + " ." if kept else ""


def _clean_sentence(sentence: str) -> str:
    sentence = _JOINERS.sub("", sentence)
    return " ".join(_NON_WORD.sub(" ", sentence).split())
