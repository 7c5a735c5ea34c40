"""The phantom's gold reader, version 2 (eval.gold_reader: v2): reads a report's meaning, not its templates.

Independent of every reward, as v1 (no module of rewards/ reaches it; it never calls the rule labeler). It shares
v1's labels and conventions (`gold_reader.py`: 1 present, -1 hedged, 0 negated, NaN not stated; No Finding 1 when
something was read and no finding is present or hedged), so `gold_scores` scores both alike.

Reading, per sentence (cleaned as the references are, split at " . "):
1. cues are marked: hedges before a finding ("possible", "may represent", "questionable", "suspicious for",
   "borderline", ...) and after it ("is not excluded", "cannot be excluded"); negations before ("no", "without",
   "no evidence of", "negative for", ...) and after ("is not seen", "has resolved", ...). As CheXpert, a hedged
   finding is uncertain (-1), which the gold counts as reported present (a hedged finding is drawn, faintly).
2. normality statements are read whole ("heart size is normal", "clear lungs", "the costophrenic angles are
   sharp", "the osseous structures are intact", ...): each states its findings absent; a normal impression ("no
   acute cardiopulmonary process") states nothing but counts as read.
3. findings are found by their terms (synonyms: "effusion", "pleural fluid", "blunting of the costophrenic
   angle"; "nodule", "mass"; "cardiac enlargement", "the heart is enlarged"; devices: pacemaker, tubes, lines,
   catheters, drains). A finding takes the nearest cue before it in its clause (clauses end at "and", "but",
   "with", "however", ...), else a cue after it in its clause, else it is present. Laterality and severity words
   are read as modifiers and do not change the label.

Degenerate text states nothing ("not stated": NaN, and it does not count as read for No Finding):
- repetition: a sentence with a word or a 2-3 word group repeated back to back ("effusion effusion") states
  nothing; a sentence that occurs twice in the report states nothing (every copy);
- broken grammar: a sentence ending in a connector or article ("no pleural effusion or") states nothing, and
  neither does the sentence after it (its torn-off tail: "... or . pneumothorax"); a negated or hedged list of two
  or more findings without "or"/"nor"/"and" before its last item ("no pneumothorax small left effusion", a run-on
  of two sentences) states nothing;
- keyword salad: a sentence naming two or more findings with no word but finding terms and modifiers
  ("cardiomegaly edema effusion pneumothorax") states nothing (a comma list needs its "and": the references'
  cleaning removes commas);
- contradiction: a finding stated absent and present (or hedged) in one report is NaN, and the report's No
  Finding is NaN (a negation with a side word, "no right effusion", does not contradict a left one).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from harness.constants import NEGATIVE, NO_FINDING, NUM_OBSERVATIONS, OBSERVATIONS, POSITIVE, UNCERTAIN
from harness.data.phantom.report_sentences import sentences

_OBS = {name: OBSERVATIONS.index(name) for name in OBSERVATIONS}
_FINDING_INDEX = np.array([i for i, n in enumerate(OBSERVATIONS) if n not in ("No Finding", "Support Devices")])

# Cue phrases -> marker tokens, in this order (longer and negation-bearing hedges first).
_CUES: tuple[tuple[str, str], ...] = (
    (r"(?:is |are )?(?:can ?not|could not|cannot) be (?:excluded|ruled out)", "<HP>"),
    (r"(?:is |are )?not (?:excluded|ruled out)", "<HP>"),
    (r"(?:is |are )?(?:not|no longer) (?:seen|identified|present|visualized|evident|demonstrated|appreciated)",
     "<NP>"),
    (r"(?:is |are |has |have )(?:absent|resolved)", "<NP>"),
    (r"can ?not exclude|cannot exclude|not exclude|may represent|may reflect|may be|might be|could represent|"
     r"could be|suspicious for|concerning for|suggestive of|question of|possible|possibly|probable|probably|"
     r"questionable|suspected|likely|borderline|equivocal|may|might", "<H>"),
    (r"no evidence of|no signs? of|no definite|negative for|free of|absence of|without|no|not|nor|neither", "<N>"),
)
_CUE_RE = [(re.compile(rf"\b(?:{pattern})\b"), marker) for pattern, marker in _CUES]

# Normality statements: (pattern, findings stated absent). Matched on the cue-marked text ("not" is "<N>").
_HEART = r"(?:the )?(?:heart|cardiac silhouette|cardiac size|heart size)(?: size)?"
_MEDIA = r"(?:the )?(?:mediastinum|mediastinal (?:contours|silhouette))"
_NORMAL_WORDS = r"(?:normal in size|normal|within normal limits|unremarkable|stable)"
_NORMALS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (rf"(?:the )?heart(?: size)? and (?:the )?mediastin\w*(?: contours| silhouette)? (?:are|is) {_NORMAL_WORDS}"
     r"|normal heart size and mediastinal contours|(?:the )?cardiomediastinal (?:silhouette|contours) (?:is|are) "
     rf"{_NORMAL_WORDS}|normal cardiomediastinal (?:silhouette|contours)",
     ("Cardiomegaly", "Enlarged Cardiomediastinum")),
    (rf"{_HEART} (?:(?:is|are|appears) )?{_NORMAL_WORDS}|normal (?:heart|cardiac) (?:size|silhouette)",
     ("Cardiomegaly",)),
    (rf"{_MEDIA} (?:(?:is|are|appears?) )?{_NORMAL_WORDS}|normal mediastinal (?:contours|silhouette)",
     ("Enlarged Cardiomediastinum",)),
    (r"(?:the )?lungs are (?:well expanded and )?(?:grossly )?clear(?: bilaterally)?|clear lungs",
     ("Lung Opacity",)),
    (r"(?:the )?costophrenic angles are sharp|sharp costophrenic angles", ("Pleural Effusion",)),
    (r"(?:the )?(?:visualized )?(?:osseous structures|bones) (?:are )?(?:intact|unremarkable)", ("Fracture",)),
    (r"<N> acute (?:cardiopulmonary|intrathoracic) (?:abnormality|process|disease)|<N> acute disease"
     r"|normal chest(?: radiograph)?", ()),
)
# Finding terms: (pattern, observation). Earlier patterns win overlaps.
_TERMS: tuple[tuple[str, str], ...] = (
    (r"mediastin\w*(?: contours| silhouette)? (?:(?:is|are|appears?) )?(?:<[HN]> )*(?:\w+ly )?(?:<[HN]> )*"
     r"(?:widened|enlarged)|(?:widened|enlarged) mediastinum|widening of (?:the )?mediastin\w*(?: contours)?"
     r"|enlargement of (?:the )?mediastinum|mediastinal (?:widening|enlargement)|enlarged cardiomediastinal silhouette"
     r"|cardiomediastinal silhouette (?:is )?(?:<[HN]> )*enlarged", "Enlarged Cardiomediastinum"),
    (r"(?:heart|cardiac silhouette|cardiac size|heart size)(?: size)? (?:(?:is|are|appears) )?(?:<[HN]> )*(?:\w+ly )?"
     r"(?:<[HN]> )*enlarged|heart size is <H>|cardiomegaly|cardiac enlargement|enlarged (?:heart|cardiac silhouette)"
     r"|enlargement of the (?:heart|cardiac silhouette)", "Cardiomegaly"),
    (r"pacemaker|pacer|defibrillator|(?:endotracheal|et|nasogastric|ng|enteric|feeding|chest|tracheostomy) tubes?"
     r"|(?:central venous |central |picc |ij |venous )(?:line|catheter)s?|catheters?|(?:pleural )?drains?"
     r"|sternotomy wires", "Support Devices"),
    (r"consolidat\w*", "Consolidation"),
    (r"pneumonia|infectious process|infection", "Pneumonia"),
    (r"airspace disease|opacit(?:y|ies)|infiltrates?", "Lung Opacity"),
    (r"nodul\w*|mass(?:es)?", "Lung Lesion"),
    (r"edema|vascular congestion", "Edema"),
    (r"atelecta\w*|collapse", "Atelectasis"),
    (r"pneumothora\w*", "Pneumothorax"),
    (r"(?:pleural )?effusions?|pleural fluid|blunting of the (?:\S+ )?costophrenic angles?"
     r"|blunted costophrenic angles?", "Pleural Effusion"),
    (r"pleural thickening|pleural plaques?|fibrothorax", "Pleural Other"),
    (r"fractur\w*|acute (?:osseous|bony) abnormality", "Fracture"),
)
_NORMAL_RE = [(re.compile(rf"(?<![\w-])(?:{p})(?![\w-])"), group) for p, group in _NORMALS]
_TERM_RE = [(re.compile(rf"(?<![\w-])(?:{p})(?![\w-])"), name) for p, name in _TERMS]
_BREAKERS = frozenset({"and", "but", "however", "although", "though", "while", "whereas", "with", "which"})
_LIST_JOINS = frozenset({"or", "nor", "and"})
_DANGLING = frozenset({"or", "and", "nor", "of", "with", "without", "the", "a", "an", "is", "are", "there", "in",
                       "at", "to", "for", "no", "not", "<N>", "<H>"})
_SIDES = frozenset({"left", "right", "left-sided", "right-sided"})
_MODIFIERS = _SIDES | frozenset({"bilateral", "mild", "moderate", "severe", "small", "large", "tiny", "trace",
                                 "minimal", "marked", "extensive", "dense", "faint", "subtle", "slight", "upper",
                                 "lower", "mid", "lung", "lobe", "basilar", "apical", "pulmonary", "interstitial",
                                 "focal", "acute", "impression", "moderate-sized", "subsegmental", "bibasilar",
                                 "airspace", "pleural", "rib", "patchy", "multiple"})


def _mark(sentence: str) -> str:
    for regex, marker in _CUE_RE:
        sentence = regex.sub(marker, sentence)
    return sentence


def _degenerate_words(words: list[str]) -> bool:
    """A word or a 2-3 word group repeated back to back."""
    for n in (1, 2, 3):
        for i in range(len(words) - 2 * n + 1):
            if words[i:i + n] == words[i + n:i + 2 * n]:
                return True
    return False


def _token_spans(regex: re.Pattern, text: str, starts: list[int], taken: list[bool]) -> list[tuple[int, int]]:
    """Token [start, end) spans of the regex's matches that overlap no taken token (then taken)."""
    out = []
    for m in regex.finditer(text):
        a = next(i for i, s in enumerate(starts) if s >= m.start())
        b = sum(1 for s in starts if s < m.end())
        if b > a and not any(taken[a:b]):
            taken[a:b] = [True] * (b - a)
            out.append((a, b))
    return out


# One reading of a sentence: (observation index, value, side-qualified negation) per statement, and whether
# anything was read (a normal impression reads as nothing but counts).
Reading = tuple[tuple[tuple[int, int, bool], ...], bool]


@lru_cache(maxsize=65536)
def read_sentence(sentence: str) -> Reading:
    """What one cleaned sentence states (see the module docstring); ((), False) for a degenerate sentence."""
    words = sentence.split()
    if not words or _degenerate_words(words) or words[-1] in _DANGLING:
        return (), False
    text = _mark(sentence)
    tokens = text.split()
    starts, pos = [], 0
    for token in tokens:
        starts.append(text.index(token, pos))
        pos = starts[-1] + len(token)
    taken = [False] * len(tokens)
    out: list[tuple[int, int, bool]] = []
    read = False
    for regex, group in _NORMAL_RE:
        for _ in _token_spans(regex, text, starts, taken):
            read = True
            out += [(_OBS[name], NEGATIVE, False) for name in group]
    mentions = [(a, b, name) for regex, name in _TERM_RE for a, b in _token_spans(regex, text, starts, taken)]
    mentions.sort()
    if len(mentions) >= 2 and all(taken[i] or t in _MODIFIERS for i, t in enumerate(tokens)):
        return (), False  # keyword salad
    breaks = [i for i, t in enumerate(tokens) if t in _BREAKERS and not taken[i]]
    scopes: dict[int, list[int]] = {}  # pre-cue position -> the mentions it governs
    for a, b, name in mentions:
        start = max([i + 1 for i in breaks if i < a], default=0)
        end = min([i for i in breaks if i >= b], default=len(tokens))
        inside = [t for t in tokens[a:b] if t in ("<N>", "<H>")]
        pre = [i for i in range(start, a) if tokens[i] in ("<N>", "<H>")]
        post = [t for t in tokens[b:end] if t in ("<NP>", "<HP>")]
        sided = False
        if inside:
            value = NEGATIVE if inside[0] == "<N>" else UNCERTAIN
        elif pre:
            value = NEGATIVE if tokens[pre[-1]] == "<N>" else UNCERTAIN
            sided = any(t in _SIDES for t in tokens[pre[-1]:a])
            scopes.setdefault(pre[-1], []).append(a)
        elif post:
            value = NEGATIVE if post[0] == "<NP>" else UNCERTAIN
        else:
            value = POSITIVE
        out.append((_OBS[name], value, sided and value == NEGATIVE))
        read = True
    for governed in scopes.values():  # a list needs "or"/"nor"/"and" before its last item
        if len(governed) >= 2 and not any(t in _LIST_JOINS for t in tokens[governed[-2]:governed[-1]]):
            return (), False
    return tuple(out), read


def read_report(report: str) -> np.ndarray:
    """float [14] labels the report states (1, 0, -1, NaN), read for meaning (see the module docstring)."""
    parts = sentences(report)
    counts: dict[str, int] = {}
    for s in parts:
        counts[s] = counts.get(s, 0) + 1
    found: dict[int, set[int]] = {}
    sided_negative: set[int] = set()
    read_any = False
    torn = False  # the previous sentence dangled: this one is its tail
    for s in parts:
        words = s.split()
        skip = torn or counts[s] > 1
        torn = bool(words) and words[-1] in _DANGLING
        if skip:
            continue
        statements, read = read_sentence(s)
        read_any |= read
        for index, value, sided in statements:
            if sided:
                sided_negative.add(index)
            else:
                found.setdefault(index, set()).add(value)
    labels = np.full(NUM_OBSERVATIONS, np.nan)
    contradiction = False
    for index, values in found.items():
        if NEGATIVE in values and len(values) > 1:
            contradiction = True  # stated absent and present: neither
        elif POSITIVE in values:
            labels[index] = POSITIVE
        else:
            labels[index] = UNCERTAIN if UNCERTAIN in values else NEGATIVE
    for index in sided_negative:
        if index not in found:
            labels[index] = NEGATIVE
    stated = labels[_FINDING_INDEX]
    if read_any and not contradiction and not np.any((stated == POSITIVE) | (stated == UNCERTAIN)):
        labels[NO_FINDING] = POSITIVE
    return labels


def read_reports(reports: Sequence[str]) -> np.ndarray:
    """float [N, 14]: `read_report` of each report."""
    if not reports:
        return np.zeros((0, NUM_OBSERVATIONS))
    return np.stack([read_report(r) for r in reports])
