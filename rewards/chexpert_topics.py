"""The rule labeler's vocabulary: observation indices and its topics, each a compiled regex of alternatives that
map to observations (step 2, "Mentions", of the labeling described in rewards/chexpert.py)."""

from __future__ import annotations

import re

from harness.constants import NEGATIVE, NUM_OBSERVATIONS, OBSERVATIONS, UNCERTAIN

__all__ = ["COMPILED_TOPICS", "NORMAL_EVIDENCE", "NORMAL_STUDY", "PATHOLOGIES", "Target", "diagnostic_terms"]

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
PATHOLOGIES = tuple(i for i in range(NUM_OBSERVATIONS) if i not in (NF, SD))

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
NORMAL_EVIDENCE: tuple[Target, ...] = ((NF, None),)  # supports No Finding only (see rule 5)

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
NORMAL_STUDY = (
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
            (NORMAL_STUDY, NORMAL_EVIDENCE),
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
        if alternatives[0][1] is not NORMAL_EVIDENCE
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


COMPILED_TOPICS = [_Topic(triggers, alternatives) for triggers, alternatives in _TOPICS]
