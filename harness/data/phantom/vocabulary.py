"""The phantom's vocabulary: which findings exist, their attributes, and how often each attribute value occurs."""

from __future__ import annotations

from harness.constants import OBSERVATIONS

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
SIDE_PROBS: dict[str, tuple[float, float, float]] = {
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
SEVERITY_PROBS = (0.45, 0.35, 0.20)
ZONE_PROBS: dict[str, tuple[float, float, float]] = {
    "Lung Opacity": (0.30, 0.20, 0.50),
    "Lung Lesion": (0.40, 0.30, 0.30),
    "Consolidation": (0.25, 0.0, 0.75),
    "Pneumonia": (0.25, 0.0, 0.75),
}


def default_rates() -> dict[str, float]:
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
