"""The classifier's configuration (Supp. D.2's two data-set settings and the tiny CPU preset)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

# The tiny preset's ViT: same timm class as ViT-B/16, only smaller, so the code path is the real one.
TINY_VIT_KWARGS: dict[str, Any] = {
    "patch_size": 16, "embed_dim": 64, "depth": 2, "num_heads": 2, "mlp_ratio": 2.0,
}
TINY_ARCH = "tiny_vit"
# A small conv net for the tiny preset (harness/models/classifier/tiny_cnn.py; this project, issue 12).
TINY_CNN_ARCH = "tiny_cnn"


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
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClassifierConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown ClassifierConfig fields: {unknown}")
        # A classifier saved before the option existed was trained on ImageNet-normalised inputs.
        return cls(**{"normalization": "imagenet", **data})
