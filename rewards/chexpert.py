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

from harness.constants import NEGATIVE, NUM_OBSERVATIONS, OBSERVATIONS, POSITIVE, UNCERTAIN

__all__ = ["diagnostic_terms", "label_report", "label_reports", "tokenize_for_labeler"]

_IDX = {name: i for i, name in enumerate(OBSERVATIONS)}
NF = _IDX["No Finding"]
EC = _IDX["Enlarged Cardiomediastinum"]
CM = _IDX["Cardiomegaly"]
OP = _IDX["Lung Opacity"]
LL = _IDX["Lung Lesion"]
ED = _IDX["Edema"]
CO = _IDX["Consolidation"]
PN = _IDX["Pneumonia"]
AT = _IDX["Atelectasis"]
PT = _IDX["Pneumothorax"]
PE = _IDX["Pleural Effusion"]
PO = _IDX["Pleural Other"]
FR = _IDX["Fracture"]
SD = _IDX["Support Devices"]
_PATHOLOGIES = tuple(i for i in range(NUM_OBSERVATIONS) if i not in (NF, SD))

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
# Mentions
# --------------------------------------------------------------------------------------------------
# A target is (observation index, fixed value or None for cue-dependent).
Target = tuple[int, "float | None"]


def _pos(*obs: int) -> tuple[Target, ...]:
    return tuple((o, None) for o in obs)


def _fixed(value: float, *obs: int) -> tuple[Target, ...]:
    return tuple((o, float(value)) for o in obs)


_NOTHING: tuple[Target, ...] = ()
_NORMAL_EVIDENCE: tuple[Target, ...] = ((NF, None),)  # supports No Finding only (see rule 5)

_COP = r"(?: (?:is|are|was|were|appears?|remains?|looks?|seems?))?(?: to be)?"
_ADV = r"(?: (?:otherwise|again|still|overall|grossly|stably|now|also|unchanged and|stable and))?"
_NORMAL_WORDS = (
    r"(?:normal|within normal limits|unremarkable|not (?:\w+ )?enlarged|(?:at )?the upper limits? of normal"
    r"|upper limits? of normal|top normal|top of normal|high normal|normal in size|of normal size"
    r"|normal size|normal sized|not widened|stable and normal|unchanged and normal)"
)

_HEART = (
    r"(?:heart(?: size)?|cardiac (?:size|silhouette|shadow|contours?)|size of the heart|heart silhouette)"
)
_MEDIAST = (
    r"(?:mediastinum|mediastinal (?:contours?|silhouettes?|width)|(?:hilar and|hila and) mediastinal contours"
    r"|mediastinal and hilar (?:contours?|silhouettes?|structures))"
)
_CARDIOMED = (
    r"(?:cardiomediastinal (?:silhouettes?|contours?|shadow|size)|heart and mediastinum"
    r"|cardiac and mediastinal (?:contours?|silhouettes?)|mediastinal and cardiac (?:contours?|silhouettes?)"
    r"|heart size and mediastinal contours?|heart and mediastinal (?:contours?|silhouettes?))"
)

# Phrases that say the study is normal. Used as No Finding evidence and as pseudo cues (their "no" must
# not negate the rest of the clause).
_NORMAL_STUDY = (
    r"no (?:radiographic )?(?:evidence of )?(?:any )?(?:acute|active)"
    r" (?:cardiopulmonary|intrathoracic|cardiothoracic|pulmonary|chest|thoracic|cardiac or pulmonary"
    r"|osseous|bony|skeletal|osseus)?\s?"
    r"(?:process(?:es)?|abnormalit(?:y|ies)|disease|findings?|pathology|changes?|injury|issues?)"
    r"|no (?:radiographic )?(?:evidence of )?(?:acute )?cardiopulmonary (?:process|abnormality|disease)"
    r"|normal (?:chest(?: radiograph| x ray| film| study| examination| exam)?|study|examination|exam"
    r"|radiograph)"
    r"|(?:chest|study|exam|examination|radiograph|chest x ray) (?:is |appears )?"
    r"(?:normal|unremarkable|negative)"
    r"|(?:osseous|bony|skeletal) structures (?:are |appear )?(?:\w+ )?(?:intact|unremarkable|normal)"
    r"|no (?:significant )?abnormalit(?:y|ies)"
)

# Each topic: (trigger substrings, [(regex alternative, targets), ...]). Alternatives are tried in order.
_TOPICS: list[tuple[tuple[str, ...], list[tuple[str, tuple[Target, ...]]]]] = [
    # ---- heart and mediastinum -----------------------------------------------------------------------
    (
        ("cardiomediastinal", "mediast"),
        [
            (_CARDIOMED + _COP + _ADV + r" (?:\w+ )?" + _NORMAL_WORDS, _fixed(NEGATIVE, EC, CM)),
            (r"normal (?:\w+ )?(?:cardiomediastinal (?:silhouettes?|contours?)|heart and mediastinum"
             r"|cardiac and mediastinal (?:contours?|silhouettes?))", _fixed(NEGATIVE, EC, CM)),
            (_MEDIAST + _COP + _ADV + r" (?:\w+ )?" + _NORMAL_WORDS, _fixed(NEGATIVE, EC)),
            (r"normal (?:mediastinum|mediastinal (?:contours?|silhouettes?|width))", _fixed(NEGATIVE, EC)),
            (r"(?:cardiomediastinal (?:silhouettes?|contours?)|mediastinum|mediastinal (?:contours?"
             r"|silhouettes?))"
             + _COP + r"(?: \w+){0,2}? (?:enlarged|widened|wide|prominent|increased)", _pos(EC)),
            (r"(?:enlarged|widened|wide|prominent) (?:\w+ )?(?:cardiomediastinal (?:silhouettes?|contours?)"
             r"|mediastinum"
             r"|mediastinal (?:contours?|silhouettes?))", _pos(EC)),
            (r"(?:widening|enlargement) of the (?:\w+ )?(?:cardiomediastinal (?:silhouettes?|contours?)"
             r"|mediastinum"
             r"|mediastinal (?:contours?|silhouettes?))", _pos(EC)),
            (r"(?:mediastinal|cardiomediastinal) (?:widening|enlargement)", _pos(EC)),
        ],
    ),
    (
        ("heart", "cardi"),
        [
            (_HEART + _COP + _ADV + r" (?:borderline|borderline enlarged|borderline in size|mildly prominent"
             r"|prominent|upper normal to mildly enlarged)", _fixed(UNCERTAIN, CM)),
            (r"borderline (?:heart size|cardiac size|cardiac silhouette|enlarged heart"
             r"|enlargement of the heart)",
             _fixed(UNCERTAIN, CM)),
            (_HEART + _COP + _ADV + r" " + _NORMAL_WORDS, _fixed(NEGATIVE, CM)),
            (r"normal (?:sized? )?(?:heart(?: size)?|cardiac (?:size|silhouette"
             r"|contours?))", _fixed(NEGATIVE, CM)),
            (r"heart is (?:of )?normal size", _fixed(NEGATIVE, CM)),
            (r"cardiomegaly", _pos(CM)),
            (r"(?:enlarged|large|enlarging) (?:\w+ )?(?:heart|cardiac silhouette|cardiac shadow"
             r"|cardiac contours?)",
             _pos(CM)),
            (r"(?:enlargement|increase in size) of the (?:\w+ )?(?:heart|cardiac silhouette|cardiac shadow)",
             _pos(CM)),
            (r"cardiac (?:silhouette |shadow )?enlargement", _pos(CM)),
            (_HEART + _COP + r"(?: \w+){0,2}? (?:enlarged|large|increased)", _pos(CM)),
        ],
    ),
    # ---- pleura ---------------------------------------------------------------------------------------
    (
        ("effusion", "fluid", "costophrenic", "thorax", "blunt", "pleural space", "cp angle"),
        [
            (r"(?:pericardial|joint|knee|shoulder|middle ear) effusions?", _NOTHING),
            (r"hydropneumothora(?:x|ces)", _pos(PE, PT)),
            (r"(?:pleural )?effusions?", _pos(PE)),
            (r"(?:pleural|layering|loculated) fluid", _pos(PE)),
            (r"fluid (?:collection )?(?:is )?(?:seen )?(?:in|within|along|tracking into) the (?:\w+ ){0,3}?"
             r"(?:pleural spaces?|costophrenic (?:angles?|sulc[iu]s|recess(?:es)?)|fissures?"
             r"|pleura)", _pos(PE)),
            (r"(?:hydro|hemo|haemo)thora(?:x|ces)", _pos(PE)),
            (r"(?:costophrenic"
             r"|cp) angles?" + _COP + _ADV + r" (?:\w+ )?(?:sharp|clear|preserved|normal|well defined)",
             _fixed(NEGATIVE, PE)),
            (r"(?:sharp|clear|preserved|normal) (?:costophrenic|cp) angles?", _fixed(NEGATIVE, PE)),
            (r"pleural spaces?" + _COP + _ADV + r" (?:clear|normal|unremarkable)", _fixed(NEGATIVE, PE, PT)),
            (r"blunting of the (?:\w+ ){0,3}?(?:costophrenic|cp) (?:angles?|sulc[iu]s"
             r"|recess(?:es)?)", _pos(PE)),
            (r"(?:costophrenic|cp) (?:angle |sulcus )?blunting", _pos(PE)),
            (r"blunted (?:\w+ ){0,2}?(?:costophrenic|cp) angles?", _pos(PE)),
            (r"(?:costophrenic|cp) angles?" + _COP + _ADV + r" (?:\w+ )?blunted", _pos(PE)),
        ],
    ),
    (
        ("pneumothora", "ptx"),
        [
            (r"pneumothora(?:x|ces)|ptx", _pos(PT)),
        ],
    ),
    (
        ("pleura", "apical cap", "fibrothorax"),
        [
            (r"pleural (?:\w+ ){0,2}?thickening|pleural (?:\w+ )?plaques?|pleural (?:\w+ )?calcifications?"
             r"|pleural (?:based )?scar(?:ring)?|pleuroparenchymal (?:\w+ )?(?:scarring|scar|thickening)"
             r"|pleural parenchymal (?:\w+ )?(?:scarring|scar|thickening)", _pos(PO)),
            (r"(?:calcified|thickened) pleura|apical (?:pleural )?cap(?:ping|s)?|fibrothorax", _pos(PO)),
        ],
    ),
    # ---- lungs ----------------------------------------------------------------------------------------
    (
        ("clear",),
        [
            (r"(?:the )?lungs?(?: fields?)? (?:are|is|appear|appears|remain|remains"
             r"|were)(?: (?!not\b)\w+){0,3}?"
             r" clear", _fixed(NEGATIVE, OP, CO, PN, ED, AT)),
            (r"clear lungs?", _fixed(NEGATIVE, OP, CO, PN, ED, AT)),
        ],
    ),
    (
        ("opaci", "airspace", "air space", "infiltrat", "densit", "haz", "ground glass", "interstitial"),
        [
            (r"(?:bone|bony|osseous|mineral) densit(?:y|ies)", _NOTHING),
            (r"opacit(?:y|ies)|opacification|opacifications|opacified", _pos(OP)),
            (r"air ?space (?:disease|process|opacit(?:y|ies)|abnormalit(?:y|ies)|filling)", _pos(OP)),
            (r"infiltrat(?:e|es|ion|ions|ive)|densit(?:y|ies)|haziness|hazy|haze|ground glass", _pos(OP)),
            (r"interstitial (?:markings|prominence|process|abnormalit(?:y|ies)|disease|thickening|pattern"
             r"|changes?|opacit(?:y|ies))", _pos(OP)),
        ],
    ),
    (
        ("nodul", "mass", "lesion", "tumo", "neoplas", "malignan", "carcinoma", "cancer", "metasta"),
        [
            (r"mass effect|(?:osseous|bony|bone|lytic|sclerotic|blastic|skin|cutaneous) (?:\w+ )?lesions?",
             _NOTHING),
            (r"nodul(?:e|es|ar|arity)|mass(?:es)?|lesions?|tumou?rs?|neoplasms?|malignan(?:cy|cies)|carcinoma"
             r"|cancer|metasta(?:sis|ses|tic)", _pos(LL)),
        ],
    ),
    (
        ("edema", "oedema", "congesti", "engorge", "cephaliz", "kerley", "overload", "vascular", "chf",
         "heart failure", "redistribution"),
        [
            (r"(?:soft tissue|subcutaneous|chest wall|scalp) (?:o?edema)", _NOTHING),
            (r"(?:pulmonary )?vascul(?:arity"
             r"|ature)" + _COP + _ADV + r" (?:\w+ )?(?:normal|within normal limits)",
             _fixed(NEGATIVE, ED)),
            (r"normal (?:pulmonary )?vascul(?:arity|ature)", _fixed(NEGATIVE, ED)),
            (r"o?edema(?:tous)?", _pos(ED)),
            (r"(?:pulmonary )?(?:vascular|venous|interstitial) (?:congestion|engorgement|redistribution)"
             r"|pulmonary congestion|congestive (?:heart )?failure|heart failure|chf|fluid overload"
             r"|cephalization|kerley b? ?lines", _pos(ED)),
        ],
    ),
    (
        ("consolidat",),
        [
            (r"consolidat(?:ion|ions|ive|ed|ing)", _pos(CO)),
        ],
    ),
    (
        ("pneumon", "infect", "aspiration"),
        [
            (r"pneumonias?|bronchopneumonia|pneumonic|infection|infections|infectious(?: process)?"
             r"|aspiration", _pos(PN)),
        ],
    ),
    (
        ("atelecta", "collapse", "volume loss"),
        [
            (r"(?:vertebral|vertebral body|compression) collapse", _NOTHING),
            (r"atelecta(?:sis|ses|tic)|collapsed? (?:of (?:the )?)?(?:\w+ ){0,2}?(?:lung|lobe|segment)s?"
             r"|(?:lung|lobe|lobar|segmental) collapse|collapse|volume loss", _pos(AT)),
        ],
    ),
    (
        ("fractur", "fx", "osseous", "bony", "skeletal"),
        [
            (r"fractur(?:e|es|ed)|fx", _pos(FR)),
            (r"no (?:acute |displaced |focal )*(?:osseous|bony|skeletal) (?:abnormalit(?:y|ies)|injury"
             r"|injuries"
             r"|findings?|process|lesions?)|(?:visualized |visible |the )?(?:osseous|bony"
             r"|skeletal) structures"
             r"(?: are| appear)?(?: \w+)? (?:intact|unremarkable|normal"
             r"|within normal limits)", _fixed(NEGATIVE, FR)),
        ],
    ),
    # ---- devices --------------------------------------------------------------------------------------
    (
        ("tube", "catheter", "line", "pace", "icd", "defibrillator", "lead", "wire", "clip", "stent", "drain",
         "port", "hardware", "device", "valve", "coil", "shunt", "picc", "cath", "ett", "ngt", "dobhoff",
         "tracheostomy", "ecmo", "pigtail", "balloon pump", "iabp", "prosthe", "arthroplasty", "fixation"),
        [
            (r"(?:pleural|kerley b?|septal|fissural|skin fold|fold|azygoesophageal|paratracheal|paraspinal"
             r"|junction) lines?|midline", _NOTHING),
            (r"tubes?|catheters?|picc|port ?a ?cath|portacath|mediport|(?:chest |power |venous )?port"
             r"|ett|ngt|dobhoff|tracheostomy|ecmo|pigtail|(?:intra ?aortic )?balloon pump|iabp", _pos(SD)),
            (r"(?:picc|central|central venous|venous|arterial|swan ganz|ij|jugular|subclavian|femoral"
             r"|dialysis"
             r"|hemodialysis|port|pulmonary artery|pa|midline catheter|infusion|iv|support|monitoring) lines?"
             r"|lines? and tubes?|lines? or tubes?", _pos(SD)),
            (r"pacemakers?|pacers?|icds?|defibrillators?|(?:pacing|pacer|pacemaker|icd|cardiac|transvenous"
             r"|epicardial"
             r"|ecg|ekg|monitoring|defibrillator) (?:\w+ )?leads?", _pos(SD)),
            (r"wires?|clips?|stents?|drains?|hardware|devices?|coils?|shunts?|(?:prosthetic"
             r"|mechanical) valves?"
             r"|valve (?:replacement|prosthesis)|prosthes[ie]s|arthroplast(?:y|ies)|fixation", _pos(SD)),
        ],
    ),
    # ---- normal study (No Finding evidence only) ------------------------------------------------------
    (
        ("normal", "acute", "active", "abnormal", "negative", "intact"),
        [
            (_NORMAL_STUDY, _NORMAL_EVIDENCE),
        ],
    ),
]


def diagnostic_terms() -> frozenset[str]:
    """The labeler's one-word trigger stems of finding and device topics (e.g. ``"effusion"``, ``"atelecta"``,
    ``"cardi"``, ``"tube"``), lowercase; the normal-study phrases are left out. They are stems: a word that starts
    with one of them (``"atelectasis"``, ``"cardiomegaly"``) names a finding or a device."""
    return frozenset(
        trigger
        for triggers, alternatives in _TOPICS
        if alternatives[0][1] is not _NORMAL_EVIDENCE
        for trigger in triggers
        if " " not in trigger
    )


class _Topic:
    __slots__ = ("triggers", "regex", "targets")

    def __init__(self, triggers: tuple[str, ...], alternatives: list[tuple[str, tuple[Target, ...]]]):
        self.triggers = triggers
        parts = [f"(?P<a{i}>{pattern})" for i, (pattern, _) in enumerate(alternatives)]
        self.regex = re.compile(r"\b(?:" + "|".join(parts) + r")\b")
        self.targets = {f"a{i}": targets for i, (_, targets) in enumerate(alternatives)}


_COMPILED_TOPICS = [_Topic(triggers, alternatives) for triggers, alternatives in _TOPICS]

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
    ("pseudo", _NORMAL_STUDY + r"|no (?:\w+ ){0,2}?"
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
    for topic in _COMPILED_TOPICS:
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
    if any(best[i] >= _RANK[UNCERTAIN] for i in _PATHOLOGIES):
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
