"""Names shared by every part of the harness."""

# The 14 CheXpert observations, in the order used everywhere (labels, classifier outputs, CE metrics).
OBSERVATIONS: tuple[str, ...] = (
    "No Finding",
    "Enlarged Cardiomediastinum",
    "Cardiomegaly",
    "Lung Opacity",
    "Lung Lesion",
    "Edema",
    "Consolidation",
    "Pneumonia",
    "Atelectasis",
    "Pneumothorax",
    "Pleural Effusion",
    "Pleural Other",
    "Fracture",
    "Support Devices",
)
NUM_OBSERVATIONS = len(OBSERVATIONS)
NO_FINDING = 0
SUPPORT_DEVICES = 13

# CheXpert label values.
POSITIVE, NEGATIVE, UNCERTAIN = 1, 0, -1
