"""The classifier's configuration (Supp. D.2's two data-set settings and the tiny CPU preset)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from harness.config.names import CLASSIFIER_PRETRAINED_FORMATS, CLASSIFIER_SCHEDULERS, CLASSIFIER_SELECTIONS

# The tiny preset's ViT: same timm class as ViT-B/16, only smaller, so the code path is the real one.
TINY_VIT_KWARGS: dict[str, Any] = {
    "patch_size": 16, "embed_dim": 64, "depth": 2, "num_heads": 2, "mlp_ratio": 2.0,
}
TINY_ARCH = "tiny_vit"
# A small conv net for the tiny preset (harness/models/classifier/tiny_cnn.py; this project, issue 12).
TINY_CNN_ARCH = "tiny_cnn"

PRETRAINED_FORMATS = CLASSIFIER_PRETRAINED_FORMATS
SCHEDULERS = CLASSIFIER_SCHEDULERS
SELECTIONS = CLASSIFIER_SELECTIONS
# Fields added after classifier.json existed, with the defaults that train as before (left out of to_dict).
OMITTED_AT_DEFAULT: dict[str, Any] = {
    "pretrained_format": "regbench", "drop_path": 0.0, "layer_decay": None, "scheduler": "constant",
    "warmup_steps": 0, "schedule_steps": None, "min_lr_ratio": 0.0, "max_grad_norm": None, "select": "val_loss",
}


@dataclass
class ClassifierConfig:
    """Everything needed to build and train the classifier; defaults are the paper's MIMIC-CXR setting.

    Use `ClassifierConfig.preset("mimic_cxr" | "iu_xray" | "tiny")` for the three presets.
    """

    # "vit_base_patch16_224" (paper: Medical-MAE ViT-B/16) for real runs, "tiny_vit" or "tiny_cnn" for the tiny
    # preset;
    # any other timm model name is passed to `timm.create_model` (always with pretrained=False).
    arch: str = "vit_base_patch16_224"
    # Classifier input size; the official code resizes to 224 for the classifier (112 for the tiny preset).
    img_size: int = 224
    # Pooling of the ViT: timm's default "token" (CLS); Medical-MAE fine-tunes with "avg" (+ fc_norm).
    global_pool: str = "token"
    # Local timm state dict (.safetensors / .pth / .pt / .bin) to start from, e.g. a Medical-MAE ViT-B/16.
    # Never downloaded. For IU-Xray the paper starts from the MIMIC-CXR classifier.
    pretrained_path: str | None = None
    # Supp. D.2: E = 20 on both data sets.
    epochs: int = 20
    # Supp. D.2: bs = 1600 (MIMIC-CXR), 64 (IU-Xray).
    batch_size: int = 1600
    # Not in the paper: split each batch into chunks of this size and accumulate gradients (same update,
    # less memory). None = the whole batch at once.
    micro_batch_size: int | None = None
    # Supp. D.2: lr = 1.5e-3 (MIMIC-CXR), 6.25e-5 (IU-Xray); constant (the paper names no schedule).
    lr: float = 1.5e-3
    # Supp. D.2: wd = 0.05 on both data sets (AdamW, decoupled).
    weight_decay: float = 0.05
    # Supp. D.2: beta2 = 0.95 (MIMIC-CXR; 0.999 crashed at bs 1600), 0.999 (IU-Xray). beta1 is AdamW's 0.9.
    adam_beta2: float = 0.95
    # Seeds the initialisation (of the parts not loaded from pretrained_path) and the shuffling.
    seed: int = 0
    # DataLoader workers over the in-memory tensors; 0 keeps everything in the main process.
    num_workers: int = 0
    # Not in the paper (it trained in fp16 on V100s): mixed precision (Micikevicius et al. 2018, with bf16): the
    # forward's convolutions and matrix products autocast to bf16 while the weights, the optimizer, batch norm and
    # the loss stay fp32; in training, validation and predictions. On CUDA, or on a CPU with native bf16
    # (AVX512-BF16 or AMX; refused on others, where oneDNN emulates bf16 more slowly than fp32). The tiny CNN's
    # training step takes ~0.5x the time on such a CPU; not exact (issue 27: measured in benchmarks/RESULTS.md).
    amp_bf16: bool = False
    # Pixel statistics of the input (harness/models/classifier/inputs.py NORMALIZATIONS): "cxr" as the official
    # REVA-PO classifier transform and Medical-MAE's chest X-ray fine-tuning; "imagenet" for the tiny preset.
    normalization: str = "cxr"
    # Layout of `pretrained_path`: "regbench" = a timm state dict loaded non-strictly (model.load_pretrained);
    # "medical_mae" = a Medical-MAE / MAE checkpoint ({"model": ...}, e.g. vit-b_CXR_0.5M_mae_CheXpert.pth) mapped
    # onto the timm ViT as the official REVA-PO classifier loads it (model_medical_mae.py).
    pretrained_format: str = "regbench"
    # Stochastic depth of the ViT blocks; the official classifier builds its ViT-B/16 with drop_path_rate 0.2.
    drop_path: float = 0.0
    # Layer-wise learning-rate decay (official reva_po/utils/lr_decay.py, 0.55 in reva_po/runners/runner_base.py):
    # None = one AdamW group, weight decay on every parameter (this project's); a number = the official groups
    # (optim.py).
    layer_decay: float | None = None
    # "constant" (this project's) or "warmup_cosine": DeepSpeed's WarmupCosineLR as the official classifier's
    # DeepSpeed json configures it (linear warm-up from 0 over warmup_steps, cosine to min_lr_ratio x lr at
    # schedule_steps), stepped once per optimizer step.
    scheduler: str = "constant"
    warmup_steps: int = 0
    # The cosine's end (DeepSpeed total_num_steps); None = the run's own number of optimizer steps.
    schedule_steps: int | None = None
    # The floor of the cosine as a fraction of each group's learning rate (DeepSpeed cos_min_ratio).
    min_lr_ratio: float = 0.0
    # Gradient-norm clipping before each optimizer step (official DeepSpeed json: gradient_clipping 1.0); None = off.
    max_grad_norm: float | None = None
    # Which epoch's weights are kept: "val_loss" (lowest validation BCE, this project's) or "mean_auc" (highest mean
    # ROC AUC over the labels with both classes in validation: the official agg_metrics).
    select: str = "val_loss"

    def __post_init__(self) -> None:
        problems = []
        if self.img_size <= 0:
            problems.append(f"img_size must be positive, got {self.img_size}")
        if self.epochs < 0:
            problems.append(f"epochs must be >= 0, got {self.epochs}")
        if self.batch_size <= 0:
            problems.append(f"batch_size must be positive, got {self.batch_size}")
        if self.micro_batch_size is not None and self.micro_batch_size <= 0:
            problems.append(f"micro_batch_size must be positive or None, got {self.micro_batch_size}")
        if self.lr <= 0:
            problems.append(f"lr must be positive, got {self.lr}")
        if self.weight_decay < 0:
            problems.append(f"weight_decay must be >= 0, got {self.weight_decay}")
        if not 0.0 <= self.adam_beta2 < 1.0:
            problems.append(f"adam_beta2 must be in [0, 1), got {self.adam_beta2}")
        if self.num_workers < 0:
            problems.append(f"num_workers must be >= 0, got {self.num_workers}")
        if self.normalization not in ("cxr", "imagenet"):
            problems.append(f"normalization must be cxr or imagenet, got {self.normalization!r}")
        if self.pretrained_format not in PRETRAINED_FORMATS:
            problems.append(f"pretrained_format must be one of {PRETRAINED_FORMATS}, got {self.pretrained_format!r}")
        if not 0.0 <= self.drop_path < 1.0:
            problems.append(f"drop_path must be in [0, 1), got {self.drop_path}")
        if self.layer_decay is not None and not 0.0 < self.layer_decay <= 1.0:
            problems.append(f"layer_decay must be in (0, 1] or None, got {self.layer_decay}")
        if self.scheduler not in SCHEDULERS:
            problems.append(f"scheduler must be one of {SCHEDULERS}, got {self.scheduler!r}")
        if self.warmup_steps < 0 or (self.scheduler == "warmup_cosine" and self.warmup_steps < 1):
            problems.append(f"warmup_steps must be >= {1 if self.scheduler == 'warmup_cosine' else 0} (DeepSpeed's "
                            f"WarmupCosineLR needs a warm-up), got {self.warmup_steps}")
        if self.schedule_steps is not None and self.schedule_steps < 1:
            problems.append(f"schedule_steps must be >= 1 or None, got {self.schedule_steps}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            problems.append(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            problems.append(f"max_grad_norm must be positive or None, got {self.max_grad_norm}")
        if self.select not in SELECTIONS:
            problems.append(f"select must be one of {SELECTIONS}, got {self.select!r}")
        if problems:
            raise ValueError("invalid ClassifierConfig: " + "; ".join(problems))

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ClassifierConfig:
        """The paper's MIMIC-CXR / IU-Xray settings (Supp. D.2) or the tiny CPU preset, with overrides."""
        presets: dict[str, dict[str, Any]] = {
            "mimic_cxr": {},
            "iu_xray": {"batch_size": 64, "lr": 6.25e-5, "adam_beta2": 0.999},
            # Not from the paper: small enough to train on a laptop CPU in seconds (ImageNet statistics, as
            # before the option existed).
            "tiny": {"arch": TINY_ARCH, "img_size": 112, "epochs": 10, "batch_size": 32, "lr": 1e-3,
                     "adam_beta2": 0.999, "normalization": "imagenet"},
        }
        if name not in presets:
            raise ValueError(f"unknown classifier preset {name!r}; choose one of {sorted(presets)}")
        return cls(**{**presets[name], **overrides})

    def to_dict(self) -> dict[str, Any]:
        """The fields, without the later ones at their defaults: a classifier trained as before keeps the bytes of
        its classifier.json (harness/stages/prompts.py keys its predictions by them)."""
        return {k: v for k, v in dataclasses.asdict(self).items()
                if k not in OMITTED_AT_DEFAULT or v != OMITTED_AT_DEFAULT[k]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClassifierConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown ClassifierConfig fields: {unknown}")
        # A classifier saved before the option existed was trained on ImageNet-normalised inputs.
        return cls(**{"normalization": "imagenet", **data})
