"""How both gold readers cut a report into sentences: cleaned as the phantom's references are (iu_xray) and split
at its " . " marks. Below gold_reader.py and gold_reader_v2.py, which both read sentences through it."""

from __future__ import annotations

from harness.data.cleaning import clean_report


def sentences(report: str) -> list[str]:
    """The sentences of a report as the reader sees them: cleaned (iu_xray) and split at its " . " marks."""
    out, current = [], []
    for token in clean_report(report, "iu_xray").split():
        if token == ".":
            if current:
                out.append(" ".join(current))
            current = []
        else:
            current.append(token)
    if current:
        out.append(" ".join(current))
    return out
