"""A case (one patient's present findings and their attributes) and how one is drawn at random."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.constants import NO_FINDING, NUM_OBSERVATIONS, OBSERVATIONS
from harness.data.phantom.config import PhantomConfig
from harness.data.phantom.vocabulary import (
    DEVICES,
    FINDINGS,
    FRACTURE_RIBS,
    GRADED,
    LATERAL,
    SEVERITIES,
    SEVERITY_PROBS,
    SIDE_PROBS,
    SIDES,
    ZONE_PROBS,
    ZONED,
    ZONES,
)


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


def sample_case(rng: np.random.Generator, cfg: PhantomConfig | None = None) -> Case:
    """Draw one case: normal with probability ``normal_fraction``, else at least one finding."""
    cfg = cfg or PhantomConfig()
    rates = cfg.finding_rates
    found: set[str] = set()
    if rng.random() >= cfg.normal_fraction:
        while not found:
            found = {name for name in FINDINGS if rng.random() < rates.get(name, 0.0)}
    laterality = {f: str(rng.choice(SIDES, p=SIDE_PROBS[f])) for f in LATERAL if f in found}
    severity = {f: str(rng.choice(SEVERITIES, p=SEVERITY_PROBS)) for f in GRADED if f in found}
    zone = {f: str(rng.choice(ZONES, p=ZONE_PROBS[f])) for f in ZONED if f in found}
    # Clinical correlations: edema comes with a big heart and bilateral effusions; pneumonia consolidates.
    if "Edema" in found:
        if rng.random() < 0.4 and "Cardiomegaly" not in found:
            found.add("Cardiomegaly")
            severity["Cardiomegaly"] = str(rng.choice(SEVERITIES, p=SEVERITY_PROBS))
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
