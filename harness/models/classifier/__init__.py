"""The frozen multi-label disease classifier of stage 2 (REVA-PO Sec. 3.2, Supp. D.2).

A timm ViT predicts the 14 CheXpert observations of a chest X-ray. It is trained with BCE on the positive
CheXpert labels of each report (a row without any positive gets "No Finding"), per-class decision thresholds
are chosen on the validation split (F1-optimal), and the predicted positive names are inserted into the
prompt in stages 2 and 3. Once trained it never trains again: `load_classifier` returns it frozen.

Paper defaults (Supp. D.2; the classifier starts from a Medical-MAE ViT-B/16, 224x224 inputs):

| | MIMIC-CXR | IU-Xray |
| --- | --- | --- |
| batch size | 1600 | 64 |
| learning rate | 1.5e-3 | 6.25e-5 |
| Adam beta2 | 0.95 ("without reducing beta2, this large batch size caused training to crash") | 0.999 |
| epochs | 20 | 20 |
| weight decay | 0.05 | 0.05 |
| initialisation | Medical-MAE ViT-B/16 | the classifier fine-tuned on MIMIC-CXR |

The paper states no learning-rate schedule, augmentation or loss weighting; by default none is applied here. The
official code's recipe is available as options (issue 42; docs/paper_vs_code.md), which the paper presets set:
a Medical-MAE checkpoint (``medical_mae``), layer-wise LR decay and DeepSpeed's warm-up cosine (``optim``),
gradient clipping, drop path, and keeping the epoch with the best mean AUC (``selection``).
Inputs are padded to square, resized and normalised with chest X-ray statistics (mean 0.5056, std 0.252 on every
channel) as the official code does; the tiny preset keeps ImageNet's (`ClassifierConfig.normalization`).

Modules: ``config`` (ClassifierConfig and its presets), ``model`` (building, loading a pretrained backbone,
freezing), ``inputs`` (image preprocessing, training targets), ``training`` (the loop, probabilities),
``thresholds`` (per-class F1-optimal thresholds, predicted names), ``storage`` (save / load a trained one).
"""

from harness.models.classifier.config import TINY_ARCH, TINY_VIT_KWARGS, ClassifierConfig
from harness.models.classifier.inputs import (
    CXR_MEAN,
    CXR_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    NORMALIZATIONS,
    classifier_targets,
    preprocess,
)
from harness.models.classifier.model import build_classifier, freeze, load_pretrained
from harness.models.classifier.storage import META_FILE, WEIGHTS_FILE, load_classifier, save_classifier
from harness.models.classifier.thresholds import choose_thresholds, positive_names, predict_labels
from harness.models.classifier.training import predict_proba, train_classifier

__all__ = [
    "CXR_MEAN",
    "CXR_STD",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "META_FILE",
    "NORMALIZATIONS",
    "TINY_ARCH",
    "TINY_VIT_KWARGS",
    "WEIGHTS_FILE",
    "ClassifierConfig",
    "build_classifier",
    "choose_thresholds",
    "classifier_targets",
    "freeze",
    "load_classifier",
    "load_pretrained",
    "positive_names",
    "predict_labels",
    "predict_proba",
    "preprocess",
    "save_classifier",
    "train_classifier",
]
