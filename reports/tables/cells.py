"""Cell and table formatting shared by the layouts: numbers, p-values, our mean [interval] cells, Markdown,
LaTeX escaping."""

from __future__ import annotations

import math

import pandas as pd


def fmt(v, digits: int) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


def fmt_p(p: float) -> str:
    return "–" if not math.isfinite(p) else (f"{p:.3f}" if p >= 0.01 else f"{p:.1e}")


def arm_n(df: pd.DataFrame, arm: str) -> int:
    sub = df[df.arm == arm]
    return int(sub.n.max()) if len(sub) else 0


def our_cell(rec, digits: int, arm_n: int, latex: bool = False) -> str:
    if rec.n == 0:
        return "–"
    cell = fmt(rec["mean"], digits)
    if rec.n > 1:
        cell += f" [{fmt(rec.ci_lo, digits)}, {fmt(rec.ci_hi, digits)}]"
    if rec.n != arm_n:
        cell += f" (n={rec.n})"
    return cell  # no decision mark: differences here are exploratory (decisions: reports/verdicts.py)


def tests_used(df: pd.DataFrame) -> list[str]:
    return sorted({str(t) for t in df.test.dropna() if not str(t).startswith(("none", "refused"))})


def md_table(header: list[str], rows: list[list[str]]) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in [header] + rows]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
    return "\n".join(lines)


_LATEX_ESC = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
              "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}", "–": "--"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_ESC.get(ch, ch) for ch in str(text))
