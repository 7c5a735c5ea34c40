"""Writing a report for a case, with the CheXpert labels that its text states."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.constants import NEGATIVE, OBSERVATIONS, POSITIVE, UNCERTAIN
from harness.data.cleaning import clean_report
from harness.data.phantom.case import Case
from harness.data.phantom.config import PhantomConfig
from harness.data.phantom.phrases import (
    BILATERAL,
    BILATERAL_HEDGED,
    DEVICE_TEXT,
    HEDGED,
    IMPRESSION_NORMAL,
    MAX_WORDS,
    MIN_WORDS,
    NEGATION_WEIGHT,
    NORMAL,
    ORDINAL,
    POSITIVE_TEXT,
    SECTIONS,
    SEV_WORD,
)
from harness.data.phantom.variation import vary_report
from harness.data.phantom.vocabulary import FINDINGS


@dataclass
class Report:
    text: str  # cleaned (iu_xray style)
    labels: list[int | None]  # 14 values, CheXpert convention, as the text states them


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def _positive_sentence(case: Case, name: str, rng: np.random.Generator) -> str:
    options = statement_templates(case, name)
    sev = _pick(rng, severity_words(case, name))
    return fill_template(_pick(rng, options), case, name, sev)


def statement_templates(case: Case, name: str) -> tuple[str, ...]:
    """The templates a present finding's statement is drawn from (hedged or not, one side or both)."""
    bilateral = case.laterality.get(name, "") == "bilateral"
    if name in case.uncertain:
        return (BILATERAL_HEDGED if bilateral else HEDGED)[name]
    return (BILATERAL if bilateral else POSITIVE_TEXT)[name]


def severity_words(case: Case, name: str) -> tuple[str, ...]:
    """The words that may stand for the finding's severity ("" for an ungraded finding)."""
    return SEV_WORD.get(name, {}).get(case.severity.get(name, ""), ("",))


def fill_template(template: str, case: Case, name: str, sev: str) -> str:
    """One template filled with the case's side, zone, lobe and rib and the severity word ``sev``."""
    zone = case.zone.get(name, "lower")
    lobe = {"upper": "upper lobe", "mid": "mid lung", "lower": "lower lobe"}[zone]
    text = template.format(
        sev=sev,
        sevly=_adverb(sev),
        side=case.laterality.get(name, ""),
        zone=zone,
        lobe=lobe,
        ordinal=ORDINAL.get(case.rib or 0, ""),
    )
    return " ".join(text.split())


def _adverb(word: str) -> str:
    return {"mild": "mildly", "moderate": "moderately", "marked": "markedly", "severe": "severely"}.get(word, word)


_SECTION_OF = {name: index for index, members in enumerate(SECTIONS) for name in members}


def _negations(chosen: list[str], rng: np.random.Generator) -> list[tuple[str, tuple[str, ...]]]:
    """Negate the chosen absent findings; merge them into one sentence when a shared phrase exists."""
    sentences = []
    while chosen:
        groups = [g for g in NORMAL if chosen[0] in g and set(g) <= set(chosen) and g != ("Lung Opacity",)]
        groups.sort(key=len, reverse=True)
        if groups:
            group = groups[0] if rng.random() < 0.7 else groups[-1]
            sentences.append((_pick(rng, NORMAL[group]), group))
        else:
            group = (chosen[0],)
        chosen = [c for c in chosen if c not in group]
    return sentences


def compose_report(case: Case, rng: np.random.Generator, cfg: PhantomConfig | None = None) -> Report:
    """Write the report for a case and the labels that its text states.

    Order: heart and mediastinum, lungs, pleura, bones, devices. Every present finding is stated (hedged
    ones labelled -1); the heart is always commented on; a random subset of absent findings is negated.
    """
    cfg = cfg or PhantomConfig()
    labels: dict[str, int] = {}
    sections: list[list[str]] = [[] for _ in range(len(SECTIONS) + 1)]
    kinds: dict[str, tuple[str, tuple[str, ...]]] = {}  # sentence -> (kind, payload), for the varied language

    def state(index: int, text: str, group: tuple[str, ...], value: int, kind: str = "negation") -> None:
        sections[index].append(text)
        labels.update(dict.fromkeys(group, value))
        kinds[text] = (kind, group)

    for name in case.findings:
        value = UNCERTAIN if name in case.uncertain else POSITIVE
        state(_SECTION_OF[name], _positive_sentence(case, name, rng), (name,), value, "finding")
    heart_normal = [n for n in SECTIONS[0] if n not in case.findings]
    if len(heart_normal) == 2 and rng.random() < 0.5:
        group = ("Cardiomegaly", "Enlarged Cardiomediastinum")
        state(0, _pick(rng, NORMAL[group]), group, NEGATIVE)
    elif "Cardiomegaly" in heart_normal:
        state(0, _pick(rng, NORMAL[("Cardiomegaly",)]), ("Cardiomegaly",), NEGATIVE)
    if not sections[1] and rng.random() < 0.85:
        state(1, _pick(rng, NORMAL[("Lung Opacity",)]), ("Lung Opacity",), NEGATIVE)

    absent = [n for n in FINDINGS if n not in case.findings and n not in labels and n != "Lung Opacity"]
    rng.shuffle(absent)
    chosen = [n for n in absent if rng.random() < cfg.negation_rate * NEGATION_WEIGHT[n]]
    optional = []  # negations that may be dropped to keep the report short
    for text, group in _negations(chosen, rng):
        index = max(_SECTION_OF[g] for g in group)
        state(index, text, group, NEGATIVE)
        optional.append((index, text, group))
    for device in case.devices:
        state(len(SECTIONS), _pick(rng, DEVICE_TEXT[device]), ("Support Devices",), POSITIVE, "device")
        kinds[sections[-1][-1]] = ("device", (device,))
    if not case.findings:
        labels["No Finding"] = POSITIVE
        if rng.random() < 0.35:
            sections[-1].append(_pick(rng, IMPRESSION_NORMAL))
            kinds[sections[-1][-1]] = ("impression", ())

    def words() -> int:
        return sum(len(s.split()) for lines in sections for s in lines)

    rng.shuffle(optional)
    while words() > MAX_WORDS and optional:
        index, text, group = optional.pop()
        sections[index].remove(text)
        for g in group:
            del labels[g]
    fillers = sorted((n for n in absent if n not in labels), key=NEGATION_WEIGHT.__getitem__)
    while words() < MIN_WORDS and fillers:
        name = fillers.pop()
        state(_SECTION_OF[name], _pick(rng, NORMAL[(name,)]), (name,), NEGATIVE)
    lines = [s for section in sections for s in section]
    if cfg.report_variation != "none":  # drawn after the plain report: "none" stays byte-identical
        statements = [[(kinds[s][0], s, kinds[s][1]) for s in section] for section in sections]
        lines = vary_report(statements, case, rng, cfg.report_variation)
    text = clean_report(". ".join(lines) + ".", "iu_xray")
    return Report(text=text, labels=[labels.get(name) for name in OBSERVATIONS])


def write_report(case: Case, rng: np.random.Generator) -> str:
    """The cleaned report text for a case (see ``compose_report`` for its labels)."""
    return compose_report(case, rng).text
