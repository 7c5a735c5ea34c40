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
    "Lung Opacity",
    "Lung Lesion",
    "Consolidation",
    "Pneumonia",
    "Atelectasis",
    "Pneumothorax",
    "Pleural Effusion",
    "Pleural Other",
    "Fracture",
)
GRADED: tuple[str, ...] = (
    "Cardiomegaly",
    "Lung Opacity",
    "Edema",
    "Atelectasis",
    "Pneumothorax",
    "Pleural Effusion",
)
ZONED: tuple[str, ...] = ("Lung Opacity", "Lung Lesion", "Consolidation", "Pneumonia")
SIDES: tuple[str, ...] = ("left", "right", "bilateral")
SEVERITIES: tuple[str, ...] = ("mild", "moderate", "severe")
ZONES: tuple[str, ...] = ("upper", "mid", "lower")
DEVICES: tuple[str, ...] = (
    "pacemaker",
    "endotracheal tube",
    "nasogastric tube",
    "central venous catheter",
    "left chest tube",
    "right chest tube",
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
    """What to generate. Rates are probabilities; ``finding_rates`` apply within abnormal cases.

    The defaults give about 28% No Finding cases and two or more findings in about half of all cases.
    A finding left out of ``finding_rates`` never occurs.
    """

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
        devices = tuple(str(d) for d in rng.choice(DEVICES, size=count, replace=False))
        if "left chest tube" in devices and "right chest tube" in devices:
            devices = devices[:1]
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
    "Cardiomegaly": (
        "{sev} cardiomegaly",
        "the heart is {sevly} enlarged",
        "the cardiac silhouette is {sevly} enlarged",
    ),
    "Lung Opacity": ("{sev} patchy opacity in the {side} {zone} lung", "there is {sev} {side} {zone} lung opacity"),
    "Lung Lesion": ("there is a nodule in the {side} {zone} lung", "a {side} {zone} lung nodule is seen"),
    "Edema": (
        "{sev} pulmonary edema",
        "there is {sev} interstitial pulmonary edema",
        "findings of {sev} pulmonary edema",
    ),
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
    "Pleural Other": ("bilateral pleural thickening", "there is pleural thickening along both chest walls"),
    "Fracture": ("bilateral {ordinal} rib fractures", "there are fractures of both {ordinal} ribs"),
}
# Hedged statements (labelled uncertain), same placeholders.
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
    "Pleural Other": ("possible bilateral pleural thickening",),
    "Fracture": ("possible bilateral {ordinal} rib fractures",),
}
# Statements of normality; each states a set of observations as negative.
_NORMAL: dict[tuple[str, ...], tuple[str, ...]] = {
    ("Cardiomegaly",): (
        "the heart size is normal",
        "heart size is within normal limits",
        "the heart is normal in size",
        "no cardiomegaly",
    ),
    ("Enlarged Cardiomediastinum",): (
        "the mediastinal contours are normal",
        "mediastinal contours are within normal limits",
        "the mediastinum is not widened",
    ),
    ("Cardiomegaly", "Enlarged Cardiomediastinum"): (
        "the cardiomediastinal silhouette is unremarkable",
        "the cardiomediastinal silhouette is within normal limits",
        "heart size and mediastinal contours are normal",
        "the heart and mediastinum are normal",
    ),
    ("Lung Opacity",): (
        "the lungs are clear",
        "the lungs are clear bilaterally",
        "the lungs are well expanded and clear",
    ),
    ("Consolidation",): (
        "there is no focal consolidation",
        "no focal consolidation",
        "no focal airspace consolidation",
    ),
    ("Edema",): ("no pulmonary edema", "there is no pulmonary edema", "no evidence of pulmonary edema"),
    ("Consolidation", "Edema"): ("no focal consolidation or pulmonary edema", "no consolidation or edema"),
    ("Pneumonia",): ("no evidence of pneumonia", "no radiographic evidence of pneumonia"),
    ("Lung Lesion",): ("no suspicious pulmonary nodules", "no focal pulmonary nodule is seen"),
    ("Atelectasis",): ("no atelectasis",),
    ("Pleural Effusion",): ("no pleural effusion", "there is no pleural effusion", "the costophrenic angles are sharp"),
    ("Pneumothorax",): ("no pneumothorax", "there is no pneumothorax", "no evidence of pneumothorax"),
    ("Pleural Effusion", "Pneumothorax"): (
        "no pleural effusion or pneumothorax",
        "there is no pleural effusion or pneumothorax",
        "no pneumothorax or pleural effusion",
        "no evidence of pneumothorax or pleural effusion",
    ),
    ("Consolidation", "Pleural Effusion", "Pneumothorax"): (
        "no focal consolidation pleural effusion or pneumothorax",
        "there is no focal consolidation pleural effusion or pneumothorax",
    ),
    ("Pleural Other",): ("no pleural thickening",),
    ("Fracture",): (
        "no acute osseous abnormality",
        "the osseous structures are intact",
        "no displaced rib fracture",
        "visualized osseous structures are unremarkable",
    ),
}
_DEVICE_TEXT: dict[str, tuple[str, ...]] = {
    "pacemaker": (
        "a left chest wall pacemaker is present with leads in the right heart",
        "left sided dual chamber pacemaker in place",
    ),
    "endotracheal tube": (
        "an endotracheal tube terminates above the carina",
        "endotracheal tube in standard position",
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
# How often an absent finding is negated, relative to ``negation_rate``: radiologists routinely rule out
# effusion, pneumothorax and consolidation, rarely atelectasis or pleural thickening.
_NEGATION_WEIGHT: dict[str, float] = {
    "Enlarged Cardiomediastinum": 0.6,
    "Cardiomegaly": 1.0,
    "Lung Lesion": 0.3,
    "Edema": 0.8,
    "Consolidation": 1.0,
    "Pneumonia": 0.5,
    "Atelectasis": 0.15,
    "Pneumothorax": 1.0,
    "Pleural Effusion": 1.0,
    "Pleural Other": 0.1,
    "Fracture": 0.9,
}


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
        sev=sev,
        sevly=_adverb(sev),
        side=side,
        zone=zone,
        lobe=lobe,
        ordinal=_ORDINAL.get(case.rib or 0, ""),
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
    chosen = [n for n in absent if rng.random() < cfg.negation_rate * _NEGATION_WEIGHT[n]]
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
    fillers = sorted((n for n in absent if n not in labels), key=_NEGATION_WEIGHT.__getitem__)
    while words() < _MIN_WORDS and fillers:
        name = fillers.pop()
        state(_SECTION_OF[name], _pick(rng, _NORMAL[(name,)]), (name,), NEGATIVE)
    text = clean_report(". ".join(s for lines in sections for s in lines) + ".", "iu_xray")
    return Report(text=text, labels=[labels.get(name) for name in OBSERVATIONS])


def write_report(case: Case, rng: np.random.Generator) -> str:
    """The cleaned report text for a case (see ``compose_report`` for its labels)."""
    return compose_report(case, rng).text


# ---------------------------------------------------------------------------------------------- images


@dataclass
class _Patient:
    """Per-image anatomy and exposure, drawn before any finding so findings do not shift them."""

    cx: float  # body midline
    scale: float  # body size
    top: float  # lung apices
    base: float  # lung bases (costophrenic angles)
    half_width: float  # midline to lateral lung edge
    ctr: float  # normal cardiothoracic ratio of this patient
    mediastinum: float  # width of the upper mediastinum
    tissue: float  # soft-tissue brightness
    lung: float  # aerated-lung brightness
    gamma: float
    contrast: float
    brightness: float
    noise: float
    blur: float  # in units of a 128 px image's pixels
    heel: float  # left-right exposure gradient
    vessel_freq: tuple[float, float]
    vessel_phase: tuple[float, float, float, float]
    rib_tilt: float
    gastric_bubble: bool


def _draw_patient(rng: np.random.Generator) -> _Patient:
    scale = rng.uniform(0.88, 1.04)
    top = 0.15 + rng.uniform(-0.03, 0.03)
    return _Patient(
        cx=0.5 + rng.uniform(-0.03, 0.03),
        scale=scale,
        top=top,
        base=top + 0.56 * scale * rng.uniform(0.9, 1.08),
        half_width=0.36 * scale,
        ctr=rng.uniform(0.40, 0.48),
        mediastinum=rng.uniform(0.10, 0.13) * scale,
        tissue=rng.uniform(0.40, 0.52),
        lung=rng.uniform(0.13, 0.21),
        gamma=rng.uniform(0.85, 1.2),
        contrast=rng.uniform(0.8, 1.2),
        brightness=rng.uniform(-0.07, 0.07),
        noise=rng.uniform(0.015, 0.045),
        blur=rng.uniform(0.4, 1.0),
        heel=rng.uniform(-0.06, 0.06),
        vessel_freq=(float(rng.integers(9, 14)), float(rng.integers(15, 22))),
        vessel_phase=tuple(float(v) for v in rng.uniform(0, 2 * np.pi, 4)),
        rib_tilt=rng.uniform(-0.015, 0.015),
        gastric_bubble=bool(rng.random() < 0.6),
    )


def _ramp(d: np.ndarray, width: float) -> np.ndarray:
    """Soft inside-mask from a signed distance (negative inside) with an edge ``width`` wide."""
    return np.clip(0.5 - d / width, 0.0, 1.0)


def _gauss(x: np.ndarray, y: np.ndarray, cx: float, cy: float, sx: float, sy: float) -> np.ndarray:
    return np.exp(-0.5 * (((x - cx) / sx) ** 2 + ((y - cy) / sy) ** 2))


def _segments_distance(x: np.ndarray, y: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Distance from every pixel to a polyline given as [K, 2] points."""
    best = np.full(x.shape, np.inf)
    for (x0, y0), (x1, y1) in zip(points[:-1], points[1:], strict=True):
        dx, dy = x1 - x0, y1 - y0
        t = np.clip(((x - x0) * dx + (y - y0) * dy) / max(dx * dx + dy * dy, 1e-12), 0.0, 1.0)
        best = np.minimum(best, np.hypot(x - x0 - t * dx, y - y0 - t * dy))
    return best


def _curve(p0: tuple[float, float], p1: tuple[float, float], p2: tuple[float, float], k: int = 12) -> np.ndarray:
    """Quadratic Bezier through control point p1, as a polyline."""
    t = np.linspace(0.0, 1.0, k)[:, None]
    a, b, c = np.array(p0), np.array(p1), np.array(p2)
    return (1 - t) ** 2 * a + 2 * (1 - t) * t * b + t**2 * c


def _blur(img: np.ndarray, sigma: float) -> np.ndarray:
    """Separable Gaussian blur with edge padding (numpy only)."""
    radius = max(1, int(np.ceil(2.5 * sigma)))
    taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    taps /= taps.sum()
    for axis in (0, 1):
        pad = [(0, 0), (0, 0)]
        pad[axis] = (radius, radius)
        padded = np.pad(img, pad, mode="edge")
        n = img.shape[axis]
        img = sum(w * np.take(padded, np.arange(i, i + n), axis=axis) for i, w in enumerate(taps))
    return img


def _signs(side: str) -> tuple[int, ...]:
    # Patient's right is the image's left (sign -1).
    return {"right": (-1,), "left": (1,), "bilateral": (-1, 1)}[side]


class _Canvas:
    """Geometry of one drawing: pixel grid, lungs and their landmarks."""

    def __init__(self, p: _Patient, size: int):
        self.p, self.size = p, size
        coords = (np.arange(size) + 0.5) / size
        self.y, self.x = np.meshgrid(coords, coords, indexing="ij")
        self.edge = 1.5 / size
        self.lung: dict[int, np.ndarray] = {}
        self.rim: dict[int, np.ndarray] = {}  # 0 at the lung centre, 1 at its outer edge
        self.shell: dict[int, np.ndarray] = {}  # the lung outline without the diaphragm dome
        self.centre: dict[int, tuple[float, float]] = {}
        self.semi: tuple[float, float] = (p.half_width * 0.46, (p.base - p.top) / 2)
        for s in (-1, 1):
            base = p.base - (0.015 if s < 0 else 0.0)  # the right hemidiaphragm sits higher
            lx, ly = p.cx + s * p.half_width * 0.54, (p.top + base) / 2
            ax, ay = self.semi
            exponent = np.where(self.y < ly, 2.0, 3.2)  # round apex, squarer costophrenic angles
            r = (np.abs((self.x - lx) / ax) ** exponent + np.abs((self.y - ly) / ay) ** exponent) ** (1 / exponent)
            dome = base - 0.05 * p.scale * np.exp(-(((self.x - lx + s * 0.2 * ax) / (0.7 * ax)) ** 2))
            self.shell[s] = _ramp((r - 1.0) * ax, self.edge)
            self.lung[s] = self.shell[s] * _ramp(self.y - dome, self.edge)
            self.rim[s] = r
            self.centre[s] = (lx, ly)

    def zone_y(self, zone: str) -> float:
        top, height = self.p.top, self.p.base - self.p.top
        return top + height * {"upper": 0.28, "mid": 0.5, "lower": 0.74}[zone]

    def hilum(self, s: int) -> tuple[float, float]:
        return self.p.cx + s * 0.085 * self.p.scale, self.centre[s][1] - 0.03


def _strength(case: Case, name: str) -> float:
    """How strongly a finding is drawn: hedged findings are drawn fainter."""
    return 0.7 if name in case.uncertain else 1.0


def draw_image(case: Case, rng: np.random.Generator, size: int = 128) -> np.ndarray:
    """Draw a frontal chest radiograph for ``case``: uint8 [size, size], 0 black (air) to 255 (metal)."""
    if size < 32:
        raise ValueError(f"image size must be >= 32, got {size}")
    noise = rng.standard_normal((size, size))
    p = _draw_patient(rng)
    c = _Canvas(p, size)
    x, y = c.x, c.y
    lungs = np.maximum(c.lung[-1], c.lung[1])

    # Body: soft tissue from the neck to the abdomen, brighter below the diaphragm.
    half = 0.08 + (0.45 * p.scale - 0.08) / (1 + np.exp(-(y - 0.12) / 0.03))
    body = _ramp(np.abs(x - p.cx) - half, c.edge)
    img = 0.03 + body * (p.tissue + 0.06 * _ramp(p.base - y, 0.05) - 0.04)
    if p.gastric_bubble:
        img -= 0.12 * _ramp(np.hypot((x - p.cx - 0.16 * p.scale) / 1.4, y - p.base - 0.06) - 0.03, c.edge)

    # Aerated lungs with vessel markings radiating from the hila.
    img = img * (1 - lungs) + (p.lung + 0.05 * _ramp(y - p.top - 0.08, 0.12)) * lungs
    markings = np.zeros_like(img)
    for s in (-1, 1):
        hx, hy = c.hilum(s)
        theta = np.arctan2(y - hy, (x - hx) * s)
        dist = np.hypot(x - hx, y - hy)
        f1, f2 = p.vessel_freq
        ph = p.vessel_phase
        streaks = (0.5 + 0.5 * np.cos(f1 * theta + ph[0])) ** 6 + 0.6 * (0.5 + 0.5 * np.cos(f2 * theta + ph[1])) ** 8
        breaks = 0.65 + 0.35 * np.cos(dist * 90 + 4 * theta + ph[2])
        markings += c.lung[s] * (0.14 * streaks * breaks + 0.12 * np.exp(-dist / 0.03)) * np.exp(-dist / 0.22)
    edema = case.severity.get("Edema", "moderate") if "Edema" in case.findings else None
    if edema:  # vascular congestion: markings get heavier
        markings *= 1.0 + {"mild": 0.3, "moderate": 0.5, "severe": 0.7}[edema] * _strength(case, "Edema")

    # Pneumothorax: a rim at the lateral/apical lung edge without markings, and a thin visceral pleural line.
    if "Pneumothorax" in case.findings:
        gap = {"mild": 0.025, "moderate": 0.055, "severe": 0.1}[case.severity["Pneumothorax"]] * p.scale
        gap *= _strength(case, "Pneumothorax") * rng.uniform(0.85, 1.15)
        for s in _signs(case.laterality["Pneumothorax"]):
            lx, ly = c.centre[s]
            depth = 1.0 - gap / c.semi[0]
            upper = _ramp(y - (ly + 0.35 * c.semi[1]), 0.04)
            lateral = _ramp(-(x - lx) * s - 0.3 * c.semi[0], 0.05)
            region = c.lung[s] * _ramp(depth - c.rim[s], 0.01) * upper * lateral
            markings *= 1 - region
            img -= 0.1 * region
            line = c.lung[s] * _ramp(np.abs(c.rim[s] - depth) * c.semi[0] - 0.6 / size, c.edge) * upper * lateral
            img += 0.18 * line
    img += markings

    # Parenchymal findings, confined to the lungs.
    dense = np.zeros_like(img)
    if edema:
        amp, spread = {"mild": (0.06, 0.08), "moderate": (0.11, 0.11), "severe": (0.17, 0.14)}[edema]
        for s in (-1, 1):
            hx, hy = c.hilum(s)
            dense += (
                amp
                * _strength(case, "Edema")
                * c.lung[s]
                * _gauss(x, y, hx + s * 0.03, hy + 0.02, spread * p.scale, spread * 1.3 * p.scale)
            )
    if "Lung Opacity" in case.findings:
        amp = {"mild": 0.08, "moderate": 0.14, "severe": 0.22}[case.severity["Lung Opacity"]]
        for s in _signs(case.laterality["Lung Opacity"]):
            lx, _ = c.centre[s]
            zy = c.zone_y(case.zone["Lung Opacity"])
            for _ in range(int(rng.integers(2, 5))):
                bx, by = lx + rng.uniform(-0.5, 0.5) * c.semi[0], zy + rng.uniform(-0.06, 0.06)
                r = rng.uniform(0.035, 0.07) * p.scale
                dense += amp * _strength(case, "Lung Opacity") * c.lung[s] * _gauss(x, y, bx, by, r, r * 0.8)
    for name, amp, sharp in (("Consolidation", 0.26, True), ("Pneumonia", 0.2, False)):
        if name not in case.findings:
            continue
        for s in _signs(case.laterality[name]):
            lx, _ = c.centre[s]
            bx = lx + rng.uniform(-0.2, 0.2) * c.semi[0]
            by = c.zone_y(case.zone[name]) + rng.uniform(-0.03, 0.03)
            rx, ry = rng.uniform(0.08, 0.11) * p.scale, rng.uniform(0.06, 0.09) * p.scale
            if sharp:  # homogeneous lobar patch with a defined edge
                patch = _ramp((np.hypot((x - bx) / rx, (y - by) / ry) - 1) * ry, 0.012)
            else:  # ill-defined patch with satellite blobs
                patch = _gauss(x, y, bx, by, rx * 0.7, ry * 0.7)
                for _ in range(int(rng.integers(3, 6))):
                    sx, sy = bx + rng.uniform(-1.5, 1.5) * rx, by + rng.uniform(-1.3, 1.3) * ry
                    patch = patch + 0.5 * _gauss(x, y, sx, sy, 0.02 * p.scale, 0.02 * p.scale)
            dense += amp * _strength(case, name) * c.lung[s] * np.minimum(patch, 1.2)
    if "Atelectasis" in case.findings:
        thick = {"mild": 0.008, "moderate": 0.014, "severe": 0.024}[case.severity["Atelectasis"]] * p.scale
        for s in _signs(case.laterality["Atelectasis"]):
            lx, _ = c.centre[s]
            bx, by = lx + rng.uniform(-0.15, 0.15) * c.semi[0], c.zone_y("lower") + rng.uniform(0.0, 0.04)
            angle = rng.uniform(-0.35, 0.35)
            half_len = rng.uniform(0.07, 0.11) * p.scale
            ends = np.array(
                [
                    [bx - half_len * np.cos(angle), by - half_len * np.sin(angle)],
                    [bx + half_len * np.cos(angle), by + half_len * np.sin(angle)],
                ]
            )
            band = _ramp(_segments_distance(x, y, ends) - thick / 2, max(c.edge, thick / 2))
            dense += 0.2 * _strength(case, "Atelectasis") * c.lung[s] * band
    if "Lung Lesion" in case.findings:
        sides = _signs(case.laterality["Lung Lesion"])
        count = int(rng.integers(2, 4)) if len(sides) == 2 else 1
        for k in range(count):
            s = sides[k % len(sides)]
            lx, _ = c.centre[s]
            zy = c.zone_y(case.zone["Lung Lesion"]) if k == 0 else c.zone_y(str(rng.choice(ZONES)))
            bx, by = lx + rng.uniform(-0.4, 0.4) * c.semi[0], zy + rng.uniform(-0.03, 0.03)
            r = rng.uniform(0.012, 0.035) * p.scale
            dense += 0.24 * _strength(case, "Lung Lesion") * c.lung[s] * _ramp(np.hypot(x - bx, y - by) - r, 0.006)
    img += dense

    # Pleural effusion: fluid at the base, its surface climbing the lateral wall (meniscus).
    if "Pleural Effusion" in case.findings:
        height = {"mild": 0.06, "moderate": 0.18, "severe": 0.34}[case.severity["Pleural Effusion"]]
        height *= (p.base - p.top) * _strength(case, "Pleural Effusion")
        for s in _signs(case.laterality["Pleural Effusion"]):
            lx, _ = c.centre[s]
            h = height * rng.uniform(0.85, 1.15)
            lateral = np.clip((x - lx) * s / c.semi[0] + 0.5, 0.0, 1.5)
            surface = p.base - h * (0.55 + 0.6 * lateral**2)
            fluid = _ramp(surface - y, 0.012) * c.shell[s]
            img = img * (1 - 0.85 * fluid) + (p.tissue + 0.06) * 0.85 * fluid

    # Pleural thickening: a bright band along the lateral chest wall.
    if "Pleural Other" in case.findings:
        for s in _signs(case.laterality["Pleural Other"]):
            lx, ly = c.centre[s]
            thick = rng.uniform(0.015, 0.025) * p.scale
            band = c.lung[s] * _ramp((1.0 - c.rim[s]) * c.semi[0] - thick, c.edge)
            band *= _ramp(-(x - lx) * s, 0.03) * _ramp(np.abs(y - ly - rng.uniform(-0.05, 0.1)) - 0.12, 0.04)
            img += 0.22 * _strength(case, "Pleural Other") * band

    # Mediastinum (with the aortic knob), trachea and heart.
    widened = "Enlarged Cardiomediastinum" in case.findings
    width = p.mediastinum * (
        (1.7 + 0.2 * rng.random()) * _strength(case, "Enlarged Cardiomediastinum") if widened else 1.0
    )
    width = max(width, p.mediastinum)
    heart_top = p.base - 0.26 * p.scale
    medi = _ramp(np.abs(x - p.cx - 0.005) - width / 2, c.edge) * _ramp(y - heart_top - 0.03, 0.02) * body
    knob_r = 0.035 * p.scale * (1.3 if widened else 1.0)
    medi = np.maximum(medi, _ramp(np.hypot(x - p.cx - width / 2 + 0.01, y - p.top - 0.09) - knob_r, c.edge))
    img = img * (1 - medi) + (p.tissue + 0.08) * medi
    carina = p.top + 0.12 * p.scale
    img -= 0.09 * _ramp(np.abs(x - p.cx) - 0.016 * p.scale, c.edge) * _ramp(y - carina, c.edge)
    ctr = p.ctr
    if "Cardiomegaly" in case.findings:
        grow = {"mild": 0.08, "moderate": 0.13, "severe": 0.2}[case.severity["Cardiomegaly"]]
        ctr += (grow + rng.uniform(-0.02, 0.02)) * _strength(case, "Cardiomegaly")
    hw = ctr * p.half_width
    hh = 0.8 * hw + 0.01
    hx, hy = p.cx + 0.3 * hw, p.base - 0.07 - 0.2 * hh
    heart = _ramp((np.hypot((x - hx) / hw, (y - hy) / hh) - 1) * hh, c.edge)
    img = img * (1 - heart) + (p.tissue + 0.1) * heart

    # Bones: spine, clavicles, posterior ribs (one broken for a fracture).
    spacing = (p.base - p.top + 0.05) / 9
    vertebrae = 0.5 + 0.5 * np.cos(2 * np.pi * (y - p.top) / spacing)
    img += (0.08 + 0.04 * vertebrae) * _ramp(np.abs(x - p.cx) - 0.032 * p.scale, c.edge) * body
    for s in (-1, 1):
        pts = np.array([[p.cx + s * 0.04, p.top - 0.005], [p.cx + s * 0.3 * p.scale, p.top - 0.05]])
        img += 0.12 * _ramp(_segments_distance(x, y, pts) - 0.009 * p.scale, c.edge)
    fracture_sides = _signs(case.laterality["Fracture"]) if "Fracture" in case.findings else ()
    for s in (-1, 1):
        u = (x - p.cx) * s
        extent = _ramp(0.02 - u, c.edge) * _ramp(u - p.half_width - 0.03, c.edge) * body
        for i in range(9):
            centre = p.top - 0.04 + i * spacing + p.rib_tilt * s + 1.3 * (u - 0.09) ** 2 / p.scale
            rib = extent
            if s in fracture_sides and case.rib == i + 2:
                uf = rng.uniform(0.14, 0.26) * p.scale
                gap = rng.uniform(0.008, 0.014) * _strength(case, "Fracture")
                step = rng.choice((-1.0, 1.0)) * rng.uniform(0.006, 0.012) * _strength(case, "Fracture")
                centre = centre + step / (1 + np.exp(-(u - uf) / 0.003))
                rib = rib * (1 - _ramp(np.abs(u - uf) - gap / 2, c.edge))
            band = _ramp(np.abs(y - centre) - 0.0055 * p.scale, c.edge)
            img += 0.11 * rib * band

    # Support devices: bright lines and a generator box.
    metal = np.zeros_like(img)
    for device in case.devices:
        if device == "pacemaker":
            bx, by = p.cx + 0.24 * p.scale, p.top + 0.02
            box = _ramp(np.maximum(np.abs(x - bx) - 0.028, np.abs(y - by) - 0.018), c.edge)
            leads = _curve((bx - 0.02, by), (p.cx - 0.05, p.top + 0.05), (p.cx + 0.02, p.base - 0.12))
            metal = np.maximum(metal, np.maximum(box, _ramp(_segments_distance(x, y, leads) - 0.003, c.edge)))
            continue
        if device == "endotracheal tube":
            path, width = np.array([[p.cx, 0.0], [p.cx + 0.005, carina - rng.uniform(0.03, 0.06)]]), 0.007
        elif device == "nasogastric tube":
            path = _curve((p.cx - 0.005, 0.0), (p.cx, p.base), (p.cx + 0.15 * p.scale, p.base + 0.08))
            width = 0.004
        elif device == "central venous catheter":
            path = _curve((p.cx - 0.12, 0.02), (p.cx - 0.06, p.top), (p.cx - 0.03, p.top + 0.15))
            width = 0.003
        else:  # chest tube
            s = -1 if device.startswith("right") else 1
            lx, ly = c.centre[s]
            path = _curve((lx + s * 0.9 * c.semi[0], p.base), (lx + s * 0.6 * c.semi[0], ly), (lx, p.top + 0.04))
            width = 0.006
        metal = np.maximum(metal, _ramp(_segments_distance(x, y, path) - width, c.edge))
    img = img * (1 - metal) + 0.97 * metal

    # Exposure, detector blur and noise.
    img = np.clip(img, 0.0, 1.0) ** p.gamma * p.contrast + p.brightness + p.heel * (x - 0.5)
    img = _blur(img, p.blur * size / 128)
    img = img + p.noise * noise
    return np.round(np.clip(img, 0.0, 1.0) * 255).astype(np.uint8)


# --------------------------------------------------------------------------------------------- writing


def split_counts(n: int, fractions: tuple[float, float, float]) -> tuple[int, int, int]:
    """Train/val/test sizes: val and test rounded from their fractions, train takes the rest."""
    val, test = round(n * fractions[1]), round(n * fractions[2])
    return n - val - test, val, test


def _sample_generators(seed: int, index: int) -> list[np.random.Generator]:
    return [np.random.default_rng(s) for s in np.random.SeedSequence([seed, index]).spawn(3)]


def generate_item(cfg: PhantomConfig, index: int) -> tuple[dict, np.ndarray]:
    """Annotation item and image for sample ``index`` (independent of ``cfg.n``)."""
    case_rng, report_rng, image_rng = _sample_generators(cfg.seed, index)
    case = sample_case(case_rng, cfg)
    report = compose_report(case, report_rng, cfg)
    present = case.present
    item_id = f"{cfg.id_prefix}_{index:05d}"
    item = {
        "id": item_id,
        "report": report.text,
        "image_path": [f"images/{item_id}.png"],
        "labels": report.labels,
        "categories": [name for name, flag in zip(OBSERVATIONS, present, strict=True) if flag],
        "present": [int(v) for v in present],
        "attributes": case.attributes(),
    }
    return item, draw_image(case, image_rng, cfg.image_size)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _png_bytes(image: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    Image.fromarray(image, mode="L").save(buffer, format="PNG", compress_level=6, optimize=False)
    return buffer.getvalue()


def synthesize(out_dir: str | os.PathLike, cfg: PhantomConfig | None = None) -> Path:
    """Write ``out_dir/annotation.json`` (R2Gen format) and ``out_dir/images/<id>.png``; return the json path.

    Byte-identical for the same config on the same platform. The annotation is written last and atomically,
    so a present annotation.json always describes a complete set of images.
    """
    cfg = cfg or PhantomConfig()
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    counts = split_counts(cfg.n, cfg.split_fractions)
    names = ("train", "val", "test")
    splits: dict[str, list[dict]] = {name: [] for name in names}
    bounds = np.cumsum(counts)
    bar = tqdm(range(cfg.n), desc="phantom", unit="img", disable=not sys.stderr.isatty())
    for index in bar:
        item, image = generate_item(cfg, index)
        _atomic_write(out / item["image_path"][0], _png_bytes(image))
        splits[names[int(np.searchsorted(bounds, index, side="right"))]].append(item)
    path = out / "annotation.json"
    _atomic_write(path, (json.dumps(splits, sort_keys=True, indent=2) + "\n").encode("utf-8"))
    return path
