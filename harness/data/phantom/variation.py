"""The varied report language (data.report_variation "low" / "high"): a plain report's statements rewritten,
merged, split and followed by an impression, drawn from the report's own generator after the plain report.

Every statement keeps its meaning (the labels `compose_report` gives it), so a varied report's labels are the
plain report's. The choices are whole lists (`finding_sentences`, `negation_sentences`, ...), drawn uniformly,
so a test can enumerate every sentence the varied grammar can write (tests/harness/data/test_phantom_variation.py).
Level "none" never reaches this module: the plain report is returned untouched (byte-identical sets).
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np

from harness.data.phantom import phrases as plain
from harness.data.phantom.case import Case
from harness.data.phantom.phrasings import (
    ADVERB,
    CLEAR_WITHOUT,
    DEVICE_TEXT,
    FRAMES,
    FRAMES_PNEUMONIA,
    HEDGE_FRAMES,
    IMPRESSION_NORMAL,
    INCIDENTAL,
    JOINS,
    LEVELS,
    NEG_FRAMES,
    NEG_LIST_FRAMES,
    NEG_NOUN,
    NORMAL,
    NP,
    NP_BILATERAL,
    PREDICATE,
    PREDICATE_HEDGED,
    SEV_WORD,
    SIDE_FORMS,
)

LOBE = {"upper": "upper lobe", "mid": "mid lung", "lower": "lower lobe"}


def _pick(rng: np.random.Generator, options) -> str:
    return options[int(rng.integers(len(options)))]


def _article(text: str) -> str:
    """Fill "{a}" with a/an for the word after it, then collapse spaces."""
    words = text.split()
    out = []
    for i, word in enumerate(words):
        if word == "{a}":
            nxt = words[i + 1] if i + 1 < len(words) else ""
            word = "an" if nxt[:1] in ("a", "e", "i", "o", "u") else "a"
        out.append(word)
    return " ".join(out)


def _fill(template: str, **slots: str) -> str:
    return _article(" ".join(template.format(**slots).split()))


@lru_cache(maxsize=4096)
def _finding_sentences(name: str, side: str, severity: str, zone: str, rib: int, hedged: bool,
                       bare: bool) -> tuple[str, ...]:
    bilateral = side == "bilateral"
    out: list[str] = []
    sevs = SEV_WORD.get(name, {}).get(severity, ("",))
    sideds = SIDE_FORMS.get(side, (side,))
    nps = (NP_BILATERAL if bilateral else NP)[name]
    predicates = () if bilateral or bare else (PREDICATE_HEDGED if hedged else PREDICATE).get(name, ())
    for sev, sided in itertools.product(sevs, sideds):
        slots = {"sev": sev, "sevly": ADVERB.get(sev, sev), "side": side, "sided": sided, "zone": zone,
                 "lobe": LOBE[zone], "ordinal": plain.ORDINAL.get(rib, "")}
        for template in predicates:
            out.append(_fill(template, **slots))
        for np_template, number in nps:
            np_text = _fill(np_template, **slots)
            if bare:  # an impression's list item
                out.append(_fill("possible {np}" if hedged else "{np}", np=np_text))
                continue
            frames = HEDGE_FRAMES[number] if hedged else FRAMES[number]
            if name == "Pneumonia" and not hedged:
                frames = frames + FRAMES_PNEUMONIA
            out += [_fill(frame, np=np_text, a="{a}") for frame in frames]
    return tuple(dict.fromkeys(out))


def finding_sentences(case: Case, name: str, bare: bool = False) -> tuple[str, ...]:
    """Every sentence the varied grammar can write for the case's finding `name` (hedged when the case hedges
    it); `bare`: the noun phrases an impression lists it with."""
    return _finding_sentences(name, case.laterality.get(name, ""), case.severity.get(name, ""),
                              case.zone.get(name, "lower"), case.rib or 0, name in case.uncertain, bare)


def noun_list(nouns: tuple[str, ...]) -> str:
    """ "a", "a or b", "a b or c" (commas are cleaned away in the references anyway)."""
    return nouns[0] if len(nouns) == 1 else " ".join(nouns[:-1]) + " or " + nouns[-1]


@lru_cache(maxsize=1024)
def negation_sentences(group: tuple[str, ...]) -> tuple[str, ...]:
    """Every sentence that states the findings of `group` absent: its normality statements (plain and varied)
    and, when each has a negation noun, "no a b or c" in every frame and noun choice."""
    out = list(plain.NORMAL.get(group, ())) + list(NORMAL.get(group, ()))
    if all(name in NEG_NOUN for name in group):
        frames = NEG_FRAMES if len(group) == 1 else NEG_LIST_FRAMES
        for nouns in itertools.product(*(NEG_NOUN[name] for name in group)):
            out += [frame.format(n=noun_list(nouns)) for frame in frames]
    return tuple(dict.fromkeys(out))


@lru_cache(maxsize=1024)
def clear_without_sentences(group: tuple[str, ...]) -> tuple[str, ...]:
    """ "the lungs are clear without a b or c": Lung Opacity and `group` absent."""
    return tuple(frame.format(n=noun_list(nouns)) for frame in CLEAR_WITHOUT
                 for nouns in itertools.product(*(NEG_NOUN[name] for name in group)))


def device_sentences(device: str) -> tuple[str, ...]:
    return plain.DEVICE_TEXT[device] + DEVICE_TEXT[device]


def impression_normal_sentences() -> tuple[str, ...]:
    return plain.IMPRESSION_NORMAL + IMPRESSION_NORMAL


# A statement: (kind, text, payload). kind "finding" (payload: the finding's name), "negation" (the group of
# findings it states absent), "device", "impression".
Statement = tuple[str, str, tuple[str, ...]]


def _rephrase(stmt: Statement, case: Case, rng: np.random.Generator, p: dict[str, float]) -> list[Statement]:
    kind, text, payload = stmt
    if kind == "negation" and len(payload) > 1 and rng.random() < p["split"]:
        return [("negation", _pick(rng, negation_sentences((name,))), (name,)) for name in payload]
    if rng.random() >= p["rephrase"]:
        return [stmt]
    if kind == "finding":
        return [(kind, _pick(rng, finding_sentences(case, payload[0])), payload)]
    if kind == "negation":
        return [(kind, _pick(rng, negation_sentences(payload)), payload)]
    if kind == "device":
        return [(kind, _pick(rng, device_sentences(payload[0])), payload)]
    return [(kind, _pick(rng, impression_normal_sentences()), payload)]


def _nounable(stmt: Statement) -> bool:
    return stmt[0] == "negation" and all(name in NEG_NOUN for name in stmt[2])


def _merge(a: Statement, b: Statement, rng: np.random.Generator) -> Statement | None:
    """Two neighbouring statements as one sentence, when they merge: two negations into one list, "the lungs
    are clear" with a negation list ("... without a or b"), two finding statements joined by "and"."""
    if _nounable(a) and _nounable(b):
        group = a[2] + b[2]
        return ("negation", _pick(rng, [s for s in negation_sentences(group) if " or " in s]), group)
    if a[0] == "negation" and a[2] == ("Lung Opacity",) and _nounable(b):
        return ("negation", _pick(rng, clear_without_sentences(b[2])), a[2] + b[2])
    if a[0] == b[0] == "finding":
        return ("finding", _pick(rng, JOINS).format(x=a[1], y=b[1]), a[2] + b[2])
    return None


def vary_report(sections: list[list[Statement]], case: Case, rng: np.random.Generator, level: str) -> list[str]:
    """The report's sentences in the varied language at `level` ("low" or "high"; see phrasings.LEVELS)."""
    p = LEVELS[level]
    out: list[str] = []
    for lines in sections:
        stmts = [s for stmt in lines for s in _rephrase(stmt, case, rng, p)]
        merged: list[Statement] = []
        for stmt in stmts:
            joined = _merge(merged[-1], stmt, rng) if merged and rng.random() < p["merge"] else None
            if joined is None:
                merged.append(stmt)
            else:
                merged[-1] = joined
        out += [text for _, text, _ in merged]
    if rng.random() < p["incidental"]:
        count = 1 if rng.random() < 0.6 else 2
        for line in rng.choice(INCIDENTAL, size=count, replace=False):
            out.insert(int(rng.integers(len(out) + 1)), str(line))
    if case.findings and rng.random() < p["impression"]:
        named = list(case.findings[:2])
        items = [_pick(rng, finding_sentences(case, name, bare=True)) for name in named]
        out.append("impression " + " and ".join(items))
    return out
