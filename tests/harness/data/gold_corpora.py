"""Hand-written report corpora for the gold reader (issue 44), written outside the phantom's grammar.

PARAPHRASES: correct reports as a radiologist might write them, with the labels they state (CheXpert's
convention, as the phantom's labels: 1 present, -1 hedged, 0 negated, unstated left out; No Finding 1 when no
finding is present or hedged). Conventions of the phantom's labels kept here: "the lungs are clear" states Lung
Opacity absent (not every lung finding); "the costophrenic angles are sharp" states Pleural Effusion absent;
"the osseous structures are intact" / "no acute osseous abnormality" state Fracture absent; a normal impression
states nothing but makes a report with nothing else normal.

DEGENERATE: text that states nothing, or less than its words suggest, with what the reader must read ("not
stated" = the observation left out, NaN): keyword salad, broken grammar, repeated fragments, contradictions.

Labels are written "ABBR=value" (NF No Finding, ECM Enlarged Cardiomediastinum, CM Cardiomegaly, LO Lung
Opacity, LL Lung Lesion, ED Edema, CO Consolidation, PN Pneumonia, AT Atelectasis, PTX Pneumothorax, PE Pleural
Effusion, PO Pleural Other, FR Fracture, SD Support Devices).
"""

from __future__ import annotations

import numpy as np

from harness.constants import OBSERVATIONS

ABBR = {"NF": "No Finding", "ECM": "Enlarged Cardiomediastinum", "CM": "Cardiomegaly", "LO": "Lung Opacity",
        "LL": "Lung Lesion", "ED": "Edema", "CO": "Consolidation", "PN": "Pneumonia", "AT": "Atelectasis",
        "PTX": "Pneumothorax", "PE": "Pleural Effusion", "PO": "Pleural Other", "FR": "Fracture",
        "SD": "Support Devices"}


def labels(spec: str) -> np.ndarray:
    out = np.full(len(OBSERVATIONS), np.nan)
    for item in spec.split():
        key, value = item.split("=")
        out[OBSERVATIONS.index(ABBR[key])] = float(value)
    return out


PARAPHRASES: list[tuple[str, str]] = [
    # the examples
    ("Heart size is normal. Lungs are clear.", "CM=0 LO=0 NF=1"),
    ("Normal heart size. Clear lungs.", "CM=0 LO=0 NF=1"),
    ("Lungs are clear without focal consolidation, effusion or pneumothorax.", "LO=0 CO=0 PE=0 PTX=0 NF=1"),
    ("Heart size is normal. A small left pleural effusion is present. No pneumothorax.", "CM=0 PE=1 PTX=0"),
    ("Cardiomegaly is noted. The lungs are clear. No pleural effusion.", "CM=1 LO=0 PE=0"),
    ("There is a small right apical pneumothorax. Heart size is normal.", "PTX=1 CM=0"),
    ("Right lower lobe consolidation. No pleural effusion.", "CO=1 PE=0"),
    ("A right chest wall pacemaker is present with leads in the right heart. Heart size is normal. Clear lungs.",
     "SD=1 CM=0 LO=0 NF=1"),
    ("Right-sided pacemaker in place. The lungs are clear. No acute cardiopulmonary process.", "SD=1 LO=0 NF=1"),
    # normal reports
    ("The heart is not enlarged. The mediastinum is normal. No pneumothorax or pleural effusion.",
     "CM=0 ECM=0 PTX=0 PE=0 NF=1"),
    ("Normal cardiomediastinal silhouette. No focal airspace disease. No effusion.", "CM=0 ECM=0 LO=0 PE=0 NF=1"),
    ("Cardiac size is within normal limits. No pulmonary edema. Bones are intact.", "CM=0 ED=0 FR=0 NF=1"),
    ("The cardiomediastinal silhouette is within normal limits. The lungs are clear bilaterally. "
     "No acute bony abnormality.", "CM=0 ECM=0 LO=0 FR=0 NF=1"),
    ("Heart and mediastinum are within normal limits. Negative for pneumothorax.", "CM=0 ECM=0 PTX=0 NF=1"),
    ("No acute cardiopulmonary abnormality.", "NF=1"),
    ("Normal chest radiograph.", "NF=1"),
    ("Heart size normal. No evidence of pneumonia.", "CM=0 PN=0 NF=1"),
    ("No focal consolidation, pleural effusion, or pneumothorax. Normal heart size.",
     "CO=0 PE=0 PTX=0 CM=0 NF=1"),
    ("The costophrenic angles are sharp. The heart size is normal. No rib fracture.", "PE=0 CM=0 FR=0 NF=1"),
    ("Clear lungs without edema. Normal mediastinal contours.", "LO=0 ED=0 ECM=0 NF=1"),
    ("There is no evidence of atelectasis or consolidation. Heart size is within normal limits.",
     "AT=0 CO=0 CM=0 NF=1"),
    ("No pulmonary nodules or masses. The lungs are clear.", "LL=0 LO=0 NF=1"),
    ("No pleural thickening. No pneumothorax. Normal heart size.", "PO=0 PTX=0 CM=0 NF=1"),
    ("Mediastinal contours are unremarkable. No pleural effusions.", "ECM=0 PE=0 NF=1"),
    ("Heart size is normal and the lungs are clear.", "CM=0 LO=0 NF=1"),
    ("The lungs are clear. There is no pneumothorax. No acute osseous abnormality.", "LO=0 PTX=0 FR=0 NF=1"),
    ("No cardiomegaly. No vascular congestion.", "CM=0 ED=0 NF=1"),
    ("Sharp costophrenic angles. Clear lungs.", "PE=0 LO=0 NF=1"),
    # cardiomegaly, mediastinum
    ("The heart is mildly enlarged. No pleural effusion.", "CM=1 PE=0"),
    ("Moderate cardiomegaly. Lungs are clear.", "CM=1 LO=0"),
    ("Enlarged cardiac silhouette. No pneumothorax.", "CM=1 PTX=0"),
    ("Heart size is enlarged. There is mild pulmonary vascular congestion.", "CM=1 ED=1"),
    ("Stable cardiomegaly with small bilateral effusions.", "CM=1 PE=1"),
    ("Borderline cardiomegaly. The lungs are clear.", "CM=-1 LO=0"),
    ("The heart size is borderline. No effusion.", "CM=-1 PE=0"),
    ("Widened mediastinum. Heart size is normal.", "ECM=1 CM=0"),
    ("The mediastinum appears widened. No pneumothorax.", "ECM=1 PTX=0"),
    ("Possible mediastinal widening. Normal heart size.", "ECM=-1 CM=0"),
    ("Marked enlargement of the cardiac silhouette. No focal consolidation.", "CM=1 CO=0"),
    ("Cardiac enlargement is present. No edema.", "CM=1 ED=0"),
    # lungs
    ("Patchy opacity in the left lower lung. Heart size is normal.", "LO=1 CM=0"),
    ("Bilateral airspace opacities. No pneumothorax.", "LO=1 PTX=0"),
    ("There is a faint opacity at the right lung base, which may represent atelectasis.", "LO=1 AT=-1"),
    ("Left lower lobe infiltrate. No pleural effusion.", "LO=1 PE=0"),
    ("A 1 cm nodule is seen in the right upper lobe. No pleural effusion.", "LL=1 PE=0"),
    ("Right upper lobe mass. The heart is normal in size.", "LL=1 CM=0"),
    ("Possible left lower lung nodule. No pneumothorax.", "LL=-1 PTX=0"),
    ("Multiple pulmonary nodules are present bilaterally.", "LL=1"),
    ("Mild interstitial edema. Heart size is mildly enlarged.", "ED=1 CM=1"),
    ("Findings are consistent with pulmonary edema. Small bilateral pleural effusions.", "ED=1 PE=1"),
    ("Pulmonary edema cannot be excluded. Normal heart size.", "ED=-1 CM=0"),
    ("Left lower lobe consolidation concerning for pneumonia.", "CO=1 PN=-1"),
    ("Consolidation in the right upper lobe. No effusion.", "CO=1 PE=0"),
    ("Right middle lobe pneumonia. Heart size is normal.", "PN=1 CM=0"),
    ("Findings compatible with bilateral pneumonia.", "PN=1"),
    ("Possible early right lower lobe pneumonia. No effusion.", "PN=-1 PE=0"),
    ("Airspace consolidation in the left lower lobe, likely pneumonia.", "CO=1 PN=-1"),
    ("Bibasilar atelectasis. No pneumothorax.", "AT=1 PTX=0"),
    ("Minimal linear atelectasis at the left base. Heart size is normal.", "AT=1 CM=0"),
    ("Subsegmental atelectasis in the right lower lobe. No consolidation.", "AT=1 CO=0"),
    ("Left basilar opacity likely represents atelectasis.", "LO=1 AT=-1"),
    ("Right upper lobe collapse. Endotracheal tube in place.", "AT=1 SD=1"),
    # pleura
    ("Small left pleural effusion. No pneumothorax.", "PE=1 PTX=0"),
    ("Large right effusion. The heart is normal in size.", "PE=1 CM=0"),
    ("Moderate bilateral pleural effusions with bibasilar atelectasis.", "PE=1 AT=1"),
    ("Blunting of the left costophrenic angle, compatible with a small effusion.", "PE=1"),
    ("There may be a trace right pleural effusion. No pneumothorax.", "PE=-1 PTX=0"),
    ("A small left pleural effusion is not excluded. Lungs are clear.", "PE=-1 LO=0"),
    ("Small right pneumothorax. No pleural effusion.", "PTX=1 PE=0"),
    ("Large left-sided pneumothorax with mediastinal shift. Heart size is normal.", "PTX=1 CM=0"),
    ("Tiny bilateral apical pneumothoraces. Chest tubes in place.", "PTX=1 SD=1"),
    ("Questionable small left apical pneumothorax. No effusion.", "PTX=-1 PE=0"),
    ("Left apical pleural thickening. No pneumothorax.", "PO=1 PTX=0"),
    ("Right pleural thickening is noted. The lungs are clear.", "PO=1 LO=0"),
    ("Calcified pleural plaques bilaterally. No effusion.", "PO=1 PE=0"),
    ("No right pneumothorax. Small left pneumothorax.", "PTX=1"),
    # bones
    ("Acute fracture of the right seventh rib. No pneumothorax.", "FR=1 PTX=0"),
    ("Left posterior sixth rib fracture. Lungs are clear.", "FR=1 LO=0"),
    ("Possible fracture of the left eighth rib. No pleural effusion.", "FR=-1 PE=0"),
    ("Healing right rib fractures. Normal heart size.", "FR=1 CM=0"),
    ("The visualized osseous structures are intact. Heart size is normal.", "FR=0 CM=0 NF=1"),
    # devices
    ("Endotracheal tube terminates 4 cm above the carina. Lungs are clear.", "SD=1 LO=0 NF=1"),
    ("Nasogastric tube courses below the diaphragm. No pneumothorax.", "SD=1 PTX=0 NF=1"),
    ("Left subclavian central venous catheter with tip in the SVC. No pneumothorax.", "SD=1 PTX=0 NF=1"),
    ("Right PICC line terminates in the lower SVC. Heart size is normal.", "SD=1 CM=0 NF=1"),
    ("Dual-lead pacemaker in the left chest. Mild cardiomegaly.", "SD=1 CM=1"),
    ("Left chest tube in place. Small residual left pneumothorax.", "SD=1 PTX=1"),
    ("Enteric tube tip is in the stomach. Normal heart size.", "SD=1 CM=0 NF=1"),
    ("Median sternotomy wires are intact. Heart size is normal.", "SD=1 CM=0 NF=1"),
    ("Right internal jugular catheter in place. No pleural effusion or pneumothorax.", "SD=1 PE=0 PTX=0 NF=1"),
    ("Tracheostomy tube in place. Clear lungs.", "SD=1 LO=0 NF=1"),
    # combinations
    ("Cardiomegaly with mild pulmonary edema. Small bilateral pleural effusions. No pneumothorax.",
     "CM=1 ED=1 PE=1 PTX=0"),
    ("Heart size is normal. Right lower lobe consolidation and a small right effusion. No pneumothorax.",
     "CM=0 CO=1 PE=1 PTX=0"),
    ("Normal heart size. Left lower lobe pneumonia. No effusion or pneumothorax.", "CM=0 PN=1 PE=0 PTX=0"),
    ("Mild cardiomegaly. Bibasilar atelectasis. No edema. No pneumothorax.", "CM=1 AT=1 ED=0 PTX=0"),
    ("No pneumothorax. A small left pleural effusion is present. Heart size is normal.", "PTX=0 PE=1 CM=0"),
    ("The lungs are clear. Left seventh rib fracture. No pneumothorax.", "LO=0 FR=1 PTX=0"),
    ("Widened mediastinum and cardiomegaly. No effusion.", "ECM=1 CM=1 PE=0"),
    ("No consolidation. There is a nodule in the left upper lobe.", "CO=0 LL=1"),
    ("No pleural effusion but there is a small right pneumothorax.", "PE=0 PTX=1"),
    ("Small right effusion, without pneumothorax.", "PE=1 PTX=0"),
    ("Moderate right pleural effusion with adjacent atelectasis. Heart size is normal.", "PE=1 AT=1 CM=0"),
    ("Stable left-sided pacemaker. Moderate cardiomegaly. Mild interstitial edema.", "SD=1 CM=1 ED=1"),
    ("Patchy bilateral opacities may represent edema or infection.", "LO=1 ED=-1 PN=-1"),
    ("Heart size is mildly enlarged. No focal consolidation. Possible small left effusion.", "CM=1 CO=0 PE=-1"),
    ("Right lower lobe opacity suspicious for pneumonia. No pneumothorax.", "LO=1 PN=-1 PTX=0"),
    ("Impression: small right pneumothorax.", "PTX=1"),
    ("Impression: Left lower lobe pneumonia and small left effusion.", "PN=1 PE=1"),
    ("Findings: The heart is normal in size. The lungs are clear. Impression: No acute disease.",
     "CM=0 LO=0 NF=1"),
    ("Left-sided pleural effusion, moderate in size. No pneumothorax.", "PE=1 PTX=0"),
    ("Endotracheal tube and nasogastric tube in place. Bilateral lower lobe atelectasis.", "SD=1 AT=1"),
    ("Cardiomegaly. Pulmonary vascular congestion. No effusion.", "CM=1 ED=1 PE=0"),
]

DEGENERATE: list[tuple[str, str, str]] = [
    # (kind, text, what the reader must read)
    # keyword salad: findings named with no grammar at all
    ("salad", "pneumothorax effusion cardiomegaly edema.", ""),
    ("salad", "cardiomegaly consolidation.", ""),
    ("salad", "effusion pneumothorax atelectasis nodule fracture.", ""),
    ("salad", "left effusion right pneumothorax.", ""),
    ("salad", "pacemaker effusion.", ""),
    ("salad", "heart size is normal. edema consolidation opacity.", "CM=0 NF=1"),
    # repeated fragments: a word or word group back to back, or a sentence written twice
    ("repeat", "pneumothorax pneumothorax pneumothorax.", ""),
    ("repeat", "effusion effusion cardiomegaly edema.", ""),
    ("repeat", "small left small left pleural effusion.", ""),
    ("repeat", "no pneumothorax. no pneumothorax. no pneumothorax.", ""),
    ("repeat", "mild cardiomegaly. mild cardiomegaly.", ""),
    ("repeat", "the lungs are clear. there is a left a left pleural effusion.", "LO=0 NF=1"),
    ("repeat", "heart size is normal. consolidation consolidation.", "CM=0 NF=1"),
    # broken grammar: a torn sentence (its dangling head and its tail), run-ons without a list's "or"
    ("broken", "the heart size is normal. no pleural effusion or. pneumothorax.", "CM=0 NF=1"),
    ("broken", "heart size is within normal limits. no. pneumothorax.", "CM=0 NF=1"),
    ("broken", "there is a. pleural effusion.", ""),
    ("broken", "no pulmonary edema mild cardiomegaly.", ""),
    ("broken", "no pneumothorax small left pleural effusion.", ""),
    ("broken", "the lungs are clear. possible pneumothorax small effusion.", "LO=0 NF=1"),
    ("broken", "no effusion the.", ""),
    ("broken", "cardiomegaly is.", ""),
    # contradictions: the finding stated both ways is neither, and the report is not read as normal
    ("contradiction", "no pneumothorax. small left pneumothorax.", ""),
    ("contradiction", "heart size is normal. moderate cardiomegaly.", ""),
    ("contradiction", "no pleural effusion. possible small right pleural effusion. the lungs are clear.", "LO=0"),
    ("contradiction", "lungs are clear without effusion. large left pleural effusion. no pneumothorax.",
     "LO=0 PTX=0"),
    ("contradiction", "no fracture. fracture of the left sixth rib.", ""),
]


def micro_f1(read: np.ndarray, want: np.ndarray) -> dict[str, float]:
    """Two micro-F1s over report x observation pairs: `presence` (1 or -1 counts as reported present, as the
    gold scores a report against the image truth) and `stated` (each stated value 1 / 0 / -1 is a claim; a claim
    is right when the expected label has the same value: negations and hedges count too)."""
    def f1(hyp: np.ndarray, ref: np.ndarray, right: np.ndarray) -> float:
        tp = int(right.sum())
        fp, fn = int(hyp.sum()) - tp, int(ref.sum()) - tp
        return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0

    hyp_p, ref_p = np.isin(read, (1, -1)), np.isin(want, (1, -1))
    hyp_s, ref_s = ~np.isnan(read), ~np.isnan(want)
    return {"presence_f1": f1(hyp_p, ref_p, hyp_p & ref_p), "stated_f1": f1(hyp_s, ref_s, hyp_s & (read == want)),
            "exact": float(np.all((read == want) | (np.isnan(read) & np.isnan(want)), axis=1).mean())}


# Written after the reader was frozen and never tuned on (its score is the honest out-of-sample estimate; the
# reader's patterns were developed against PARAPHRASES above).
HELD_OUT: list[tuple[str, str]] = [
    ("Cardiac silhouette is normal. Pulmonary vasculature is normal. No consolidation.", "CM=0 CO=0 NF=1"),
    ("The heart is top normal in size. No focal lung consolidation.", "CM=0 CO=0 NF=1"),
    ("Low lung volumes with bibasilar atelectasis. No effusion.", "AT=1 PE=0"),
    ("There is a moderate-sized right pleural effusion. The left lung is clear.", "PE=1 LO=0"),
    ("Interval development of a left lower lobe consolidation.", "CO=1"),
    ("Small pneumothorax at the left apex. Left chest tube in place.", "PTX=1 SD=1"),
    ("No evidence of acute fracture. Heart size is normal.", "FR=0 CM=0 NF=1"),
    ("Diffuse bilateral interstitial opacities consistent with edema.", "LO=1 ED=1"),
    ("Mild enlargement of the cardiac silhouette. No pulmonary edema.", "CM=1 ED=0"),
    ("A right upper lobe pulmonary nodule measures 8 mm.", "LL=1"),
    ("There is no pneumothorax, pleural effusion or consolidation.", "PTX=0 PE=0 CO=0 NF=1"),
    ("Pacemaker leads terminate in the right atrium and right ventricle. Lungs are clear.", "SD=1 LO=0 NF=1"),
    ("Left lower lobe airspace disease, possibly pneumonia.", "LO=1 PN=-1"),
    ("The right costophrenic angle is blunted, suggestive of a small effusion.", "PE=1"),
    ("Fracture of the left fifth rib is again seen.", "FR=1"),
    ("Mildly enlarged heart. Small bilateral effusions.", "CM=1 PE=1"),
    ("There is right basilar atelectasis without effusion.", "AT=1 PE=0"),
    ("Trace left pleural effusion. Otherwise clear lungs.", "PE=1 LO=0"),
    ("Normal heart. Lungs clear. No effusion.", "CM=0 LO=0 PE=0 NF=1"),
    ("Pneumonia in the right lower lobe cannot be excluded.", "PN=-1"),
    ("Right pleural thickening. Otherwise unremarkable.", "PO=1"),
    ("The endotracheal tube tip is 3 cm above the carina. Mild pulmonary edema.", "SD=1 ED=1"),
    ("No acute cardiopulmonary disease. Degenerative changes of the spine.", "NF=1"),
    ("Large left pneumothorax. No mediastinal shift.", "PTX=1"),
    ("Heart size upper limits of normal. No focal opacity.", "LO=0"),
]
