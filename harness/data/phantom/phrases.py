"""The report grammar's phrases: positive, bilateral, hedged and normal statements, device lines, sections."""

from __future__ import annotations

SEV_WORD = {
    "Cardiomegaly": {"mild": ("mild",), "moderate": ("moderate",), "severe": ("marked", "severe")},
    "Pleural Effusion": {"mild": ("small",), "moderate": ("moderate",), "severe": ("large",)},
    "Pneumothorax": {"mild": ("small", "tiny"), "moderate": ("moderate",), "severe": ("large",)},
    "Edema": {"mild": ("mild",), "moderate": ("moderate",), "severe": ("severe",)},
    "Lung Opacity": {"mild": ("mild", "faint"), "moderate": ("moderate",), "severe": ("extensive", "dense")},
    "Atelectasis": {"mild": ("minimal", "mild"), "moderate": ("moderate",), "severe": ("extensive",)},
}
ORDINAL = {5: "fifth", 6: "sixth", 7: "seventh", 8: "eighth", 9: "ninth"}

# Positive statements: {sev} severity word, {side} left/right/bilateral, {zone} upper/lower, {lobe} lobe words.
POSITIVE_TEXT: dict[str, tuple[str, ...]] = {
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
BILATERAL: dict[str, tuple[str, ...]] = {
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
HEDGED: dict[str, tuple[str, ...]] = {
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
BILATERAL_HEDGED: dict[str, tuple[str, ...]] = {
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
NORMAL: dict[tuple[str, ...], tuple[str, ...]] = {
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
DEVICE_TEXT: dict[str, tuple[str, ...]] = {
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
IMPRESSION_NORMAL = ("no acute cardiopulmonary abnormality", "no acute cardiopulmonary process")
SECTIONS: tuple[tuple[str, ...], ...] = (
    ("Enlarged Cardiomediastinum", "Cardiomegaly"),
    ("Lung Opacity", "Lung Lesion", "Edema", "Consolidation", "Pneumonia", "Atelectasis"),
    ("Pleural Effusion", "Pneumothorax", "Pleural Other"),
    ("Fracture",),
)
MIN_WORDS, MAX_WORDS = 25, 70
# How often an absent finding is negated, relative to ``negation_rate``: radiologists routinely rule out
# effusion, pneumothorax and consolidation, rarely atelectasis or pleural thickening.
NEGATION_WEIGHT: dict[str, float] = {
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
