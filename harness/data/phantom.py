"""Synthetic chest X-ray data set ("phantom"): cases, drawings, reports, and the R2Gen-format writer.

A case is a set of present observations plus their attributes (side, severity, zone, devices). The image
is drawn from the case, the report is written from the case, so every sample carries ground truth.
Sides are the patient's: the patient's right is on the image's left, as on a real frontal radiograph.

Randomness: sample ``i`` of seed ``s`` uses ``SeedSequence([s, i])`` split into three generators (case,
report, image), so a sample does not depend on ``n``, on the image size, or on how the others were drawn.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from harness.constants import NEGATIVE, NO_FINDING, NUM_OBSERVATIONS, OBSERVATIONS, POSITIVE, UNCERTAIN
from harness.data.cleaning import clean_report

FINDINGS: tuple[str, ...] = OBSERVATIONS[1:-1]  # everything except No Finding and Support Devices
LATERAL: tuple[str, ...] = (
    "Lung Opacity", "Lung Lesion", "Consolidation", "Pneumonia", "Atelectasis",
    "Pneumothorax", "Pleural Effusion", "Pleural Other", "Fracture",
)
GRADED: tuple[str, ...] = (
    "Cardiomegaly", "Lung Opacity", "Edema", "Atelectasis", "Pneumothorax", "Pleural Effusion",
)
ZONED: tuple[str, ...] = ("Lung Opacity", "Lung Lesion", "Consolidation", "Pneumonia")
SIDES: tuple[str, ...] = ("left", "right", "bilateral")
SEVERITIES: tuple[str, ...] = ("mild", "moderate", "severe")
ZONES: tuple[str, ...] = ("upper", "mid", "lower")
DEVICES: tuple[str, ...] = (
    "pacemaker", "endotracheal tube", "nasogastric tube", "central venous catheter",
    "left chest tube", "right chest tube",
)
FRACTURE_RIBS: tuple[int, ...] = (5, 6, 7, 8, 9)  # posterior ribs that cross the lungs in the drawing

# (left, right, bilateral) probabilities per lateral finding.
_SIDE_PROBS: dict[str, tuple[float, float, float]] = {
    "Lung Opacity": (0.35, 0.35, 0.30),
    "Lung Lesion": (0.45, 0.45, 0.10),
    "Consolidation": (0.40, 0.40, 0.20),
    "Pneumonia": (0.40, 0.40, 0.20),
    "Atelectasis": (0.35, 0.35, 0.30),
    "Pneumothorax": (0.48, 0.48, 0.04),
    "Pleural Effusion": (0.35, 0.35, 0.30),
    "Pleural Other": (0.50, 0.50, 0.00),
    "Fracture": (0.48, 0.48, 0.04),
}
_SEVERITY_PROBS = (0.45, 0.35, 0.20)
_ZONE_PROBS: dict[str, tuple[float, float, float]] = {
    "Lung Opacity": (0.30, 0.20, 0.50),
    "Lung Lesion": (0.40, 0.30, 0.30),
    "Consolidation": (0.25, 0.0, 0.75),
    "Pneumonia": (0.25, 0.0, 0.75),
}


def _default_rates() -> dict[str, float]:
    # Rates within abnormal cases; about 2.3 findings per abnormal case, so most have two or more.
    return {
        "Enlarged Cardiomediastinum": 0.10,
        "Cardiomegaly": 0.30,
        "Lung Opacity": 0.25,
        "Lung Lesion": 0.12,
        "Edema": 0.15,
        "Consolidation": 0.12,
        "Pneumonia": 0.14,
        "Atelectasis": 0.25,
        "Pneumothorax": 0.12,
        "Pleural Effusion": 0.30,
        "Pleural Other": 0.06,
        "Fracture": 0.10,
    }


@dataclass
class PhantomConfig:
    """What to generate. Rates are probabilities; ``finding_rates`` apply within abnormal cases."""

    n: int = 1000
    seed: int = 0
    image_size: int = 128
    split_fractions: tuple[float, float, float] = (0.7, 0.1, 0.2)
    normal_fraction: float = 0.3  # cases drawn with no finding (support devices still possible)
    finding_rates: dict[str, float] = field(default_factory=_default_rates)
    device_rate: float = 0.18
    uncertain_rate: float = 0.12  # chance that the report hedges a present finding (labelled -1)
    negation_rate: float = 0.55  # chance that the report explicitly negates a given absent finding
    id_prefix: str = "phantom"

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"PhantomConfig.n must be >= 1, got {self.n}")
        if self.image_size < 32:
            raise ValueError(f"PhantomConfig.image_size must be >= 32, got {self.image_size}")
        fractions = tuple(float(f) for f in self.split_fractions)
        if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1.0) > 1e-6:
            raise ValueError(
                f"PhantomConfig.split_fractions must be 3 non-negative numbers summing to 1, got {fractions}"
            )
        self.split_fractions = fractions
        for name in ("normal_fraction", "device_rate", "uncertain_rate", "negation_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"PhantomConfig.{name} must be in [0, 1], got {value}")
        unknown = sorted(set(self.finding_rates) - set(FINDINGS))
        if unknown:
            raise ValueError(f"PhantomConfig.finding_rates has unknown findings {unknown}; known: {FINDINGS}")
        for name, rate in self.finding_rates.items():
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"PhantomConfig.finding_rates[{name!r}] must be in [0, 1], got {rate}")
        if self.normal_fraction < 1.0 and not any(self.finding_rates.values()):
            raise ValueError("PhantomConfig.finding_rates are all zero but normal_fraction < 1")
        if not self.id_prefix or not self.id_prefix.replace("_", "").isalnum():
            raise ValueError(f"PhantomConfig.id_prefix must be alphanumeric/underscore, got {self.id_prefix!r}")


@dataclass
class Case:
    """One patient: present findings and their attributes. Missing attributes get fixed defaults."""

    findings: tuple[str, ...] = ()
    laterality: dict[str, str] = field(default_factory=dict)
    severity: dict[str, str] = field(default_factory=dict)
    zone: dict[str, str] = field(default_factory=dict)
    devices: tuple[str, ...] = ()
    rib: int | None = None
    uncertain: tuple[str, ...] = ()  # present findings the report hedges (and the image shows faintly)

    def __post_init__(self) -> None:
        unknown = [f for f in self.findings if f not in FINDINGS]
        if unknown:
            raise ValueError(f"Case has unknown findings {unknown}; known: {FINDINGS}")
        bad_devices = [d for d in self.devices if d not in DEVICES]
        if bad_devices:
            raise ValueError(f"Case has unknown devices {bad_devices}; known: {DEVICES}")
        self.findings = tuple(f for f in FINDINGS if f in self.findings)
        self.devices = tuple(dict.fromkeys(self.devices))
        self.uncertain = tuple(f for f in self.findings if f in self.uncertain)
        self.laterality = {f: self.laterality.get(f, "right") for f in self.findings if f in LATERAL}
        self.severity = {f: self.severity.get(f, "moderate") for f in self.findings if f in GRADED}
        self.zone = {f: self.zone.get(f, "lower") for f in self.findings if f in ZONED}
        self.rib = (self.rib or 7) if "Fracture" in self.findings else None
        for mapping, allowed, what in (
            (self.laterality, SIDES, "laterality"),
            (self.severity, SEVERITIES, "severity"),
            (self.zone, ZONES, "zone"),
        ):
            for name, value in mapping.items():
                if value not in allowed:
                    raise ValueError(f"Case {what} of {name!r} must be one of {allowed}, got {value!r}")
        if self.rib is not None and self.rib not in FRACTURE_RIBS:
            raise ValueError(f"Case rib must be one of {FRACTURE_RIBS}, got {self.rib}")

    @property
    def present(self) -> np.ndarray:
        """int8 [14]: 1 where drawn; No Finding iff nothing but support devices is present."""
        vec = np.zeros(NUM_OBSERVATIONS, dtype=np.int8)
        for name in self.findings:
            vec[OBSERVATIONS.index(name)] = 1
        vec[NO_FINDING] = int(not self.findings)
        vec[-1] = int(bool(self.devices))
        return vec

    def attributes(self) -> dict:
        return {
            "laterality": dict(self.laterality),
            "severity": dict(self.severity),
            "zone": dict(self.zone),
            "devices": list(self.devices),
            "rib": self.rib,
            "uncertain": list(self.uncertain),
        }


# ----------------------------------------------------------------------------------------------- cases


def sample_case(rng: np.random.Generator, cfg: PhantomConfig | None = None) -> Case:
    """Draw one case: normal with probability ``normal_fraction``, else at least one finding."""
    cfg = cfg or PhantomConfig()
    rates = cfg.finding_rates
    found: set[str] = set()
    if rng.random() >= cfg.normal_fraction:
        while not found:
            found = {name for name in FINDINGS if rng.random() < rates.get(name, 0.0)}
    laterality = {f: str(rng.choice(SIDES, p=_SIDE_PROBS[f])) for f in LATERAL if f in found}
    severity = {f: str(rng.choice(SEVERITIES, p=_SEVERITY_PROBS)) for f in GRADED if f in found}
    zone = {f: str(rng.choice(ZONES, p=_ZONE_PROBS[f])) for f in ZONED if f in found}
    # Clinical correlations: edema comes with a big heart and bilateral effusions; pneumonia consolidates.
    if "Edema" in found:
        if rng.random() < 0.4 and "Cardiomegaly" not in found:
            found.add("Cardiomegaly")
            severity["Cardiomegaly"] = str(rng.choice(SEVERITIES, p=_SEVERITY_PROBS))
        if rng.random() < 0.4 and "Pleural Effusion" not in found:
            found.add("Pleural Effusion")
            laterality["Pleural Effusion"] = "bilateral"
            severity["Pleural Effusion"] = "mild"
    if "Pneumonia" in found and "Consolidation" not in found and rng.random() < 0.4:
        found.add("Consolidation")
        laterality["Consolidation"] = laterality["Pneumonia"]
        zone["Consolidation"] = zone["Pneumonia"]
    devices: tuple[str, ...] = ()
    if rng.random() < cfg.device_rate:
        count = 1 if rng.random() < 0.7 else 2
        devices = tuple(str(d) for d in rng.choice(DEVICES[:5] + (DEVICES[5],), size=count, replace=False))
        if "left chest tube" in devices and "right chest tube" in devices:
            devices = ("left chest tube",)
    rib = int(rng.choice(FRACTURE_RIBS)) if "Fracture" in found else None
    uncertain = []
    for name in sorted(found, key=FINDINGS.index):
        p = cfg.uncertain_rate * (2.0 if name == "Pneumonia" else 1.0)
        p *= 1.5 if severity.get(name) == "mild" else 1.0
        if name != "Enlarged Cardiomediastinum" and rng.random() < min(p, 0.9):
            uncertain.append(name)
    return Case(tuple(found), laterality, severity, zone, devices, rib, tuple(uncertain))


# --------------------------------------------------------------------------------------------- reports

_SEV_WORD = {
    "Cardiomegaly": {"mild": ("mild",), "moderate": ("moderate",), "severe": ("marked", "severe")},
    "Pleural Effusion": {"mild": ("small",), "moderate": ("moderate",), "severe": ("large",)},
    "Pneumothorax": {"mild": ("small", "tiny"), "moderate": ("moderate",), "severe": ("large",)},
    "Edema": {"mild": ("mild",), "moderate": ("moderate",), "severe": ("severe",)},
    "Lung Opacity": {"mild": ("mild", "faint"), "moderate": ("moderate",), "severe": ("extensive", "dense")},
    "Atelectasis": {"mild": ("minimal", "mild"), "moderate": ("moderate",), "severe": ("extensive",)},
}
_ORDINAL = {5: "fifth", 6: "sixth", 7: "seventh", 8: "eighth", 9: "ninth"}

# Positive statements: {sev} severity word, {side} left/right/bilateral, {zone} upper/lower, {lobe} lobe words.
_POSITIVE: dict[str, tuple[str, ...]] = {
    "Enlarged Cardiomediastinum": (
        "the mediastinum is widened",
        "the cardiomediastinal silhouette is enlarged",
        "there is widening of the mediastinal contours",
    ),
    "Cardiomegaly": ("{sev} cardiomegaly", "the heart is {sevly} enlarged", "the cardiac silhouette is {sevly} enlarged"),
    "Lung Opacity": ("{sev} patchy opacity in the {side} {zone} lung", "there is {sev} {side} {zone} lung opacity"),
    "Lung Lesion": ("there is a nodule in the {side} {zone} lung", "a {side} {zone} lung nodule is seen"),
    "Edema": ("{sev} pulmonary edema", "there is {sev} interstitial pulmonary edema", "findings of {sev} pulmonary edema"),
    "Consolidation": ("focal consolidation in the {side} {lobe}", "there is {side} {lobe} consolidation"),
    "Pneumonia": ("{side} {lobe} pneumonia", "findings consistent with {side} {lobe} pneumonia"),
    "Atelectasis": ("{sev} {side} basilar atelectasis", "{sev} atelectasis at the {side} lung base"),
    "Pneumothorax": ("there is a {sev} {side} pneumothorax", "{sev} {side} pneumothorax"),
    "Pleural Effusion": ("there is a {sev} {side} pleural effusion", "{sev} {side} pleural effusion"),
    "Pleural Other": ("{side} pleural thickening", "there is pleural thickening along the {side} chest wall"),
    "Fracture": ("there is a fracture of the {side} {ordinal} rib", "{side} {ordinal} rib fracture"),
}
_BILATERAL: dict[str, tuple[str, ...]] = {
    "Lung Opacity": ("{sev} bilateral patchy opacities", "there are {sev} bilateral {zone} lung opacities"),
    "Lung Lesion": ("there are bilateral pulmonary nodules", "multiple bilateral lung nodules are seen"),
    "Consolidation": ("bilateral {lobe} consolidation", "there is consolidation in both lungs"),
    "Pneumonia": ("bilateral {lobe} pneumonia", "findings consistent with bilateral pneumonia"),
    "Atelectasis": ("{sev} bibasilar atelectasis", "{sev} atelectasis at both lung bases"),
    "Pneumothorax": ("{sev} bilateral pneumothoraces", "there are {sev} bilateral pneumothoraces"),
    "Pleural Effusion": ("{sev} bilateral pleural effusions", "there are {sev} bilateral pleural effusions"),
    "Fracture": ("bilateral {ordinal} rib fractures", "there are fractures of both {ordinal} ribs"),
}
# Hedged statements (labelled uncertain); {what} is the positive phrase without its leading verb.
_HEDGED: dict[str, tuple[str, ...]] = {
    "Enlarged Cardiomediastinum": ("the mediastinum may be widened", "possible mediastinal widening"),
    "Cardiomegaly": ("the heart size is borderline", "possible {sev} cardiomegaly"),
    "Lung Opacity": ("possible {sev} opacity in the {side} {zone} lung",),
    "Lung Lesion": ("possible nodule in the {side} {zone} lung", "a {side} {zone} lung nodule is not excluded"),
    "Edema": ("possible {sev} pulmonary edema", "findings may represent {sev} pulmonary edema"),
    "Consolidation": ("possible {side} {lobe} consolidation",),
    "Pneumonia": ("findings in the {side} {lobe} may represent pneumonia", "{side} {lobe} pneumonia is not excluded"),
    "Atelectasis": ("{side} basilar changes may represent atelectasis", "possible {side} basilar atelectasis"),
    "Pneumothorax": ("possible {sev} {side} pneumothorax", "a {sev} {side} pneumothorax is not excluded"),
    "Pleural Effusion": ("possible {sev} {side} pleural effusion", "a {sev} {side} pleural effusion is not excluded"),
    "Pleural Other": ("possible {side} pleural thickening",),
    "Fracture": ("possible fracture of the {side} {ordinal} rib", "a {side} {ordinal} rib fracture is not excluded"),
}
_BILATERAL_HEDGED: dict[str, tuple[str, ...]] = {
    "Lung Opacity": ("possible {sev} bilateral opacities",),
    "Lung Lesion": ("possible bilateral pulmonary nodules",),
    "Consolidation": ("possible bilateral {lobe} consolidation",),
    "Pneumonia": ("bilateral findings may represent pneumonia",),
    "Atelectasis": ("bibasilar changes may represent atelectasis",),
    "Pneumothorax": ("possible {sev} bilateral pneumothoraces",),
    "Pleural Effusion": ("possible {sev} bilateral pleural effusions",),
    "Fracture": ("possible bilateral {ordinal} rib fractures",),
}
# Statements of normality; each states a set of observations as negative.
_NORMAL: dict[tuple[str, ...], tuple[str, ...]] = {
    ("Cardiomegaly",): (
        "the heart size is normal", "heart size is within normal limits", "the heart is normal in size",
        "no cardiomegaly",
    ),
    ("Enlarged Cardiomediastinum",): (
        "the mediastinal contours are normal", "mediastinal contours are within normal limits",
        "the mediastinum is not widened",
    ),
    ("Cardiomegaly", "Enlarged Cardiomediastinum"): (
        "the cardiomediastinal silhouette is unremarkable", "the cardiomediastinal silhouette is within normal limits",
        "heart size and mediastinal contours are normal", "the heart and mediastinum are normal",
    ),
    ("Lung Opacity",): ("the lungs are clear", "the lungs are clear bilaterally", "the lungs are well expanded and clear"),
    ("Consolidation",): ("there is no focal consolidation", "no focal consolidation", "no focal airspace consolidation"),
    ("Edema",): ("no pulmonary edema", "there is no pulmonary edema", "no evidence of pulmonary edema"),
    ("Consolidation", "Edema"): ("no focal consolidation or pulmonary edema", "no consolidation or edema"),
    ("Pneumonia",): ("no evidence of pneumonia", "no radiographic evidence of pneumonia"),
    ("Lung Lesion",): ("no suspicious pulmonary nodules", "no focal pulmonary nodule is seen"),
    ("Atelectasis",): ("no atelectasis",),
    ("Pleural Effusion",): ("no pleural effusion", "there is no pleural effusion", "the costophrenic angles are sharp"),
    ("Pneumothorax",): ("no pneumothorax", "there is no pneumothorax", "no evidence of pneumothorax"),
    ("Pleural Effusion", "Pneumothorax"): (
        "no pleural effusion or pneumothorax", "there is no pleural effusion or pneumothorax",
        "no pneumothorax or pleural effusion", "no evidence of pneumothorax or pleural effusion",
    ),
    ("Consolidation", "Pleural Effusion", "Pneumothorax"): (
        "no focal consolidation pleural effusion or pneumothorax",
        "there is no focal consolidation pleural effusion or pneumothorax",
    ),
    ("Pleural Other",): ("no pleural thickening",),
    ("Fracture",): (
        "no acute osseous abnormality", "the osseous structures are intact", "no displaced rib fracture",
        "visualized osseous structures are unremarkable",
    ),
}
_DEVICE_TEXT: dict[str, tuple[str, ...]] = {
    "pacemaker": (
        "a left chest wall pacemaker is present with leads in the right heart",
        "left sided dual chamber pacemaker in place",
    ),
    "endotracheal tube": (
        "an endotracheal tube terminates above the carina", "endotracheal tube in standard position",
    ),
    "nasogastric tube": ("a nasogastric tube courses below the diaphragm", "nasogastric tube tip is in the stomach"),
    "central venous catheter": (
        "right internal jugular central venous catheter terminates in the svc",
        "a right sided central line ends in the superior vena cava",
    ),
    "left chest tube": ("a left chest tube is in place", "left pleural drain in place"),
    "right chest tube": ("a right chest tube is in place", "right pleural drain in place"),
}
_IMPRESSION_NORMAL = ("no acute cardiopulmonary abnormality", "no acute cardiopulmonary process")
_SECTIONS: tuple[tuple[str, ...], ...] = (
    ("Enlarged Cardiomediastinum", "Cardiomegaly"),
    ("Lung Opacity", "Lung Lesion", "Edema", "Consolidation", "Pneumonia", "Atelectasis"),
    ("Pleural Effusion", "Pneumothorax", "Pleural Other"),
    ("Fracture",),
)
_MIN_WORDS, _MAX_WORDS = 25, 70


@dataclass
class Report:
    text: str  # cleaned (iu_xray style)
    labels: list[int | None]  # 14 values, CheXpert convention, as the text states them


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def _positive_sentence(case: Case, name: str, rng: np.random.Generator) -> str:
    side = case.laterality.get(name, "")
    hedged = name in case.uncertain
    if side == "bilateral":
        options = (_BILATERAL_HEDGED if hedged else _BILATERAL)[name]
    else:
        options = (_HEDGED if hedged else _POSITIVE)[name]
    sev_words = _SEV_WORD.get(name, {}).get(case.severity.get(name, ""), ("",))
    sev = _pick(rng, sev_words)
    zone = case.zone.get(name, "lower")
    lobe = {"upper": "upper lobe", "mid": "mid lung", "lower": "lower lobe"}[zone]
    text = _pick(rng, options).format(
        sev=sev, sevly=_adverb(sev), side=side, zone=zone, lobe=lobe, ordinal=_ORDINAL.get(case.rib or 0, ""),
    )
    return " ".join(text.split())


def _adverb(word: str) -> str:
    return {"mild": "mildly", "moderate": "moderately", "marked": "markedly", "severe": "severely"}.get(word, word)


_SECTION_OF = {name: index for index, members in enumerate(_SECTIONS) for name in members}


def _negations(chosen: list[str], rng: np.random.Generator) -> list[tuple[str, tuple[str, ...]]]:
    """Negate the chosen absent findings; merge them into one sentence when a shared phrase exists."""
    sentences = []
    while chosen:
        groups = [g for g in _NORMAL if chosen[0] in g and set(g) <= set(chosen) and g != ("Lung Opacity",)]
        groups.sort(key=len, reverse=True)
        if groups:
            group = groups[0] if rng.random() < 0.7 else groups[-1]
            sentences.append((_pick(rng, _NORMAL[group]), group))
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
    sections: list[list[str]] = [[] for _ in range(len(_SECTIONS) + 1)]

    def state(index: int, text: str, group: tuple[str, ...], value: int) -> None:
        sections[index].append(text)
        labels.update(dict.fromkeys(group, value))

    for name in case.findings:
        value = UNCERTAIN if name in case.uncertain else POSITIVE
        state(_SECTION_OF[name], _positive_sentence(case, name, rng), (name,), value)
    heart_normal = [n for n in _SECTIONS[0] if n not in case.findings]
    if len(heart_normal) == 2 and rng.random() < 0.5:
        group = ("Cardiomegaly", "Enlarged Cardiomediastinum")
        state(0, _pick(rng, _NORMAL[group]), group, NEGATIVE)
    elif "Cardiomegaly" in heart_normal:
        state(0, _pick(rng, _NORMAL[("Cardiomegaly",)]), ("Cardiomegaly",), NEGATIVE)
    if not sections[1] and rng.random() < 0.85:
        state(1, _pick(rng, _NORMAL[("Lung Opacity",)]), ("Lung Opacity",), NEGATIVE)

    absent = [n for n in FINDINGS if n not in case.findings and n not in labels and n != "Lung Opacity"]
    rng.shuffle(absent)
    chosen = [n for n in absent if rng.random() < cfg.negation_rate]
    optional = []  # negations that may be dropped to keep the report short
    for text, group in _negations(chosen, rng):
        index = max(_SECTION_OF[g] for g in group)
        state(index, text, group, NEGATIVE)
        optional.append((index, text, group))
    for device in case.devices:
        state(len(_SECTIONS), _pick(rng, _DEVICE_TEXT[device]), ("Support Devices",), POSITIVE)
    if not case.findings:
        labels["No Finding"] = POSITIVE
        if rng.random() < 0.35:
            sections[-1].append(_pick(rng, _IMPRESSION_NORMAL))

    def words() -> int:
        return sum(len(s.split()) for lines in sections for s in lines)

    rng.shuffle(optional)
    while words() > _MAX_WORDS and optional:
        index, text, group = optional.pop()
        sections[index].remove(text)
        for g in group:
            del labels[g]
    fillers = [n for n in absent if n not in labels]
    while words() < _MIN_WORDS and fillers:
        name = fillers.pop()
        state(_SECTION_OF[name], _pick(rng, _NORMAL[(name,)]), (name,), NEGATIVE)
    text = clean_report(". ".join(s for lines in sections for s in lines) + ".", "iu_xray")
    return Report(text=text, labels=[labels.get(name) for name in OBSERVATIONS])


def write_report(case: Case, rng: np.random.Generator) -> str:
    """The cleaned report text for a case (see ``compose_report`` for its labels)."""
    return compose_report(case, rng).text
