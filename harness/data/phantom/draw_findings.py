"""One drawing function per finding kind; `render.draw_image` calls them in a fixed order.

Each takes the image (or the layer it adds to), the case, the patient, the canvas and the image generator,
and returns the updated array. The order of calls fixes the order of random draws, so it must not change
for a given seed to keep giving the same image.
"""

from __future__ import annotations

import numpy as np

from harness.data.phantom.anatomy import Canvas, Patient
from harness.data.phantom.case import Case
from harness.data.phantom.geometry import gauss, ramp, segments_distance, signs
from harness.data.phantom.vocabulary import ZONES


def strength(case: Case, name: str) -> float:
    """How strongly a finding is drawn: hedged findings are drawn fainter."""
    return 0.7 if name in case.uncertain else 1.0


def _edema_grade(case: Case) -> str | None:
    return case.severity.get("Edema", "moderate") if "Edema" in case.findings else None


def edema_congestion(markings: np.ndarray, case: Case) -> np.ndarray:
    """Edema's vascular congestion: the vessel markings get heavier."""
    edema = _edema_grade(case)
    if edema:
        markings *= 1.0 + {"mild": 0.3, "moderate": 0.5, "severe": 0.7}[edema] * strength(case, "Edema")
    return markings


def pneumothorax(
    img: np.ndarray, markings: np.ndarray, case: Case, p: Patient, c: Canvas, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """A rim at the lateral/apical lung edge without markings, and a thin visceral pleural line."""
    if "Pneumothorax" not in case.findings:
        return img, markings
    x, y = c.x, c.y
    gap = {"mild": 0.05, "moderate": 0.08, "severe": 0.12}[case.severity["Pneumothorax"]] * p.scale
    gap *= strength(case, "Pneumothorax") * rng.uniform(0.85, 1.15)
    for s in signs(case.laterality["Pneumothorax"]):
        lx, ly = c.centre[s]
        depth = 1.0 - gap / c.semi[0]
        upper = ramp(y - (ly + 0.35 * c.semi[1]), 0.04)
        lateral = ramp(-(x - lx) * s - 0.3 * c.semi[0], 0.05)
        region = c.lung[s] * ramp(depth - c.rim[s], 0.01) * upper * lateral
        markings *= 1 - region
        img -= 0.1 * region
        line = c.lung[s] * ramp(np.abs(c.rim[s] - depth) * c.semi[0] - 0.6 / c.size, c.edge) * upper * lateral
        img += 0.18 * line
    return img, markings


def edema_haze(dense: np.ndarray, case: Case, p: Patient, c: Canvas, rng: np.random.Generator) -> np.ndarray:
    """Perihilar haze of edema, in both lungs."""
    edema = _edema_grade(case)
    if edema:
        x, y = c.x, c.y
        amp, spread = {"mild": (0.06, 0.08), "moderate": (0.11, 0.11), "severe": (0.17, 0.14)}[edema]
        for s in (-1, 1):
            hx, hy = c.hilum(s)
            dense += (
                amp
                * strength(case, "Edema")
                * c.lung[s]
                * gauss(x, y, hx + s * 0.03, hy + 0.02, spread * p.scale, spread * 1.3 * p.scale)
            )
    return dense


def lung_opacity(dense: np.ndarray, case: Case, p: Patient, c: Canvas, rng: np.random.Generator) -> np.ndarray:
    """Two to four soft blobs in the finding's zone."""
    if "Lung Opacity" in case.findings:
        x, y = c.x, c.y
        amp = {"mild": 0.14, "moderate": 0.2, "severe": 0.26}[case.severity["Lung Opacity"]]
        for s in signs(case.laterality["Lung Opacity"]):
            lx, _ = c.centre[s]
            zy = c.zone_y(case.zone["Lung Opacity"])
            for _ in range(int(rng.integers(2, 5))):
                bx, by = lx + rng.uniform(-0.5, 0.5) * c.semi[0], zy + rng.uniform(-0.06, 0.06)
                r = rng.uniform(0.035, 0.07) * p.scale
                dense += amp * strength(case, "Lung Opacity") * c.lung[s] * gauss(x, y, bx, by, r, r * 0.8)
    return dense


def airspace_disease(dense: np.ndarray, case: Case, p: Patient, c: Canvas, rng: np.random.Generator) -> np.ndarray:
    """Consolidation (a sharp lobar patch), then pneumonia (an ill-defined patch with satellites)."""
    x, y = c.x, c.y
    for name, amp, sharp in (("Consolidation", 0.26, True), ("Pneumonia", 0.2, False)):
        if name not in case.findings:
            continue
        for s in signs(case.laterality[name]):
            lx, _ = c.centre[s]
            bx = lx + rng.uniform(-0.2, 0.2) * c.semi[0]
            by = c.zone_y(case.zone[name]) + rng.uniform(-0.03, 0.03)
            rx, ry = rng.uniform(0.08, 0.11) * p.scale, rng.uniform(0.06, 0.09) * p.scale
            if sharp:  # homogeneous lobar patch with a defined edge
                patch = ramp((np.hypot((x - bx) / rx, (y - by) / ry) - 1) * ry, 0.012)
            else:  # ill-defined patch with satellite blobs
                patch = gauss(x, y, bx, by, rx * 0.7, ry * 0.7)
                for _ in range(int(rng.integers(3, 6))):
                    sx, sy = bx + rng.uniform(-1.5, 1.5) * rx, by + rng.uniform(-1.3, 1.3) * ry
                    patch = patch + 0.5 * gauss(x, y, sx, sy, 0.02 * p.scale, 0.02 * p.scale)
            dense += amp * strength(case, name) * c.lung[s] * np.minimum(patch, 1.2)
    return dense


def atelectasis(dense: np.ndarray, case: Case, p: Patient, c: Canvas, rng: np.random.Generator) -> np.ndarray:
    """A tilted plate-like band at the lung base."""
    if "Atelectasis" in case.findings:
        x, y = c.x, c.y
        thick = {"mild": 0.022, "moderate": 0.03, "severe": 0.04}[case.severity["Atelectasis"]] * p.scale
        for s in signs(case.laterality["Atelectasis"]):
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
            band = ramp(segments_distance(x, y, ends) - thick / 2, max(c.edge, thick / 2))
            dense += 0.2 * strength(case, "Atelectasis") * c.lung[s] * band
    return dense


def lung_lesion(dense: np.ndarray, case: Case, p: Patient, c: Canvas, rng: np.random.Generator) -> np.ndarray:
    """One nodule, or two to three when bilateral (the first in the finding's zone)."""
    if "Lung Lesion" in case.findings:
        x, y = c.x, c.y
        sides = signs(case.laterality["Lung Lesion"])
        count = int(rng.integers(2, 4)) if len(sides) == 2 else 1
        for k in range(count):
            s = sides[k % len(sides)]
            lx, _ = c.centre[s]
            zy = c.zone_y(case.zone["Lung Lesion"]) if k == 0 else c.zone_y(str(rng.choice(ZONES)))
            bx, by = lx + rng.uniform(-0.4, 0.4) * c.semi[0], zy + rng.uniform(-0.03, 0.03)
            r = rng.uniform(0.025, 0.045) * p.scale
            dense += 0.24 * strength(case, "Lung Lesion") * c.lung[s] * ramp(np.hypot(x - bx, y - by) - r, 0.006)
    return dense


# Parenchymal findings in drawing order (each adds to the "dense" layer, confined to the lungs).
PARENCHYMAL = (edema_haze, lung_opacity, airspace_disease, atelectasis, lung_lesion)


def pleural_effusion(img: np.ndarray, case: Case, p: Patient, c: Canvas, rng: np.random.Generator) -> np.ndarray:
    """Fluid at the base, its surface climbing the lateral wall (meniscus)."""
    if "Pleural Effusion" in case.findings:
        x, y = c.x, c.y
        height = {"mild": 0.14, "moderate": 0.22, "severe": 0.34}[case.severity["Pleural Effusion"]]
        height *= (p.base - p.top) * strength(case, "Pleural Effusion")
        for s in signs(case.laterality["Pleural Effusion"]):
            lx, _ = c.centre[s]
            h = height * rng.uniform(0.85, 1.15)
            lateral = np.clip((x - lx) * s / c.semi[0] + 0.5, 0.0, 1.5)
            surface = p.base - h * (0.55 + 0.6 * lateral**2)
            fluid = ramp(surface - y, 0.012) * c.shell[s]
            img = img * (1 - 0.85 * fluid) + (p.tissue + 0.06) * 0.85 * fluid
    return img


def pleural_thickening(img: np.ndarray, case: Case, p: Patient, c: Canvas, rng: np.random.Generator) -> np.ndarray:
    """Pleural Other: a bright band along the lateral chest wall."""
    if "Pleural Other" in case.findings:
        x, y = c.x, c.y
        for s in signs(case.laterality["Pleural Other"]):
            lx, ly = c.centre[s]
            thick = rng.uniform(0.035, 0.05) * p.scale
            band = c.lung[s] * ramp((1.0 - c.rim[s]) * c.semi[0] - thick, c.edge)
            band *= ramp(-(x - lx) * s, 0.03) * ramp(np.abs(y - ly - rng.uniform(-0.05, 0.1)) - 0.12, 0.04)
            img += 0.22 * strength(case, "Pleural Other") * band
    return img


def mediastinal_width(case: Case, p: Patient, rng: np.random.Generator) -> float:
    """Enlarged Cardiomediastinum widens the upper mediastinum (never narrower than the patient's own)."""
    widened = "Enlarged Cardiomediastinum" in case.findings
    width = p.mediastinum * (
        (1.7 + 0.2 * rng.random()) * strength(case, "Enlarged Cardiomediastinum") if widened else 1.0
    )
    return max(width, p.mediastinum)


def cardiothoracic_ratio(case: Case, p: Patient, rng: np.random.Generator) -> float:
    """Cardiomegaly grows the patient's cardiothoracic ratio by its grade."""
    ctr = p.ctr
    if "Cardiomegaly" in case.findings:
        grow = {"mild": 0.08, "moderate": 0.13, "severe": 0.2}[case.severity["Cardiomegaly"]]
        ctr += (grow + rng.uniform(-0.02, 0.02)) * strength(case, "Cardiomegaly")
    return ctr


def fracture_sides(case: Case) -> tuple[int, ...]:
    return signs(case.laterality["Fracture"]) if "Fracture" in case.findings else ()


def break_rib(
    centre: np.ndarray, rib: np.ndarray, u: np.ndarray, case: Case, p: Patient, c: Canvas, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Fracture: a gap in the rib and a step between its two ends."""
    uf = rng.uniform(0.14, 0.26) * p.scale
    gap = rng.uniform(0.03, 0.04) * strength(case, "Fracture")
    step = rng.choice((-1.0, 1.0)) * rng.uniform(0.015, 0.025) * strength(case, "Fracture")
    centre = centre + step / (1 + np.exp(-(u - uf) / 0.003))
    rib = rib * (1 - ramp(np.abs(u - uf) - gap / 2, c.edge))
    return centre, rib
