"""A patient's anatomy and exposure (drawn before any finding) and the canvas geometry built from them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.data.phantom.geometry import ramp


@dataclass
class Patient:
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


def draw_patient(rng: np.random.Generator) -> Patient:
    scale = rng.uniform(0.88, 1.04)
    top = 0.15 + rng.uniform(-0.03, 0.03)
    return Patient(
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


class Canvas:
    """Geometry of one drawing: pixel grid, lungs and their landmarks."""

    def __init__(self, p: Patient, size: int):
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
            self.shell[s] = ramp((r - 1.0) * ax, self.edge)
            self.lung[s] = self.shell[s] * ramp(self.y - dome, self.edge)
            self.rim[s] = r
            self.centre[s] = (lx, ly)

    def zone_y(self, zone: str) -> float:
        top, height = self.p.top, self.p.base - self.p.top
        return top + height * {"upper": 0.28, "mid": 0.5, "lower": 0.74}[zone]

    def hilum(self, s: int) -> tuple[float, float]:
        return self.p.cx + s * 0.085 * self.p.scale, self.centre[s][1] - 0.03

