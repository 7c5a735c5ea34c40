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

The paper states no learning-rate schedule, augmentation or loss weighting; none is applied here.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from harness.constants import NO_FINDING, NUM_OBSERVATIONS, OBSERVATIONS, POSITIVE

logger = logging.getLogger(__name__)

# ImageNet statistics: timm's ViT-B/16 and Medical-MAE (which follows MAE's ImageNet recipe) both use them.
IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)

WEIGHTS_FILE = "classifier.safetensors"
META_FILE = "classifier.json"
_FORMAT_VERSION = 1

# The tiny preset's ViT: same timm class as ViT-B/16, only smaller, so the code path is the real one.
TINY_VIT_KWARGS: dict[str, Any] = {
    "patch_size": 16, "embed_dim": 64, "depth": 2, "num_heads": 2, "mlp_ratio": 2.0,
}
TINY_ARCH = "tiny_vit"


@dataclass
class ClassifierConfig:
    """Everything needed to build and train the classifier; defaults are the paper's MIMIC-CXR setting.

    Use `ClassifierConfig.preset("mimic_cxr" | "iu_xray" | "tiny")` for the three presets.
    """

    # "vit_base_patch16_224" (paper: Medical-MAE ViT-B/16) for real runs, "tiny_vit" for the tiny preset;
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
    # Not in the paper (it trained in fp16 on V100s): autocast to bf16 on CUDA for speed. Off on CPU.
    amp_bf16: bool = False

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
        if problems:
            raise ValueError("invalid ClassifierConfig: " + "; ".join(problems))

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ClassifierConfig:
        """The paper's MIMIC-CXR / IU-Xray settings (Supp. D.2) or the tiny CPU preset, with overrides."""
        presets: dict[str, dict[str, Any]] = {
            "mimic_cxr": {},
            "iu_xray": {"batch_size": 64, "lr": 6.25e-5, "adam_beta2": 0.999},
            # Not from the paper: small enough to train on a laptop CPU in seconds.
            "tiny": {"arch": TINY_ARCH, "img_size": 112, "epochs": 10, "batch_size": 32, "lr": 1e-3,
                     "adam_beta2": 0.999},
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
        return cls(**data)


# --------------------------------------------------------------------------------------------- building


def build_classifier(cfg: ClassifierConfig) -> nn.Module:
    """A timm ViT with 14 logits, randomly initialised from `cfg.seed`, then `cfg.pretrained_path` if set.

    The global RNG is left untouched (the seed is applied inside a forked RNG state).
    """
    import timm
    from timm.models.vision_transformer import VisionTransformer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        if cfg.arch == TINY_ARCH:
            model: nn.Module = VisionTransformer(
                img_size=cfg.img_size, num_classes=NUM_OBSERVATIONS, global_pool=cfg.global_pool,
                **TINY_VIT_KWARGS,
            )
        else:
            # pretrained=False always: weights only ever come from a local file.
            model = timm.create_model(
                cfg.arch, pretrained=False, num_classes=NUM_OBSERVATIONS, img_size=cfg.img_size,
                global_pool=cfg.global_pool,
            )
    if cfg.pretrained_path:
        load_pretrained(model, cfg.pretrained_path)
    return model


def _read_state_dict(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"classifier pretrained_path does not exist: {path}")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state: Any = load_file(str(path))
    else:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    # MAE-style checkpoints wrap the weights ({"model": ...}); Lightning/others use "state_dict".
    for key in ("model", "state_dict", "module"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
            break
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path} does not hold a state dict of tensors")
    # DDP / torch.compile prefixes.
    out = {}
    for key, value in state.items():
        for prefix in ("module.", "_orig_mod."):
            if key.startswith(prefix):
                key = key[len(prefix):]
        out[key] = value
    return out


def _is_head_key(key: str) -> bool:
    return key.startswith("head.") or key.startswith("head_drop.")


def load_pretrained(model: nn.Module, path: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Load a local timm state dict into `model` non-strictly and return what matched.

    The classification head is skipped when its shape differs (e.g. a 1000-class ImageNet head); the position
    embedding is resampled when the checkpoint was trained at another resolution. Any other shape mismatch
    is an error. Missing and unexpected keys are logged. If nothing but the head would be loaded, the
    checkpoint is certainly not a backbone for this architecture, and a ValueError is raised.
    Returns {"loaded", "missing", "unexpected", "skipped"} key lists.
    """
    state = _read_state_dict(path)
    own = model.state_dict()
    loadable: dict[str, torch.Tensor] = {}
    skipped: list[str] = []
    mismatched: list[str] = []
    for key, value in state.items():
        if key not in own:
            continue
        target = own[key]
        if value.shape == target.shape:
            loadable[key] = value
        elif key == "pos_embed" and value.ndim == 3:
            from timm.layers import resample_abs_pos_embed

            prefix = int(getattr(model, "num_prefix_tokens", 1))
            grid = getattr(getattr(model, "patch_embed", None), "grid_size", None)
            if grid is None:
                mismatched.append(f"{key}: {tuple(value.shape)} vs {tuple(target.shape)}")
                continue
            loadable[key] = resample_abs_pos_embed(value, new_size=list(grid), num_prefix_tokens=prefix)
        elif _is_head_key(key):
            skipped.append(key)  # a head for other classes: train ours from scratch
        else:
            mismatched.append(f"{key}: {tuple(value.shape)} vs {tuple(target.shape)}")
    if mismatched:
        raise ValueError(f"{path}: shape mismatch with the {type(model).__name__} built from the config: "
                         + "; ".join(mismatched))
    if not any(not _is_head_key(k) for k in loadable):
        raise ValueError(f"{path}: no backbone weight matches the model (only the head or nothing); "
                         "is it a checkpoint for this architecture?")
    result = model.load_state_dict(loadable, strict=False)
    report = {
        "loaded": sorted(loadable),
        "missing": sorted(result.missing_keys),
        "unexpected": sorted(k for k in state if k not in own),
        "skipped": sorted(skipped),
    }
    logger.info("classifier: loaded %d tensors from %s", len(report["loaded"]), path)
    if report["missing"]:
        logger.warning("classifier: %d keys not in %s (initialised randomly): %s", len(report["missing"]),
                       path, report["missing"])
    if report["unexpected"]:
        logger.warning("classifier: %d keys of %s ignored: %s", len(report["unexpected"]), path,
                       report["unexpected"])
    if report["skipped"]:
        logger.info("classifier: head of %s skipped (shape differs): %s", path, report["skipped"])
    return report


# ---------------------------------------------------------------------------------------- data helpers


def _pad_square(image: Image.Image) -> Image.Image:
    width, height = image.size
    if width == height:
        return image
    side = max(width, height)
    canvas = Image.new(image.mode, (side, side))  # black, like the X-ray background
    canvas.paste(image, ((side - width) // 2, (side - height) // 2))
    return canvas


def preprocess(images: Sequence[Image.Image], img_size: int, *, pad_to_square: bool = True) -> torch.Tensor:
    """PIL images -> float tensor [N, 3, img_size, img_size], ImageNet-normalised.

    Grayscale X-rays are replicated to RGB; images are padded to square first (as the official code does) so
    the anatomy is not stretched, then resized bicubically (timm's ViT default).
    """
    if not images:
        return torch.empty(0, 3, img_size, img_size)
    mean = np.asarray(IMAGENET_MEAN, dtype=np.float32)
    std = np.asarray(IMAGENET_STD, dtype=np.float32)
    arrays = []
    for image in images:
        rgb = image.convert("RGB")
        if pad_to_square:
            rgb = _pad_square(rgb)
        rgb = rgb.resize((img_size, img_size), Image.Resampling.BICUBIC)
        arr = np.asarray(rgb, dtype=np.float32) / 255.0
        arrays.append(((arr - mean) / std).transpose(2, 0, 1))
    return torch.from_numpy(np.stack(arrays))


def classifier_targets(labels: np.ndarray) -> np.ndarray:
    """CheXpert labels [N, 14] (1, 0, -1, nan) -> binary training targets [N, 14] (float32).

    Supp. D.2: only positives count (uncertain, negative and blank are 0); a row with no positive gets
    No Finding = 1 "so that each image has at least one label".
    """
    labels = np.asarray(labels, dtype=np.float64)
    if labels.ndim != 2 or labels.shape[1] != NUM_OBSERVATIONS:
        raise ValueError(f"labels must have shape [N, {NUM_OBSERVATIONS}], got {labels.shape}")
    targets = (labels == POSITIVE).astype(np.float32)  # nan == 1 is False
    targets[targets.sum(axis=1) == 0, NO_FINDING] = 1.0
    return targets


# --------------------------------------------------------------------------------------------- training


class _Pairs(torch.utils.data.Dataset):
    """(image, target) pairs from an image Dataset and a target tensor (TensorDataset needs two tensors)."""

    def __init__(self, x, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


def _device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _autocast(cfg: ClassifierConfig, device: torch.device) -> Any:
    enabled = cfg.amp_bf16 and device.type == "cuda"
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=enabled)


@torch.no_grad()
def _mean_bce(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: ClassifierConfig) -> float:
    device = _device_of(model)
    step = cfg.micro_batch_size or cfg.batch_size
    total = 0.0
    for start in range(0, len(x), step):
        xb = x[start:start + step].to(device)
        yb = y[start:start + step].to(device, dtype=torch.float32)
        with _autocast(cfg, device):
            logits = model(xb)
        total += nn.functional.binary_cross_entropy_with_logits(logits.float(), yb, reduction="sum").item()
    return total / max(1, y.numel())


def train_classifier(
    model: nn.Module,
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    val_x: torch.Tensor | None,
    val_y: torch.Tensor | None,
    cfg: ClassifierConfig,
    on_epoch: Callable[[int, float, float | None], None] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train with AdamW + BCE-with-logits (mean over samples x classes); keep the best epoch by val loss.

    `train_x` / `val_x` are preprocessed images [N, 3, H, W]; `train_y` / `val_y` are binary targets [N, 14]
    (see `classifier_targets`). Shuffling uses a generator seeded with `cfg.seed`, so two runs from the same
    initial weights give the same weights. The model is trained on the device it is on (tensors are moved
    batch by batch). `on_epoch(epoch, train_loss, val_loss)` is called after each epoch (epoch counts from 1).
    At the end, the weights of the best epoch (lowest val loss; the last epoch without validation data) are
    restored and the model is left in eval mode.

    Returns {"train_loss": [...], "val_loss": [...], "best_epoch": int, "best_val_loss": float | None}.
    """
    from torch.utils.data import DataLoader, TensorDataset
    from tqdm.auto import tqdm

    if len(train_x) != len(train_y):
        raise ValueError(f"train_x has {len(train_x)} rows but train_y has {len(train_y)}")
    if (val_x is None) != (val_y is None):
        raise ValueError("give both val_x and val_y, or neither")
    if val_x is not None and val_y is not None and len(val_x) != len(val_y):
        raise ValueError(f"val_x has {len(val_x)} rows but val_y has {len(val_y)}")

    device = _device_of(model)
    generator = torch.Generator().manual_seed(cfg.seed)
    # A tensor of images, or a Dataset that decodes them on demand (harness/data/streaming.py), in workers
    # when cfg.num_workers > 0, into pinned memory when training on a GPU.
    pairs = TensorDataset(train_x, train_y.float()) if torch.is_tensor(train_x) else _Pairs(train_x, train_y.float())
    loader = DataLoader(pairs, batch_size=cfg.batch_size, shuffle=True, generator=generator,
                        num_workers=cfg.num_workers, drop_last=False, pin_memory=device.type == "cuda")
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=cfg.lr, betas=(0.9, cfg.adam_beta2),
                                  weight_decay=cfg.weight_decay)
    # Summed per micro-batch and divided by the whole batch's element count: the mean over the batch.
    criterion = nn.BCEWithLogitsLoss(reduction="sum")

    history: dict[str, Any] = {"train_loss": [], "val_loss": [], "best_epoch": 0, "best_val_loss": None}
    best_state: dict[str, torch.Tensor] | None = None
    best_loss = float("inf")
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        seen, total = 0, 0.0
        bar = tqdm(loader, desc=f"classifier epoch {epoch}/{cfg.epochs}", disable=not progress, leave=False)
        for xb, yb in bar:
            optimizer.zero_grad(set_to_none=True)
            denom = yb.numel()
            chunk = cfg.micro_batch_size or len(xb)
            batch_loss = 0.0
            # Gradient accumulation over micro-batches gives the same update as the whole batch at once.
            for start in range(0, len(xb), chunk):
                xc = xb[start:start + chunk].to(device, non_blocking=True)
                yc = yb[start:start + chunk].to(device, non_blocking=True)
                with _autocast(cfg, device):
                    logits = model(xc)
                loss = criterion(logits.float(), yc) / denom
                loss.backward()
                batch_loss += loss.item()
            optimizer.step()
            seen += len(xb)
            total += batch_loss * len(xb)
            bar.set_postfix(loss=f"{batch_loss:.4f}")
        train_loss = total / max(1, seen)
        model.eval()
        val_loss = _mean_bce(model, val_x, val_y, cfg) if val_x is not None and val_y is not None else None
        history["train_loss"].append(train_loss)
        history["val_loss"].append(val_loss)
        # Without validation data the "best" epoch is simply the last one.
        score = val_loss if val_loss is not None else -float(epoch)
        if score < best_loss:
            best_loss = score
            history["best_epoch"] = epoch
            history["best_val_loss"] = val_loss
            best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        logger.info("classifier epoch %d: train loss %.5f, val loss %s", epoch, train_loss,
                    "n/a" if val_loss is None else f"{val_loss:.5f}")
        if on_epoch is not None:
            on_epoch(epoch, train_loss, val_loss)
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return history


@torch.no_grad()
def predict_proba(model: nn.Module, x: torch.Tensor, batch_size: int = 256) -> np.ndarray:
    """Sigmoid probabilities [N, 14] (float64) in eval mode without gradients; restores the previous mode."""
    was_training = model.training
    model.eval()
    device = _device_of(model)
    out = []
    try:
        for start in range(0, len(x), batch_size):
            out.append(torch.sigmoid(model(x[start:start + batch_size].to(device)).float()).cpu())
    finally:
        model.train(was_training)
    if not out:
        return np.zeros((0, NUM_OBSERVATIONS))
    return torch.cat(out).double().numpy()


# ------------------------------------------------------------------------------------------- thresholds


def _best_threshold(probs: np.ndarray, targets: np.ndarray, candidates: np.ndarray) -> float:
    positives = np.sort(probs[targets == 1])
    negatives = np.sort(probs[targets != 1])
    n_pos = len(positives)
    if n_pos == 0:
        return 0.5  # F1 is undefined without positives: keep the neutral threshold
    # Predicted positive means prob >= threshold; count with binary search, one pass per class.
    tp = n_pos - np.searchsorted(positives, candidates, side="left")
    fp = len(negatives) - np.searchsorted(negatives, candidates, side="left")
    fn = n_pos - tp
    f1 = 2 * tp / np.maximum(2 * tp + fp + fn, 1)
    # Tie-break: maximal F1 (to 1e-12), then closest to 0.5, then the larger threshold (fewer positives).
    best = np.flatnonzero(f1 >= f1.max() - 1e-12)
    order = np.lexsort((-candidates[best], np.abs(candidates[best] - 0.5)))
    return float(candidates[best[order[0]]])


def choose_thresholds(
    probs: np.ndarray, targets: np.ndarray, grid: Sequence[float] | np.ndarray | None = None
) -> np.ndarray:
    """Per class, the threshold (predict positive iff prob >= threshold) that maximises validation F1.

    Candidates: with `grid=None`, the class's sorted unique validation probabilities plus 0.5 (this covers
    every distinct split of the validation set); otherwise the given grid (e.g. `np.linspace(0.05, 0.95, 19)`)
    for every class. Ties in F1 go to the candidate closest to 0.5, then to the larger one. A class with no
    positive in `targets` gets 0.5. Returns float64 [14].
    """
    probs = np.asarray(probs, dtype=np.float64)
    targets = np.asarray(targets)
    if probs.shape != targets.shape or probs.ndim != 2:
        raise ValueError(f"probs {probs.shape} and targets {targets.shape} must be equal [N, C] shapes")
    fixed = None if grid is None else np.unique(np.asarray(grid, dtype=np.float64))
    if fixed is not None and fixed.size == 0:
        raise ValueError("grid must not be empty")
    thresholds = np.empty(probs.shape[1])
    for c in range(probs.shape[1]):
        candidates = fixed if fixed is not None else np.unique(np.append(probs[:, c], 0.5))
        thresholds[c] = _best_threshold(probs[:, c], targets[:, c], candidates)
    return thresholds


def predict_labels(probs: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Binary predictions [N, 14] (int64): 1 where prob >= the class threshold."""
    probs = np.asarray(probs, dtype=np.float64)
    thresholds = np.asarray(thresholds, dtype=np.float64)
    if probs.ndim != 2 or thresholds.shape != (probs.shape[1],):
        raise ValueError(f"thresholds {thresholds.shape} need one entry per column of probs {probs.shape}")
    return (probs >= thresholds[None, :]).astype(np.int64)


def positive_names(row: Sequence[int] | np.ndarray) -> list[str]:
    """Names of the observations predicted positive, in OBSERVATIONS order; ["No Finding"] if none is.

    These are the disease cues D put into the stage-2/3 prompt (Sec. 3.2). No Finding is kept as predicted,
    even next to findings: the paper appends the predicted labels as they are.
    """
    row = np.asarray(row)
    if row.shape != (NUM_OBSERVATIONS,):
        raise ValueError(f"row must have shape [{NUM_OBSERVATIONS}], got {row.shape}")
    names = [name for name, value in zip(OBSERVATIONS, row, strict=True) if value == 1]
    return names or [OBSERVATIONS[NO_FINDING]]


# ------------------------------------------------------------------------------------------ persistence


def _atomic_write(path: Path, write: Callable[[str], None]) -> None:
    """Write through a temp file in the same directory, then rename: readers never see a partial file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_classifier(
    model: nn.Module, cfg: ClassifierConfig, thresholds: np.ndarray, out_dir: str | os.PathLike[str]
) -> Path:
    """Write `out_dir/classifier.safetensors` (weights) and `out_dir/classifier.json` (config + thresholds).

    The JSON is written last, so a directory with a JSON always has its weights. Returns `out_dir`.
    """
    from safetensors.torch import save_file

    thresholds = np.asarray(thresholds, dtype=np.float64)
    if thresholds.shape != (NUM_OBSERVATIONS,):
        raise ValueError(f"thresholds must have shape [{NUM_OBSERVATIONS}], got {thresholds.shape}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    _atomic_write(out / WEIGHTS_FILE, lambda tmp: save_file(state, tmp))
    meta = {
        "format_version": _FORMAT_VERSION,
        "config": cfg.to_dict(),
        "observations": list(OBSERVATIONS),
        "thresholds": [float(t) for t in thresholds],
    }

    def write_json(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=2)
            fh.write("\n")

    _atomic_write(out / META_FILE, write_json)
    return out


def freeze(model: nn.Module) -> nn.Module:
    """No gradients, eval mode: the classifier stays frozen in stages 2 and 3 (Supp. D.2)."""
    for param in model.parameters():
        param.requires_grad_(False)
    return model.eval()


def load_classifier(
    directory: str | os.PathLike[str], device: str | torch.device = "cpu"
) -> tuple[nn.Module, ClassifierConfig, np.ndarray]:
    """Rebuild the classifier saved by `save_classifier`; returns (frozen model, config, thresholds [14])."""
    from safetensors.torch import load_file

    root = Path(directory)
    for name in (META_FILE, WEIGHTS_FILE):
        if not (root / name).is_file():
            raise FileNotFoundError(f"classifier directory {root} has no {name} "
                                    "(write it with save_classifier / `regbench classifier`)")
    meta = json.loads((root / META_FILE).read_text(encoding="utf-8"))
    if list(meta.get("observations", [])) != list(OBSERVATIONS):
        raise ValueError(f"{root / META_FILE}: observation names/order differ from "
                         "harness.constants.OBSERVATIONS")
    cfg = ClassifierConfig.from_dict(meta["config"])
    thresholds = np.asarray(meta["thresholds"], dtype=np.float64)
    if thresholds.shape != (NUM_OBSERVATIONS,):
        raise ValueError(f"{root / META_FILE}: expected {NUM_OBSERVATIONS} thresholds, "
                         f"got {thresholds.shape}")
    # The saved weights replace everything; do not reload (or require) the original pretrained checkpoint.
    model = build_classifier(dataclasses.replace(cfg, pretrained_path=None))
    model.load_state_dict(load_file(str(root / WEIGHTS_FILE)), strict=True)
    model.to(device)
    return freeze(model), cfg, thresholds

