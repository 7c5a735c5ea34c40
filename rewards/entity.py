"""Offline clinical-entity F1: a lexicon-based overlap of clinical entities (for runs without RadGraph).

This is the project's own metric, not RadGraph and not a substitute reported under RadGraph's name. A report
becomes a set of entity tuples:

1. Findings with their presence: `(observation, presence)` for every observation the rule labeler
   (`rewards.chexpert.label_report`, No Finding included) gives a value, presence in
   {"positive", "uncertain", "negative"}; blank observations give nothing.
2. Modifiers of present findings: `(observation, modifier)` for each modifier word found in the same clause as
   a mention of the observation, when that observation is positive or uncertain in the clause's sentence
   (a negated finding takes no modifiers: "no large effusion" adds nothing beyond the negation).
   Clauses: the text is cut into sentences at `. ; : ! ?` and newlines (not at decimal points), and sentences
   into clauses at commas and at the labeler's terminators ("but", "however", "although", "though",
   "whereas", "while", "except", "yet", "and" before "there / the / a / it / this ..."). The observations a
   clause mentions are those the labeler gives any value for that clause alone; their presence is read
   from the labels of the whole sentence, so negation lists cut by commas keep their polarity.
   Modifier lexicon (word -> canonical value):
   - laterality: left; right; bilateral (bilateral, bilaterally, both, bibasilar, bibasal);
   - lung zone: upper; middle (middle, mid); lower (lower, bibasilar, bibasal);
   - severity / size: mild (mild, mildly, minimal, slight, slightly); moderate (moderate, moderately);
     severe (severe, severely, marked, markedly); small (small, tiny, trace); large (large, massive);
   - anatomical site: costophrenic angle ("costophrenic" / "cp angle"); hilum (hilum, hila, hilar,
     perihilar); apex (apex, apices, apical); base (base, bases, basilar, basal, bibasilar, bibasal);
     mediastinum (mediastinum, mediastinal); heart (heart, cardiac, retrocardiac); rib (rib, ribs).
   The canonical values are distinct strings, so a 2-tuple is unambiguous.

Example: "small left pleural effusion, no pneumothorax." gives {("Pleural Effusion", "positive"),
("Pleural Effusion", "small"), ("Pleural Effusion", "left"), ("Pneumothorax", "negative"),
("No Finding", "negative")}.

Score per pair: F1 = 2 |A & B| / (|A| + |B|) of the candidate's set A and the reference's set B. Both sets
empty (neither text has anything labelable, e.g. two empty texts) gives 1.0; one empty and the other not
gives 0.0 (the formula's value too). Entity sets are cached by text (LRU), since references repeat G times
per batch; the labeler runs on the report, on sentences that contain a modifier word and on clauses
containing one, so the metric runs at thousands of reports per second.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from harness.constants import NEGATIVE, OBSERVATIONS, POSITIVE, UNCERTAIN
from rewards.chexpert import label_report
from rewards.registry import register_reward

__all__ = ["MODIFIERS", "entity_f1", "extract_entities"]

Entity = tuple[str, str]

_PRESENCE = {POSITIVE: "positive", UNCERTAIN: "uncertain", NEGATIVE: "negative"}

# Single words -> canonical modifier values (a word can carry two, e.g. "bibasilar").
MODIFIERS: dict[str, tuple[str, ...]] = {
    "left": ("left",),
    "right": ("right",),
    "bilateral": ("bilateral",),
    "bilaterally": ("bilateral",),
    "both": ("bilateral",),
    "bibasilar": ("bilateral", "lower", "base"),
    "bibasal": ("bilateral", "lower", "base"),
    "upper": ("upper",),
    "middle": ("middle",),
    "mid": ("middle",),
    "lower": ("lower",),
    "mild": ("mild",),
    "mildly": ("mild",),
    "minimal": ("mild",),
    "slight": ("mild",),
    "slightly": ("mild",),
    "moderate": ("moderate",),
    "moderately": ("moderate",),
    "severe": ("severe",),
    "severely": ("severe",),
    "marked": ("severe",),
    "markedly": ("severe",),
    "small": ("small",),
    "tiny": ("small",),
    "trace": ("small",),
    "large": ("large",),
    "massive": ("large",),
    "costophrenic": ("costophrenic angle",),
    "hilum": ("hilum",),
    "hila": ("hilum",),
    "hilar": ("hilum",),
    "perihilar": ("hilum",),
    "apex": ("apex",),
    "apices": ("apex",),
    "apical": ("apex",),
    "base": ("base",),
    "bases": ("base",),
    "basilar": ("base",),
    "basal": ("base",),
    "mediastinum": ("mediastinum",),
    "mediastinal": ("mediastinum",),
    "heart": ("heart",),
    "cardiac": ("heart",),
    "retrocardiac": ("heart",),
    "rib": ("rib",),
    "ribs": ("rib",),
}
_MULTIWORD = {"cp angle": ("costophrenic angle",), "cp angles": ("costophrenic angle",)}

_MODIFIER_RE = re.compile(
    r"\b(?:" + "|".join(sorted((re.escape(k) for k in (*_MULTIWORD, *MODIFIERS)), key=len, reverse=True)) + r")\b"
)
_SENTENCE_SPLIT = re.compile(r"(?<!\d)\.|\.(?!\d)|[;:!?\n\r]+")
_CLAUSE_SPLIT = re.compile(
    r",|\b(?:but|however|although|though|whereas|while|except|yet|and(?= (?:there|the|a|an|it|this|these|that)\b))\b"
)
_CACHE_SIZE = 8192
_CACHE: OrderedDict[str, frozenset[Entity]] = OrderedDict()


def _modifiers(text: str) -> set[str]:
    found: set[str] = set()
    for match in _MODIFIER_RE.finditer(text):
        word = match.group(0)
        found.update(_MULTIWORD.get(word) or MODIFIERS[word])
    return found


def _extract(report: str) -> frozenset[Entity]:
    entities: set[Entity] = set()
    labels = label_report(report)
    for i, value in enumerate(labels):
        if not np.isnan(value):
            entities.add((OBSERVATIONS[i], _PRESENCE[int(value)]))
    lowered = report.lower()
    if not _MODIFIER_RE.search(lowered):
        return frozenset(entities)
    for sentence in _SENTENCE_SPLIT.split(lowered):
        if not _MODIFIER_RE.search(sentence):
            continue
        sentence_labels = label_report(sentence)
        present = [(i, name) for i, name in enumerate(OBSERVATIONS)
                   if i != 0 and sentence_labels[i] in (POSITIVE, UNCERTAIN)]
        if not present:
            continue
        for clause in _CLAUSE_SPLIT.split(sentence):
            mods = _modifiers(clause)
            if not mods:
                continue
            clause_labels = label_report(clause)
            for i, name in present:
                if not np.isnan(clause_labels[i]):
                    entities.update((name, mod) for mod in mods)
    return frozenset(entities)


def extract_entities(report: str) -> set[Entity]:
    """The clinical entities of one report (see the module docstring), as a new set of tuples."""
    if not isinstance(report, str):
        raise TypeError(f"reports must be strings, got {type(report).__name__}")
    cached = _CACHE.get(report)
    if cached is None:
        cached = _extract(report)
        _CACHE[report] = cached
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(report)
    return set(cached)


def _pair_f1(a: set[Entity], b: set[Entity]) -> float:
    if not a and not b:
        return 1.0
    return 2.0 * len(a & b) / (len(a) + len(b))


def entity_f1(hyps: Sequence[str], refs: Sequence[str]) -> np.ndarray:
    """Offline clinical-entity F1 of each hypothesis against its reference: float array `[N]` in [0, 1]."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    scores = [_pair_f1(extract_entities(h), extract_entities(r)) for h, r in zip(hyps, refs, strict=True)]
    return np.array(scores, dtype=np.float64)


@register_reward("entity_f1")
def entity_f1_reward(candidates: list[str], references: list[str], **_) -> np.ndarray:
    """Offline clinical-entity F1 (lexicon-based entity overlap; not RadGraph)."""
    return entity_f1(candidates, references)
