"""Training the classifier (AdamW + BCE; best epoch by validation loss or mean AUC) and predicting probabilities."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from harness.constants import NUM_OBSERVATIONS
from harness.models.classifier.config import ClassifierConfig
from harness.models.classifier.optim import build_optimizer, set_learning_rates
from harness.models.classifier.selection import mean_auc, scorable_labels
from harness.runs.preemption import Preempted, requested
from harness.training.checkpoints import load_latest, save_generation

# The package's name, so log records keep the logger name they had before the module was split.
logger = logging.getLogger(__package__)

class _Pairs(torch.utils.data.Dataset):
    """(image, target) pairs from an image Dataset and a target tensor (TensorDataset needs two tensors)."""

    def __init__(self, x, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


class _Skip(torch.utils.data.Sampler):
    """The indices of `inner` after its first `skip` (a resumed epoch; `inner` still draws all of them, so its
    generator advances exactly as in an uninterrupted epoch, and no skipped image is loaded)."""

    def __init__(self, inner, skip: int):
        self.inner, self.skip = inner, skip

    def __iter__(self):
        return itertools.islice(iter(self.inner), self.skip, None)

    def __len__(self) -> int:
        return max(0, len(self.inner) - self.skip)


CHECKPOINT_NAME = "classifier_state.pt"


def _save(folder: Path, state: dict) -> None:
    # one process: the protocol of every training loop (harness/training/checkpoints.py), without partitions
    save_generation(folder / CHECKPOINT_NAME, state.get("step"), lambda _: state)


def _load(folder: Path | None) -> dict | None:
    if folder is None:
        return None
    found = load_latest(folder / CHECKPOINT_NAME)
    return found[1] if found is not None else None


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def native_cpu_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX tiles)."""
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


NO_NATIVE_BF16 = ("classifier.amp_bf16 = true needs a CUDA device or a CPU with native bf16 (AVX512-BF16 or AMX); "
                  "this CPU has neither, and emulated bf16 is slower than fp32: set it to false")


def _autocast(amp_bf16: bool, device: torch.device) -> Any:
    """bf16 autocast for the forward when `amp_bf16` (ClassifierConfig.amp_bf16), else a no-op context."""
    if amp_bf16 and device.type == "cpu" and not native_cpu_bf16():
        raise ValueError(NO_NATIVE_BF16)
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp_bf16)


@torch.no_grad()
def _mean_bce(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: ClassifierConfig,
              probs: list | None = None) -> float:
    """Mean validation BCE; with `probs` (a list) the sigmoid probabilities of each chunk are appended to it."""
    device = _device_of(model)
    step = cfg.micro_batch_size or cfg.batch_size
    total = 0.0
    for start in range(0, len(x), step):
        xb = x[start:start + step].to(device)
        yb = y[start:start + step].to(device, dtype=torch.float32)
        with _autocast(cfg.amp_bf16, device):
            logits = model(xb)
        total += nn.functional.binary_cross_entropy_with_logits(logits.float(), yb, reduction="sum").item()
        if probs is not None:
            probs.append(torch.sigmoid(logits.float()).cpu().double().numpy())
    return total / max(1, y.numel())


def _val_scores(model: nn.Module, x, y, cfg: ClassifierConfig) -> tuple[float | None, float | None]:
    """(validation loss, validation mean AUC): the AUC only when cfg.select asks for it; (None, None) without
    validation data."""
    if x is None or y is None:
        return None, None
    if cfg.select != "mean_auc":
        return _mean_bce(model, x, y, cfg), None

    probs: list = []
    loss = _mean_bce(model, x, y, cfg, probs)
    return loss, mean_auc(np.concatenate(probs), y.numpy())


def train_classifier(
    model: nn.Module,
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    val_x: torch.Tensor | None,
    val_y: torch.Tensor | None,
    cfg: ClassifierConfig,
    on_epoch: Callable[[int, float, float | None], None] | None = None,
    progress: bool = True,
    checkpoint_dir: str | Path | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_resume: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Train with AdamW + BCE-with-logits (mean over samples x classes); keep the best epoch by val loss (or by
    mean AUC: cfg.select).

    `train_x` / `val_x` are preprocessed images [N, 3, H, W]; `train_y` / `val_y` are binary targets [N, 14]
    (see `classifier_targets`). Shuffling uses a generator seeded with `cfg.seed`, so two runs from the same
    initial weights give the same weights. The model is trained on the device it is on (tensors are moved
    batch by batch). `on_epoch(epoch, train_loss, val_loss)` is called after each epoch (epoch counts from 1).
    At the end, the weights of the best epoch (lowest val loss, or highest mean AUC with cfg.select "mean_auc"; the
    last epoch without validation data) are restored and the model is left in eval mode. The optimizer, the
    learning-rate schedule and gradient clipping follow cfg (optim.py: layer_decay, scheduler, max_grad_norm).

    With `checkpoint_dir` (a run's checkpoint/ folder) a checkpoint is written after every epoch and a call
    resumes from the newest one (`on_resume(completed epochs)` is called then); `should_stop()` is asked after
    every batch (harness/runs/preemption.py): when it holds, a checkpoint is written mid-epoch (the generator's
    state at the epoch's start and the batches done, so the resumed epoch draws the same order and skips what
    was trained) and `Preempted` is raised. A resumed run ends with the weights of an uninterrupted one.

    Returns {"train_loss": [...], "val_loss": [...], "best_epoch": int, "best_val_loss": float | None}, with
    "val_mean_auc" and "best_val_mean_auc" added when cfg.select is "mean_auc".
    """
    if len(train_x) != len(train_y):
        raise ValueError(f"train_x has {len(train_x)} rows but train_y has {len(train_y)}")
    if (val_x is None) != (val_y is None):
        raise ValueError("give both val_x and val_y, or neither")
    if val_x is not None and val_y is not None and len(val_x) != len(val_y):
        raise ValueError(f"val_x has {len(val_x)} rows but val_y has {len(val_y)}")
    if cfg.select == "mean_auc":
        if val_y is None or len(scorable_labels(val_y.numpy())) == 0:
            raise ValueError("classifier.select = mean_auc needs a validation split in which at least one label has "
                             "both classes (its AUC); use select val_loss, or a validation split with labels")

    device = _device_of(model)
    generator = torch.Generator().manual_seed(cfg.seed)
    folder = Path(checkpoint_dir) if checkpoint_dir is not None else None
    # A tensor of images, or a Dataset that decodes them on demand (harness/data/streaming.py), in workers
    # when cfg.num_workers > 0, into pinned memory when training on a GPU.
    pairs = TensorDataset(train_x, train_y.float()) if torch.is_tensor(train_x) else _Pairs(train_x, train_y.float())

    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer(model, cfg)
    # Summed per micro-batch and divided by the whole batch's element count: the mean over the batch.
    criterion = nn.BCEWithLogitsLoss(reduction="sum")

    history: dict[str, Any] = {"train_loss": [], "val_loss": [], "best_epoch": 0, "best_val_loss": None}
    if cfg.select == "mean_auc":
        history.update({"val_mean_auc": [], "best_val_mean_auc": None})
    best_state: dict[str, torch.Tensor] | None = None
    best_loss = float("inf")
    first_epoch, skip, seen, total, step = 1, 0, 0, 0.0, 0
    state = _load(folder)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        _set_rng_state(state["rng"])
        history, best_state = state["history"], state["best_state"] or None
        best_loss = float(state["best_loss"])
        first_epoch, skip, seen, total, step = (int(state["epoch"]), int(state["batch"]), int(state["seen"]),
                                                float(state["total"]), int(state["step"]))
        if on_resume is not None:
            on_resume(first_epoch - 1)

    def checkpoint(epoch: int, batch: int, epoch_start) -> None:
        # `generator`: its state at the start of `epoch` (mid-epoch) or of the next epoch (batch 0).
        _save(folder, {"step": step, "epoch": epoch, "batch": batch, "generator": epoch_start, "rng": _rng_state(),
                       "model": model.state_dict(), "optimizer": optimizer.state_dict(), "history": history,
                       "best_state": best_state or {}, "best_loss": best_loss, "seen": seen, "total": total})

    n_batches = -(-len(pairs) // cfg.batch_size)
    total_updates = cfg.epochs * n_batches
    for epoch in range(first_epoch, cfg.epochs + 1):
        epoch_start = generator.get_state()
        sampler = _Skip(torch.utils.data.RandomSampler(pairs, generator=generator), skip * cfg.batch_size)
        loader = DataLoader(pairs, batch_size=cfg.batch_size, sampler=sampler, generator=generator,
                            num_workers=cfg.num_workers, drop_last=False, pin_memory=device.type == "cuda")
        model.train()
        if not skip:
            seen, total = 0, 0.0
        done = skip
        skip = 0
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
                with _autocast(cfg.amp_bf16, device):
                    logits = model(xc)
                loss = criterion(logits.float(), yc) / denom
                loss.backward()
                batch_loss += loss.item()
            if cfg.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(trainable, cfg.max_grad_norm)
            set_learning_rates(optimizer, cfg, step, total_updates)
            optimizer.step()
            seen += len(xb)
            total += batch_loss * len(xb)
            done += 1
            step += 1
            bar.set_postfix(loss=f"{batch_loss:.4f}")
            if should_stop is not None and done < n_batches and should_stop():  # the last batch: see below
                if folder is not None:
                    checkpoint(epoch, done, epoch_start)

                raise Preempted(f"classifier training ({folder})", step, requested())
        train_loss = total / max(1, seen)
        model.eval()
        val_loss, val_auc = _val_scores(model, val_x, val_y, cfg)
        history["train_loss"].append(train_loss)
        history["val_loss"].append(val_loss)
        # Without validation data the "best" epoch is simply the last one. Mean AUC: the lowest -AUC, i.e. the
        # first epoch with the highest AUC (the official keeps an epoch only when strictly above the best).
        if cfg.select == "mean_auc":
            history["val_mean_auc"].append(val_auc)
            score = -val_auc
        else:
            score = val_loss if val_loss is not None else -float(epoch)
        if score < best_loss:
            best_loss = score
            history["best_epoch"] = epoch
            history["best_val_loss"] = val_loss
            if cfg.select == "mean_auc":
                history["best_val_mean_auc"] = val_auc
            best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        logger.info("classifier epoch %d: train loss %.5f, val loss %s%s", epoch, train_loss,
                    "n/a" if val_loss is None else f"{val_loss:.5f}",
                    "" if val_auc is None else f", val mean AUC {val_auc:.5f}")
        if on_epoch is not None:
            on_epoch(epoch, train_loss, val_loss)
        if folder is not None:
            checkpoint(epoch + 1, 0, generator.get_state())
        if should_stop is not None and should_stop() and epoch < cfg.epochs:
            raise Preempted(f"classifier training ({folder})", step, requested())
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return history


# Images per forward pass when predicting: a GPU wants many; on a CPU core a batch whose activations stay in the
# caches is faster (the tiny CNN at 112 px, one thread: 9 ms an image at 32, 14 ms at 256; the same probabilities
# bit for bit, benchmarks/RESULTS.md), and in eval mode each image's output depends on that image alone.
PREDICT_BATCH = {"cpu": 32, "accelerator": 256}


@torch.no_grad()
def predict_proba(model: nn.Module, x: torch.Tensor, batch_size: int | None = None,
                  amp_bf16: bool = False) -> np.ndarray:
    """Sigmoid probabilities [N, 14] (float64) in eval mode without gradients; restores the previous mode.
    batch_size: images per forward pass (None: PREDICT_BATCH for the model's device). amp_bf16: the forward under
    bf16 autocast, as a classifier trained with ClassifierConfig.amp_bf16 was validated."""
    was_training = model.training
    model.eval()
    device = _device_of(model)
    if batch_size is None:
        batch_size = PREDICT_BATCH["cpu" if device.type == "cpu" else "accelerator"]
    out = []
    try:
        for start in range(0, len(x), batch_size):
            with _autocast(amp_bf16, device):
                logits = model(x[start:start + batch_size].to(device))
            out.append(torch.sigmoid(logits.float()).cpu())
    finally:
        model.train(was_training)
    if not out:
        return np.zeros((0, NUM_OBSERVATIONS))
    return torch.cat(out).double().numpy()
