"""A rule-based CheXpert-style labeler for chest X-ray reports (the ``rules`` CE backend).

``label_reports(reports)`` returns a float array ``[N, 14]`` in ``OBSERVATIONS`` order with
1 = positive, 0 = negative, -1 = uncertain and nan = not mentioned.

The phrase lists and rules below are this project's own. How a report is labeled:

1. Normalisation. Lowercase; quotes and apostrophes are deleted; ``. ; : ! ?`` and newlines end a sentence
   (a dot between two digits is a decimal point); every other non-alphanumeric character becomes a space.
   An R2Gen-cleaned report (``"the heart is normal . no effusion ."``) is already in this form.
2. Mentions. Each *topic* (one or a few observations) is a compiled regex of alternatives; every
   alternative maps to one or more observations, either *cue-dependent* (its value comes from negation /
   uncertainty cues, step 3) or with a *fixed* value (a statement that carries its own polarity, e.g.
   "heart size is normal" = Cardiomegaly 0). Within a topic the leftmost match wins and, at one position,
   the first alternative, so look-alikes listed first swallow their text ("pericardial effusion" is not a
   pleural effusion). A topic's regex only runs when one of its trigger substrings is in the report.
3. Cues. One regex finds, in one pass: sentence ends, *terminators* ("but", "however", "although",
   "though", "except", "aside from", "apart from", "other than", "whereas", "while", "yet", "otherwise",
   "and" before "there / the / a / it / this ..."), *weak terminators* ("with", "which", "that",
   "there is / are", "is seen", "in place"), negation cues ("no", "not", "without", "negative for",
   "free of", "no evidence of", "no signs of", "absence of", "removal of", "resolution of", "resolved",
   "is not seen", "has been removed", "no longer", ...), uncertainty cues ("may", "might", "could",
   "possible", "possibly", "probable", "likely", "unlikely", "questionable", "suspected", "versus",
   "borderline", "cannot exclude", "cannot be excluded", "is not excluded", "not ruled out", ...),
   *evidential* uncertainty cues ("suggestive of", "suggesting", "to suggest", "concerning for",
   "suspicious for", "worrisome for"), and *pseudo* cues, phrases that contain a negation word but
   negate nothing ("no change", "no relevant change in", "not changed", "no acute cardiopulmonary
   process", ...).
   Scopes: a cue before the mention (or inside it) acts on it within the clause; negation cues stop at
   terminators and weak terminators, uncertainty cues only at terminators. The nearest such cue decides;
   an evidential cue gives uncertain unless a negation cue governs it ("no findings to suggest pneumonia"
   and "no opacity concerning for pneumonia" are Pneumonia 0). A cue after the mention ("... is not
   seen", "... cannot be excluded", "... has resolved", "... is likely") acts on the earlier mentions of
   its clause; bare "likely / possible / resolved / absent" act backwards only when no mention follows
   them in the clause ("opacity likely atelectasis": Lung Opacity 1, Atelectasis -1); "versus" acts both
   ways ("atelectasis versus pneumonia": both -1). A mention is uncertain if a cue in scope says so, else
   negative if one negates it, else positive.
4. Aggregation per observation over all its mentions: positive > uncertain > negative > not mentioned.
5. No Finding (rule of this labeler, close to CheXpert's "no pathology is positive or uncertain"):
   - 0 if any pathology (all observations except No Finding and Support Devices) is 1 or -1;
   - else 1 if the report mentions any observation (any value, Support Devices included) or says the
     study is normal ("no acute cardiopulmonary process", "normal chest radiograph", "no acute osseous
     abnormality", ...);
   - else nan (nothing labelable, e.g. an empty report or text with no findings vocabulary: this keeps
     a degenerate generated report from scoring a No Finding match).

Documented decisions on look-alikes and borderline phrasing:
- "pericardial effusion", "joint effusion" are not pleural effusions; "soft tissue / subcutaneous edema"
  is not edema; "osseous / bony / lytic / sclerotic / skin lesion" and "mass effect" are not lung lesions;
  "vertebral (body) collapse" is not atelectasis; "bone density" is not a lung opacity.
- "no acute cardiopulmonary process" (and similar "normal study" phrases) label no observation; they only
  support No Finding = 1.
- "heart size is normal / within normal limits / not enlarged / at the upper limits of normal / top
  normal", "normal heart size", "normal cardiac silhouette" are Cardiomegaly 0. "borderline heart size"
  or "heart size is borderline" is Cardiomegaly -1.
- "normal cardiomediastinal silhouette / contours", "heart and mediastinum are normal", "cardiac and
  mediastinal contours are normal" are 0 for both Enlarged Cardiomediastinum and Cardiomegaly;
  "mediastinal contours are normal", "mediastinum is not widened" are Enlarged Cardiomediastinum 0.
  "enlarged cardiomediastinal silhouette" and "widened mediastinum" are Enlarged Cardiomediastinum 1 only.
- "the lungs are clear" (and "clear lungs") is 0 for Lung Opacity, Consolidation, Pneumonia, Edema and
  Atelectasis (the parenchymal findings); it says nothing about effusion, pneumothorax or lesions.
- "costophrenic angles are sharp / clear" is Pleural Effusion 0; "blunting of the costophrenic angle" is
  Pleural Effusion 1; "pleural spaces are clear" is 0 for Pleural Effusion and Pneumothorax.
- "hydropneumothorax" is both Pleural Effusion and Pneumothorax.
- "pulmonary vascularity is normal" is Edema 0; "vascular congestion", "congestive heart failure" are Edema.
- "old healed rib fracture" is Fracture 1 (healed does not negate). "no acute osseous abnormality" and
  "the osseous structures are intact / unremarkable" are Fracture 0.
- Support Devices: tubes, catheters, qualified lines ("picc line", "central venous line", ...; not
  "pleural line", "kerley b lines", "midline"), pacemakers / pacers / icds / defibrillators, leads,
  wires (so "sternotomy wires" is 1), clips, stents, drains, ports, hardware, devices, prosthetic valves,
  coils, shunts. "status post sternotomy" without wires is not a device mention. "interval removal of the
  chest tube" / "tube has been removed" is 0.
- "calcified granuloma" and "emphysema" label nothing (not among the 14 observations).
- "no definite X" and "no large X" are X 0; "unlikely" is uncertain; "consistent with" / "compatible
  with" do not add uncertainty; "likely" does.
- "no change in the effusion" keeps the effusion positive; "partially resolved" and "resolving" are not
  negations, "resolved" and "resolution of" are.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence

import numpy as np

from harness.constants import NEGATIVE, NUM_OBSERVATIONS, POSITIVE, UNCERTAIN
from rewards.chexpert_topics import COMPILED_TOPICS, NF, NORMAL_STUDY, PATHOLOGIES, Target, diagnostic_terms

__all__ = ["diagnostic_terms", "label_report", "label_reports", "tokenize_for_labeler"]


# --------------------------------------------------------------------------------------------------
# Normalisation
# --------------------------------------------------------------------------------------------------
_DECIMAL_DOT = re.compile(r"(?<=\d)\.(?=\d)")
_JOINERS = re.compile(r"[\"'`\u2018\u2019\u201c\u201d]")
_BREAKS = re.compile(r"[.;:!?\n\r]+")
_NON_WORD = re.compile(r"[^a-z0-9.]+")


def tokenize_for_labeler(text: str) -> str:
    """The text the rule labeler matches: lowercase words separated by single spaces, sentences ending with
    ``" ."`` (decimal points and word joiners dropped)."""
    text = _JOINERS.sub("", text.lower())
    text = _DECIMAL_DOT.sub("", text)
    text = _BREAKS.sub(" . ", text)
    return " ".join(_NON_WORD.sub(" ", text).split())



# --------------------------------------------------------------------------------------------------
# Cues
# --------------------------------------------------------------------------------------------------
_SEEN = (
    r"(?:seen|identified|visualized|visualised|visible|present|evident|demonstrated|appreciated|detected"
    r"|noted|observed|shown|apparent|delineated)"
)
_AUX = r"(?:is|are|was|were|has been|have been|has|have|be|appears?|appear to be|remains?) "
_UNC_WORDS = (
    r"(?:possible|possibly|likely|probable|probably|suspected|questioned|questionable|uncertain|equivocal"
    r"|indeterminate|not excluded|difficult to exclude|a consideration|considered|presumed|unlikely)"
)
# Cue kinds: (polarity, acts on a later mention, acts on an earlier mention: 0 no, 1 yes, 2 only when no
# mention follows the cue in its clause, so "opacity likely atelectasis" leaves the opacity certain).
_NEG, _UNC, _EV = 0, 1, 2
_KINDS = {
    "unc_post": (_UNC, False, 1),
    "neg_post": (_NEG, False, 1),
    "unc_sym": (_UNC, True, 1),
    "unc_both": (_UNC, True, 2),
    "neg_both": (_NEG, True, 2),
    "unc_pre": (_UNC, True, 0),
    "unc_ev": (_EV, True, 0),
    "neg_pre": (_NEG, True, 0),
}
_CUE_GROUPS: list[tuple[str, str]] = [
    # Phrases with a negation word that negate nothing.
    ("pseudo", NORMAL_STUDY + r"|no (?:\w+ ){0,2}?"
     r"(?:change|increase|decrease|progression|worsening|improvement)s?|not (?:significantly )?changed"
     r"|without (?:significant |appreciable |interval )*(?:change|increase|progression)s?"
     r"|partial(?:ly)? resol(?:ved|ution)|not only|no doubt|gram negative"),
    ("unc_post", r"(?:" + _AUX + r")?(?:not|cannot|can not|could not|can t) (?:be )?"
     r"(?:entirely |completely |totally |definitely )?(?:excluded|ruled out)"
     r"|(?:may|might|could) (?:also )?(?:be )?(?:present|seen|there)"),
    ("neg_post", r"(?:" + _AUX + r")?(?:not|no longer) (?:well |clearly |definitely |convincingly "
     r"|currently )?"
     + _SEEN + r"|" + _AUX + r"(?:absent|resolved|cleared|removed|withdrawn|gone)"),
    ("unc_sym", r"versus|vs"),
    ("unc_both", r"(?:" + _AUX + r")?" + _UNC_WORDS),
    ("neg_both", r"absent|resolved|removed"),
    # Evidential uncertainty cues: uncertain, unless a negation cue governs them ("no findings to
    # suggest pneumonia", "no opacity concerning for pneumonia" are negative).
    ("unc_ev", r"suspicious (?:for|of)|suspicion (?:for|of)|concerning for|concern for|worrisome for"
     r"|suggestive of|suggests?|suggesting|(?:to )?suggest|indicative of|to indicate"),
    ("unc_pre", r"(?:cannot|can not|could not|can t|difficult to|unable to)"
     r" (?:entirely |completely |totally )?(?:exclude|rule out)|may|might|could|presumably|suspect"
     r"|question of|borderline|differential(?: diagnosis)?(?: includes?)?|consider|raises the possibility"
     r"|possibility|rule out|r o|would be"),
    ("neg_pre", r"no evidence of|no radiographic evidence of|no signs? of|negative for|free of|clear of"
     r"|absence of|removal of|resolution of|interval removal of|no longer|without|no|not|nor|neither|never"
     r"|none|rather than|instead of"),
    # Terminators: end the scope of every cue.
    ("term", r"but|however|although|though|except(?: for)?|aside from|apart from|other than|whereas|while"
     r"|yet|nevertheless|otherwise|and(?= (?:there|the|a|an|it|this|these|that)\b)"),
    # Weak terminators: end the scope of negation cues only.
    ("wterm", r"with|which|that|there (?:is|are)|is seen|are seen|in place"),
]
_CUES = re.compile(
    r"(?P<sent>(?<![a-z0-9])\.(?![a-z0-9]))|\b(?:"
    + "|".join(f"(?P<{name}>{pattern})" for name, pattern in _CUE_GROUPS)
    + r")\b"
)
_RANK = {POSITIVE: 3, UNCERTAIN: 2, NEGATIVE: 1}


class _Cues:
    """Cue positions of one normalised report, sorted by position."""

    __slots__ = ("strong", "strong_ends", "weak", "pre_end", "pre_start", "pre_pol", "post_start", "post_end",
                 "post_pol", "post_mode")

    def __init__(self, text: str):
        self.strong = [0]  # where a clause starts (after a sentence end or terminator)
        self.strong_ends = [0]  # where a clause ends
        self.weak = [0]  # where a negation scope starts (clauses and weak terminators)
        self.pre_end: list[int] = []
        self.pre_start: list[int] = []
        self.pre_pol: list[int] = []
        self.post_start: list[int] = []
        self.post_end: list[int] = []
        self.post_pol: list[int] = []
        self.post_mode: list[int] = []
        for m in _CUES.finditer(text):
            kind = m.lastgroup
            if kind == "pseudo":
                continue
            if kind == "sent" or kind == "term":
                self.strong.append(m.end())
                self.strong_ends.append(m.start())
                self.weak.append(m.end())
            elif kind == "wterm":
                self.weak.append(m.end())
            else:
                pol, pre, post = _KINDS[kind]
                if pre:
                    self.pre_end.append(m.end())
                    self.pre_start.append(m.start())
                    self.pre_pol.append(pol)
                if post:
                    self.post_start.append(m.start())
                    self.post_end.append(m.end())
                    self.post_pol.append(pol)
                    self.post_mode.append(post)
        self.strong_ends.append(len(text) + 1)

    def value(self, start: int, end: int, mention_starts: list[int]) -> float:
        """Value of a cue-dependent mention spanning ``text[start:end]``."""
        s_start = self.strong[bisect_right(self.strong, start) - 1]
        w_start = self.weak[bisect_right(self.weak, start) - 1]
        s_end = self.strong_ends[bisect_left(self.strong_ends, end)]
        negated = False
        # Pre-cues ending before the mention ends (cues inside the mention count), nearest first.
        i = bisect_right(self.pre_end, end) - 1
        evidential = False
        while i >= 0 and self.pre_start[i] >= s_start:
            pol = self.pre_pol[i]
            if pol == _UNC:
                return float(UNCERTAIN)
            if pol == _EV:
                evidential = True
            elif self.pre_start[i] >= w_start:
                negated = True
                break
            i -= 1
        if evidential and not negated:
            return float(UNCERTAIN)
        # Post-cue: the nearest cue starting after the mention, within the clause.
        j = bisect_left(self.post_start, end)
        if j < len(self.post_start) and self.post_start[j] < s_end:
            applies = True
            if self.post_mode[j] == 2:
                k = bisect_left(mention_starts, self.post_end[j])
                applies = k == len(mention_starts) or mention_starts[k] >= s_end
            if applies:
                if self.post_pol[j] == _UNC:
                    return float(UNCERTAIN)
                negated = True
        return float(NEGATIVE) if negated else float(POSITIVE)


def label_report(report: str) -> np.ndarray:
    """Label one report: float array ``[14]`` (1, 0, -1, nan), see the module docstring."""
    out = np.full(NUM_OBSERVATIONS, np.nan)
    text = tokenize_for_labeler(report or "")
    if not any(ch.isalpha() for ch in text):
        return out
    mentions: list[tuple[int, int, tuple[Target, ...]]] = []
    for topic in COMPILED_TOPICS:
        for trig in topic.triggers:
            if trig in text:
                break
        else:
            continue
        targets = topic.targets
        for m in topic.regex.finditer(text):
            tg = targets[m.lastgroup]
            if tg:
                mentions.append((m.start(), m.end(), tg))
    if not mentions:
        return out

    cues = _Cues(text)
    mention_starts = sorted(start for start, _, tg in mentions if tg[0][0] != NF)
    best = [0] * NUM_OBSERVATIONS  # rank; 0 = not mentioned
    normal_evidence = False
    for start, end, tg in mentions:
        cue_value: float | None = None  # computed at most once per mention
        for obs, fixed in tg:
            if obs == NF:
                normal_evidence = True
                continue
            if fixed is not None:
                value = fixed
            else:
                if cue_value is None:
                    cue_value = cues.value(start, end, mention_starts)
                value = cue_value
            rank = _RANK[int(value)]
            if rank > best[obs]:
                best[obs] = rank
                out[obs] = value
    if any(best[i] >= _RANK[UNCERTAIN] for i in PATHOLOGIES):
        out[NF] = NEGATIVE
    elif normal_evidence or any(best[i] for i in range(NUM_OBSERVATIONS) if i != NF):
        out[NF] = POSITIVE
    return out


def label_reports(reports: Sequence[str] | Iterable[str]) -> np.ndarray:
    """Label reports: float64 array ``[N, 14]`` in ``OBSERVATIONS`` order (1, 0, -1, nan = not mentioned)."""
    rows = [label_report(r) for r in reports]
    if not rows:
        return np.full((0, NUM_OBSERVATIONS), np.nan)
    return np.stack(rows)
