"""The varied report language's phrasings (data.report_variation != "none"): noun phrases, sentence frames,
negation nouns, normality statements, device lines and impressions, several per statement.

`harness/data/phantom/variation.py` draws from these tables; the plain grammar (`phrases.py`) is untouched, so
`report_variation: none` writes today's reports byte for byte. Placeholders: {sev} severity word, {sevly} its
adverb, {side} left/right, {sided} a side form ("left" or "left-sided"), {zone} upper/mid/lower, {lobe} lobe words,
{ordinal} rib. Each noun phrase carries its grammatical number: "c" countable singular (takes a/an), "m" mass
noun (no article, "is"), "p" plural ("are").
"""

from __future__ import annotations

# Severity words, a superset of phrases.SEV_WORD (synonyms a radiologist uses for the same grade).
SEV_WORD: dict[str, dict[str, tuple[str, ...]]] = {
    "Cardiomegaly": {"mild": ("mild", "slight"), "moderate": ("moderate",), "severe": ("marked", "severe")},
    "Pleural Effusion": {"mild": ("small", "trace"), "moderate": ("moderate", "moderate-sized"),
                         "severe": ("large",)},
    "Pneumothorax": {"mild": ("small", "tiny"), "moderate": ("moderate", "moderate-sized"), "severe": ("large",)},
    "Edema": {"mild": ("mild",), "moderate": ("moderate",), "severe": ("severe",)},
    "Lung Opacity": {"mild": ("mild", "faint", "subtle"), "moderate": ("moderate",),
                     "severe": ("extensive", "dense")},
    "Atelectasis": {"mild": ("minimal", "mild", "subsegmental"), "moderate": ("moderate",),
                    "severe": ("extensive",)},
}
ADVERB = {"mild": "mildly", "slight": "slightly", "moderate": "moderately", "marked": "markedly",
          "severe": "severely"}
SIDE_FORMS = {"left": ("left", "left-sided"), "right": ("right", "right-sided")}

# (noun phrase, number) per finding, one side.
NP: dict[str, tuple[tuple[str, str], ...]] = {
    "Enlarged Cardiomediastinum": (("widened mediastinum", "c"), ("mediastinal widening", "m"),
                                   ("enlarged cardiomediastinal silhouette", "c")),
    "Cardiomegaly": (("{sev} cardiomegaly", "m"), ("{sev} enlargement of the cardiac silhouette", "m"),
                     ("{sev} cardiac enlargement", "m")),
    "Lung Opacity": (("{sev} {sided} {zone} lung opacity", "c"), ("{sev} opacity in the {side} {zone} lung", "c"),
                     ("{sev} airspace opacity in the {side} {zone} lung", "c")),
    "Lung Lesion": (("{sided} {zone} lung nodule", "c"), ("nodule in the {side} {zone} lung", "c"),
                    ("pulmonary nodule in the {side} {zone} lung", "c"), ("{side} {zone} lung mass", "c")),
    "Edema": (("{sev} pulmonary edema", "m"), ("{sev} interstitial edema", "m"),
              ("{sev} interstitial pulmonary edema", "m")),
    "Consolidation": (("{sided} {lobe} consolidation", "m"), ("consolidation in the {side} {lobe}", "m"),
                      ("{side} {lobe} airspace consolidation", "m"), ("focal consolidation in the {side} {lobe}", "m")),
    "Pneumonia": (("{sided} {lobe} pneumonia", "m"), ("pneumonia in the {side} {lobe}", "m")),
    "Atelectasis": (("{sev} {sided} basilar atelectasis", "m"), ("{sev} atelectasis at the {side} lung base", "m"),
                    ("{sev} {side} lower lobe atelectasis", "m"), ("{sev} atelectasis in the {side} base", "m")),
    "Pneumothorax": (("{sev} {sided} pneumothorax", "c"), ("{sev} pneumothorax on the {side}", "c"),
                     ("{sev} {side} apical pneumothorax", "c")),
    "Pleural Effusion": (("{sev} {sided} pleural effusion", "c"), ("{sev} {sided} effusion", "c"),
                         ("{sev} pleural effusion on the {side}", "c")),
    "Pleural Other": (("{sided} pleural thickening", "m"), ("pleural thickening along the {side} chest wall", "m"),
                      ("{side} apical pleural thickening", "m")),
    "Fracture": (("{sided} {ordinal} rib fracture", "c"), ("fracture of the {side} {ordinal} rib", "c"),
                 ("{ordinal} {side} rib fracture", "c")),
}
# Both sides.
NP_BILATERAL: dict[str, tuple[tuple[str, str], ...]] = {
    "Lung Opacity": (("{sev} bilateral {zone} lung opacities", "p"), ("{sev} bilateral airspace opacities", "p")),
    "Lung Lesion": (("bilateral pulmonary nodules", "p"), ("multiple bilateral lung nodules", "p"),
                    ("nodules in both lungs", "p")),
    "Consolidation": (("bilateral {lobe} consolidation", "m"), ("bilateral airspace consolidation", "m"),
                      ("consolidation in both lungs", "m")),
    "Pneumonia": (("bilateral {lobe} pneumonia", "m"), ("bilateral pneumonia", "m")),
    "Atelectasis": (("{sev} bibasilar atelectasis", "m"), ("{sev} bilateral basilar atelectasis", "m"),
                    ("{sev} atelectasis at both lung bases", "m")),
    "Pneumothorax": (("{sev} bilateral pneumothoraces", "p"), ("{sev} pneumothoraces on both sides", "p")),
    "Pleural Effusion": (("{sev} bilateral pleural effusions", "p"), ("{sev} bilateral effusions", "p"),
                         ("{sev} pleural effusions on both sides", "p")),
    "Pleural Other": (("bilateral pleural thickening", "m"), ("pleural thickening along both chest walls", "m")),
    "Fracture": (("bilateral {ordinal} rib fractures", "p"), ("fractures of both {ordinal} ribs", "p")),
}
# Predicate sentences (no noun phrase): the heart and the mediastinum are described, not named.
PREDICATE: dict[str, tuple[str, ...]] = {
    "Cardiomegaly": ("the heart is {sevly} enlarged", "heart size is {sevly} enlarged",
                     "the cardiac silhouette is {sevly} enlarged"),
    "Enlarged Cardiomediastinum": ("the mediastinum is widened", "the mediastinal contours are widened",
                                   "the cardiomediastinal silhouette is enlarged"),
}
PREDICATE_HEDGED: dict[str, tuple[str, ...]] = {
    "Cardiomegaly": ("the heart may be {sevly} enlarged", "the heart size is borderline",
                     "heart size is borderline enlarged"),
    "Enlarged Cardiomediastinum": ("the mediastinum may be widened", "the mediastinum is possibly widened"),
}
# Sentence frames around a noun phrase, by its number: {a} = "a"/"an" for "c", nothing otherwise.
FRAMES: dict[str, tuple[str, ...]] = {
    "c": ("{np}", "there is {a} {np}", "{a} {np} is present", "{a} {np} is noted", "{a} {np} is seen"),
    "m": ("{np}", "there is {np}", "{np} is present", "{np} is noted", "{np} is seen"),
    "p": ("{np}", "there are {np}", "{np} are present", "{np} are noted", "{np} are seen"),
}
FRAMES_PNEUMONIA = ("findings consistent with {np}", "findings compatible with {np}")
HEDGE_FRAMES: dict[str, tuple[str, ...]] = {
    "c": ("possible {np}", "{a} {np} is not excluded", "{a} {np} cannot be excluded", "questionable {np}",
          "findings may represent {a} {np}", "findings suspicious for {a} {np}"),
    "m": ("possible {np}", "{np} is not excluded", "{np} cannot be excluded", "questionable {np}",
          "findings may represent {np}", "findings suspicious for {np}"),
    "p": ("possible {np}", "{np} are not excluded", "{np} cannot be excluded", "questionable {np}",
          "findings may represent {np}", "findings suspicious for {np}"),
}
# What an absent finding is called in a negation ("no ...").
NEG_NOUN: dict[str, tuple[str, ...]] = {
    "Enlarged Cardiomediastinum": ("mediastinal widening",),
    "Cardiomegaly": ("cardiomegaly",),
    "Lung Lesion": ("suspicious pulmonary nodules", "pulmonary nodules", "focal pulmonary nodule"),
    "Edema": ("pulmonary edema", "edema", "interstitial edema"),
    "Consolidation": ("focal consolidation", "consolidation", "focal airspace consolidation"),
    "Pneumonia": ("pneumonia",),
    "Atelectasis": ("atelectasis",),
    "Pneumothorax": ("pneumothorax",),
    "Pleural Effusion": ("pleural effusion", "effusion", "pleural effusions"),
    "Pleural Other": ("pleural thickening",),
    "Fracture": ("acute rib fracture", "displaced rib fracture", "acute fracture"),
}
# Negation of one noun ({n}) and of a list ({n} = "a b or c").
NEG_FRAMES = ("no {n}", "there is no {n}", "no evidence of {n}", "no {n} is seen", "no {n} is identified")
NEG_LIST_FRAMES = ("no {n}", "there is no {n}", "no evidence of {n}")
# Normality statements that are not "no <noun>", per group of findings they state absent.
NORMAL: dict[tuple[str, ...], tuple[str, ...]] = {
    ("Cardiomegaly",): ("heart size is normal", "normal heart size", "the heart is not enlarged",
                        "the cardiac silhouette is normal in size", "cardiac size is within normal limits"),
    ("Enlarged Cardiomediastinum",): ("normal mediastinal contours", "the mediastinum is normal",
                                      "mediastinal silhouette is normal"),
    ("Cardiomegaly", "Enlarged Cardiomediastinum"): ("normal heart size and mediastinal contours",
                                                     "the heart size and mediastinal contours are within normal limits",
                                                     "normal cardiomediastinal silhouette",
                                                     "heart and mediastinum are within normal limits"),
    ("Lung Opacity",): ("clear lungs", "lungs are clear", "the lungs are grossly clear", "the lungs are clear"),
    ("Pleural Effusion",): ("sharp costophrenic angles", "the costophrenic angles are sharp",
                            "no blunting of the costophrenic angles"),
    ("Fracture",): ("no acute bony abnormality", "the bones are intact", "no acute osseous abnormality",
                    "osseous structures are unremarkable"),
}
# "the lungs are clear" merged with a negation list: "{clear} without {n}".
CLEAR_WITHOUT = ("the lungs are clear without {n}", "lungs are clear without {n}", "clear lungs without {n}")
DEVICE_TEXT: dict[str, tuple[str, ...]] = {
    "pacemaker": ("left-sided pacemaker with leads in the right atrium and right ventricle",
                  "left chest wall pacemaker in place", "a left-sided dual-chamber pacemaker is present"),
    "endotracheal tube": ("endotracheal tube tip is above the carina", "the endotracheal tube is in good position",
                          "et tube terminates above the carina"),
    "nasogastric tube": ("enteric tube courses below the diaphragm", "nasogastric tube in place",
                         "the nasogastric tube tip is in the stomach"),
    "central venous catheter": ("right internal jugular central line with tip in the svc",
                                "right ij catheter terminates in the svc", "central venous catheter in place"),
    "left chest tube": ("left-sided chest tube in place", "a left chest tube is present",
                        "left pleural drain is in place"),
    "right chest tube": ("right-sided chest tube in place", "a right chest tube is present",
                         "right pleural drain is in place"),
}
IMPRESSION_NORMAL = ("no acute cardiopulmonary abnormality", "no acute cardiopulmonary process",
                     "no acute cardiopulmonary disease", "no acute intrathoracic process",
                     "impression no acute cardiopulmonary abnormality", "impression no acute disease")
# Sentences about what the phantom does not draw (technique, comparison, other anatomy): they state none of the 14
# observations (no CheXpert term: no aorta, granuloma, clip or scar), as the many such lines of real reports.
INCIDENTAL = ("the trachea is midline", "pa and lateral views of the chest were obtained",
              "comparison is made to the prior study", "no interval change", "the soft tissues are unremarkable",
              "mild degenerative changes of the thoracic spine", "the upper abdomen is unremarkable",
              "low lung volumes", "the pulmonary vasculature is within normal limits",
              "the hila are unremarkable", "the diaphragm is normal in position", "no free air under the diaphragm",
              "the thoracic spine shows mild degenerative change", "stable appearance of the chest",
              "the visualized upper abdomen is within normal limits", "single frontal view of the chest")
# Joins of two finding statements into one sentence ({x} and {y} are whole statements).
JOINS = ("{x} and {y}",)
# How much a report varies, per level: P(a statement is rephrased), P(two neighbours merge), P(a negated group
# is split into single negations), P(an abnormal report gets an impression line), P(a report gets one or two
# incidental lines).
LEVELS: dict[str, dict[str, float]] = {
    "low": {"rephrase": 0.5, "merge": 0.15, "split": 0.3, "impression": 0.3, "incidental": 0.2},
    "high": {"rephrase": 0.9, "merge": 0.35, "split": 0.5, "impression": 0.6, "incidental": 0.35},
}
VARIATIONS: tuple[str, ...] = ("none", *LEVELS)
