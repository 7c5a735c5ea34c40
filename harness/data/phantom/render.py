"""Drawing a frontal chest radiograph for a case: normal anatomy, the findings (``draw_findings``), devices."""

from __future__ import annotations

import numpy as np

from harness.data.phantom import draw_findings as f
from harness.data.phantom.anatomy import Canvas, Patient, draw_patient
from harness.data.phantom.case import Case
from harness.data.phantom.geometry import blur, curve, ramp, segments_distance


def _body(p: Patient, c: Canvas) -> np.ndarray:
    """Soft tissue from the neck to the abdomen."""
    half = 0.08 + (0.45 * p.scale - 0.08) / (1 + np.exp(-(c.y - 0.12) / 0.03))
    return ramp(np.abs(c.x - p.cx) - half, c.edge)


def _soft_tissue(p: Patient, c: Canvas, body: np.ndarray) -> np.ndarray:
    """The body, brighter below the diaphragm, with the gastric air bubble of most patients."""
    x, y = c.x, c.y
    img = 0.03 + body * (p.tissue + 0.06 * ramp(p.base - y, 0.05) - 0.04)
    if p.gastric_bubble:
        img -= 0.12 * ramp(np.hypot((x - p.cx - 0.16 * p.scale) / 1.4, y - p.base - 0.06) - 0.03, c.edge)
    return img


def _aerated_lungs(img: np.ndarray, p: Patient, c: Canvas) -> np.ndarray:
    lungs = np.maximum(c.lung[-1], c.lung[1])
    return img * (1 - lungs) + (p.lung + 0.05 * ramp(c.y - p.top - 0.08, 0.12)) * lungs


def _vessel_markings(img: np.ndarray, p: Patient, c: Canvas) -> np.ndarray:
    """Vessel markings radiating from the hila."""
    x, y = c.x, c.y
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
    return markings


def _mediastinum(img: np.ndarray, case: Case, p: Patient, c: Canvas, body: np.ndarray,
                 rng: np.random.Generator) -> np.ndarray:
    """Mediastinum (with the aortic knob) and trachea."""
    x, y = c.x, c.y
    widened = "Enlarged Cardiomediastinum" in case.findings
    width = f.mediastinal_width(case, p, rng)
    heart_top = p.base - 0.26 * p.scale
    medi = ramp(np.abs(x - p.cx - 0.005) - width / 2, c.edge) * ramp(y - heart_top - 0.03, 0.02) * body
    knob_r = 0.035 * p.scale * (1.3 if widened else 1.0)
    medi = np.maximum(medi, ramp(np.hypot(x - p.cx - width / 2 + 0.01, y - p.top - 0.09) - knob_r, c.edge))
    img = img * (1 - medi) + (p.tissue + 0.08) * medi
    img -= 0.09 * ramp(np.abs(x - p.cx) - 0.016 * p.scale, c.edge) * ramp(y - _carina(p), c.edge)
    return img


def _carina(p: Patient) -> float:
    return p.top + 0.12 * p.scale


def _heart(img: np.ndarray, case: Case, p: Patient, c: Canvas, rng: np.random.Generator) -> np.ndarray:
    ctr = f.cardiothoracic_ratio(case, p, rng)
    hw = ctr * p.half_width
    hh = 0.8 * hw + 0.01
    hx, hy = p.cx + 0.3 * hw, p.base - 0.07 - 0.2 * hh
    heart = ramp((np.hypot((c.x - hx) / hw, (c.y - hy) / hh) - 1) * hh, c.edge)
    return img * (1 - heart) + (p.tissue + 0.1) * heart


def _bones(img: np.ndarray, case: Case, p: Patient, c: Canvas, body: np.ndarray,
           rng: np.random.Generator) -> np.ndarray:
    """Spine, clavicles, posterior ribs (one broken for a fracture)."""
    x, y = c.x, c.y
    spacing = (p.base - p.top + 0.05) / 9
    vertebrae = 0.5 + 0.5 * np.cos(2 * np.pi * (y - p.top) / spacing)
    img += (0.08 + 0.04 * vertebrae) * ramp(np.abs(x - p.cx) - 0.032 * p.scale, c.edge) * body
    for s in (-1, 1):
        pts = np.array([[p.cx + s * 0.04, p.top - 0.005], [p.cx + s * 0.3 * p.scale, p.top - 0.05]])
        img += 0.12 * ramp(segments_distance(x, y, pts) - 0.009 * p.scale, c.edge)
    fracture_sides = f.fracture_sides(case)
    for s in (-1, 1):
        u = (x - p.cx) * s
        extent = ramp(0.02 - u, c.edge) * ramp(u - p.half_width - 0.03, c.edge) * body
        for i in range(9):
            centre = p.top - 0.04 + i * spacing + p.rib_tilt * s + 1.3 * (u - 0.09) ** 2 / p.scale
            rib = extent
            if s in fracture_sides and case.rib == i + 2:
                centre, rib = f.break_rib(centre, rib, u, case, p, c, rng)
            band = ramp(np.abs(y - centre) - 0.0055 * p.scale, c.edge)
            img += 0.11 * rib * band
    return img


def _devices(img: np.ndarray, case: Case, p: Patient, c: Canvas, rng: np.random.Generator) -> np.ndarray:
    """Support devices: bright lines and a generator box."""
    x, y = c.x, c.y
    metal = np.zeros_like(img)
    for device in case.devices:
        if device == "pacemaker":
            bx, by = p.cx + 0.24 * p.scale, p.top + 0.02
            box = ramp(np.maximum(np.abs(x - bx) - 0.028, np.abs(y - by) - 0.018), c.edge)
            leads = curve((bx - 0.02, by), (p.cx - 0.05, p.top + 0.05), (p.cx + 0.02, p.base - 0.12))
            metal = np.maximum(metal, np.maximum(box, ramp(segments_distance(x, y, leads) - 0.010, c.edge)))
            continue
        if device == "endotracheal tube":
            path, width = np.array([[p.cx, 0.0], [p.cx + 0.005, _carina(p) - rng.uniform(0.03, 0.06)]]), 0.012
        elif device == "nasogastric tube":
            path = curve((p.cx - 0.005, 0.0), (p.cx, p.base), (p.cx + 0.15 * p.scale, p.base + 0.08))
            width = 0.010
        elif device == "central venous catheter":
            path = curve((p.cx - 0.12, 0.02), (p.cx - 0.06, p.top), (p.cx - 0.03, p.top + 0.15))
            width = 0.010
        else:  # chest tube
            s = -1 if device.startswith("right") else 1
            lx, ly = c.centre[s]
            path = curve((lx + s * 0.9 * c.semi[0], p.base), (lx + s * 0.6 * c.semi[0], ly), (lx, p.top + 0.04))
            width = 0.011
        metal = np.maximum(metal, ramp(segments_distance(x, y, path) - width, c.edge))
    return img * (1 - metal) + 0.97 * metal


def _expose(img: np.ndarray, p: Patient, c: Canvas, noise: np.ndarray) -> np.ndarray:
    """Exposure, detector blur and noise; 8-bit output."""
    img = np.clip(img, 0.0, 1.0) ** p.gamma * p.contrast + p.brightness + p.heel * (c.x - 0.5)
    img = blur(img, p.blur * c.size / 128)
    img = img + p.noise * noise
    return np.round(np.clip(img, 0.0, 1.0) * 255).astype(np.uint8)


def draw_image(case: Case, rng: np.random.Generator, size: int = 128) -> np.ndarray:
    """Draw a frontal chest radiograph for ``case``: uint8 [size, size], 0 black (air) to 255 (metal).

    The layers are drawn in a fixed order; each step's random draws come from ``rng`` in that order.
    """
    if size < 32:
        raise ValueError(f"image size must be >= 32, got {size}")
    noise = rng.standard_normal((size, size))
    p = draw_patient(rng)
    c = Canvas(p, size)
    body = _body(p, c)
    img = _aerated_lungs(_soft_tissue(p, c, body), p, c)
    markings = f.edema_congestion(_vessel_markings(img, p, c), case)
    img, markings = f.pneumothorax(img, markings, case, p, c, rng)
    img += markings
    dense = np.zeros_like(img)
    for draw in f.PARENCHYMAL:
        dense = draw(dense, case, p, c, rng)
    img += dense
    img = f.pleural_effusion(img, case, p, c, rng)
    img = f.pleural_thickening(img, case, p, c, rng)
    img = _mediastinum(img, case, p, c, body, rng)
    img = _heart(img, case, p, c, rng)
    img = _bones(img, case, p, c, body, rng)
    img = _devices(img, case, p, c, rng)
    return _expose(img, p, c, noise)
