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

# The per-report BLEU statistics a test evaluation records (predictions_*.jsonl, "nlg"): pycocoevalcap's clipped
# n-gram matches and guesses for n = 1..4 and the two lengths, from which reports/bootstrap.py rescores corpus BLEU.
BLEU_COUNT_KEYS: tuple[str, ...] = (*(f"correct_{n}" for n in range(1, 5)), *(f"guess_{n}" for n in range(1, 5)),
                                     "testlen", "reflen")

# The model stages of REVA-PO's pipeline, in order (a study's `pipeline:` lists some of them).
PIPELINE_STAGES: tuple[str, ...] = ("warmup", "classifier", "sft", "rl")

# The smallest image side the phantom generator draws for (harness/data/phantom/config.py); `data.synth_image_size`
# and `data synth --image-size` are checked against this same bound.
MIN_IMAGE_SIZE = 32
