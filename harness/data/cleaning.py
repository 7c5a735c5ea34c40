"""Report cleaning with the same output as R2Gen's `clean_report_iu_xray` / `clean_report_mimic_cxr`.

REVA-PO's official code (and most published IU-Xray / MIMIC-CXR numbers) scores against references cleaned
by R2Gen's tokenizer, so BLEU is only comparable when the references are the same strings. The rules below are
a description of what R2Gen's cleaners do, including their quirks (hyphens kept, "and/or" -> "andor", any
"1. " deleted, empty sentences kept); `r2gen_clean` returns R2Gen's string exactly, `clean_report` the
whitespace tokens of it joined by single spaces, which is what R2Gen's model reads and its decoder writes.

`data.report_cleaning` picks the cleaner family (`cleaning_style`): "r2gen" (default) or "reva_po", REVA-PO's
official code, whose MIMIC-CXR cleaner is R2Gen's plus one substitution, ":" -> " :", after the list numbering
and before the sentence split (style "mimic_cxr_reva_po"); its IU-Xray cleaner is R2Gen's. R2Gen's sentence rule
still deletes the colon, so the substitution only separates words: "impression:no" -> "impression no" (R2Gen:
"impressionno"), and "word.:" now ends a sentence (". :" holds ". "). docs/paper_vs_code.md.
"""

from __future__ import annotations

import math
import re

STYLES: tuple[str, ...] = ("iu_xray", "mimic_cxr", "mimic_cxr_reva_po")
# data.report_cleaning: the cleaner family; (family, data set) -> style. The phantom set is written in IU-Xray's
# style (harness/data/phantom/report.py).
CLEANERS: tuple[str, ...] = ("r2gen", "reva_po")
_STYLE_OF = {
    ("r2gen", "iu_xray"): "iu_xray", ("r2gen", "mimic_cxr"): "mimic_cxr", ("r2gen", "phantom"): "iu_xray",
    ("reva_po", "iu_xray"): "iu_xray", ("reva_po", "mimic_cxr"): "mimic_cxr_reva_po", ("reva_po", "phantom"): "iu_xray",
}

# Runs shortened by repeated `str.replace(pair, single)` in R2Gen: each pass turns a run of n characters into
# ceil(n / 2), so after k passes a run of n is ceil(n / 2**k) long (a run of 9 dots survives IU's 3 passes as
# "..").  (character, passes) per style, in R2Gen's order; MIMIC first turns newlines into spaces.
_RUN_PASSES = {
    "iu_xray": ((".", 3),),
    "mimic_cxr": (("_", 7), (" ", 6), (".", 8)),
    "mimic_cxr_reva_po": (("_", 7), (" ", 6), (".", 8)),
}
# Substitutions after the list numbering, before the sentence split (REVA-PO's MIMIC-CXR cleaner).
_EXTRA = {"mimic_cxr_reva_po": ((":", " :"),)}
# List numbering, substituted in this order on the whole text: "1. " anywhere (also inside "11. ", "rib 1. "),
# then "N. " for N = 2..5 after a sentence end, then after a space, becomes a sentence end.
_NUMBERING: tuple[tuple[str, str], ...] = (
    ("1. ", ""),
    *((f". {n}. ", ". ") for n in range(2, 6)),
    *((f" {n}. ", ". ") for n in range(2, 6)),
)
_SENTENCE_END = ". "
# Deleted from each sentence before it is trimmed.
_QUOTES_AND_SLASHES = ('"', "/", "\\", "'")
# Deleted from each sentence after it is trimmed (so "b ." keeps its trailing space). R2Gen writes this class
# with an unescaped "-" between ":" and "[", a range: it also deletes ";<=>?@" and A-Z (gone anyway after
# lowercasing) and keeps the hyphen itself.
_PUNCTUATION = re.compile(r"[.,?;*!%^&_+():;<=>?@A-Z\[\]{}]")


def cleaning_style(dataset: str, cleaner: str = "r2gen") -> str:
    """The style `clean_report` uses for `dataset` under `data.report_cleaning = cleaner`."""
    if cleaner not in CLEANERS:
        raise ValueError(f"unknown report cleaning {cleaner!r}; expected one of {CLEANERS}")
    if (cleaner, dataset) not in _STYLE_OF:
        raise ValueError(f"no report cleaning for data set {dataset!r}; expected one of iu_xray, mimic_cxr, phantom")
    return _STYLE_OF[cleaner, dataset]


def _shorten_runs(text: str, char: str, passes: int) -> str:
    scale = 2**passes
    return re.sub(re.escape(char) + "{2,}", lambda m: char * math.ceil(len(m.group()) / scale), text)


def _clean_sentence(sentence: str) -> str:
    for char in _QUOTES_AND_SLASHES:
        sentence = sentence.replace(char, "")
    return _PUNCTUATION.sub("", sentence.strip().lower())


def r2gen_clean(text: str, style: str = "iu_xray") -> str:
    """R2Gen's cleaned report, the same string as its `clean_report_<style>` (spaces and all).

    1. MIMIC only: newlines become spaces. Runs of "_" (MIMIC), " " (MIMIC) and "." (both) are shortened as
       R2Gen's repeated pair replacements do (see `_RUN_PASSES`).
    2. List numbering: every "1. " is deleted; ". N. " and " N. " (N = 2..5) become ". ".
    3. Trim, lowercase, split into sentences at ". " (a dot followed by a space; "2.5" is not split).
    4. Per sentence: delete quotes, slashes and backslashes, trim, lowercase, delete the punctuation of
       `_PUNCTUATION` (hyphens, digits, "#", "$", "|", "~" and non-ASCII letters stay).
    5. Join every sentence, empty ones included, with " . " and append " ." ("" -> " .").
    Style "mimic_cxr_reva_po" is "mimic_cxr" with ":" -> " :" between steps 2 and 3 (REVA-PO's official code).
    """
    if style not in STYLES:
        raise ValueError(f"unknown cleaning style {style!r}; expected one of {STYLES}")
    if style.startswith("mimic_cxr"):
        text = text.replace("\n", " ")
    for char, passes in _RUN_PASSES[style]:
        text = _shorten_runs(text, char, passes)
    for old, new in (*_NUMBERING, *_EXTRA.get(style, ())):
        text = text.replace(old, new)
    sentences = text.strip().lower().split(_SENTENCE_END)
    return " . ".join(_clean_sentence(s) for s in sentences) + " ."


def clean_report(text: str, style: str = "iu_xray") -> str:
    """The whitespace tokens of `r2gen_clean(text, style)` joined by single spaces.

    R2Gen's tokenizer splits the cleaned report on whitespace and its decoder joins tokens with one space, so
    this is the reference R2Gen-style evaluations see (before R2Gen's vocabulary maps rare words to <unk>,
    which is a property of its model, not of the report). Idempotent: cleaning a cleaned report changes
    nothing. A report without words cleans to "." (R2Gen: " .").
    """
    return " ".join(r2gen_clean(text, style).split())


def has_words(cleaned: str) -> bool:
    """Whether a cleaned report holds any token besides the sentence separator."""
    return any(token != "." for token in cleaned.split())
