"""CheXbert labels through the ``f1chexbert`` package (the ``chexbert`` CE backend) and the ``chexbert_f1`` reward.

``label_reports_chexbert(reports)`` returns a float array ``[N, 14]`` in ``OBSERVATIONS`` order with the same
values as the rule labeler (``rewards/chexpert.py``): 1 = positive, 0 = negative, -1 = uncertain, nan = not
mentioned. ``binarize(labels, mode)`` turns such labels into 0/1 positives.

Where f1chexbert 0.0.2 looks for its files (read from its source; nothing here downloads anything):
- the CheXbert weights: ``<f1chexbert.f1chexbert.CACHE_DIR>/chexbert.pth``, where ``CACHE_DIR`` is
  ``appdirs.user_cache_dir("chexbert")``, i.e. ``$XDG_CACHE_HOME/chexbert`` or ``~/.cache/chexbert`` on Linux,
  fixed when f1chexbert is imported. The file is ``chexbert.pth`` of the Hub repository
  ``StanfordAIMI/RRG_scorers``: a ``torch.save`` of ``{"model_state_dict": ...}`` whose keys start with
  ``module.`` (the package strips that prefix). If the file is missing, the package would call
  ``hf_hub_download(..., force_filename="chexbert.pth")``; huggingface_hub 0.36 ignores ``force_filename`` and
  stores the file under ``CACHE_DIR/models--StanfordAIMI--RRG_scorers/snapshots/<rev>/chexbert.pth``, which the
  package never reads, so it fails either way (offline it only prints the error, then ``torch.load`` raises).
  This module therefore never lets the package try: it checks the file first and raises a FileNotFoundError
  that names the exact path.
- the tokenizer and the encoder's shape: ``BertTokenizer.from_pretrained("bert-base-uncased")`` (``vocab.txt``)
  and ``AutoConfig.from_pretrained("bert-base-uncased")`` (``config.json``) from the Hugging Face cache
  (``$HF_HUB_CACHE``, default ``$HF_HOME/hub`` = ``~/.cache/huggingface/hub``); the BERT weights themselves come
  only from ``chexbert.pth`` (the model is built with ``AutoModel.from_config``). Both files are checked with
  ``local_files_only=True`` before the package loads them.
- While the package loads, huggingface_hub / transformers are held to local files (``hub_offline``), so no
  request reaches the Hub even without ``HF_HUB_OFFLINE=1``.
- The package loads the state dict with ``strict=False``; this module checks afterwards that every parameter
  of the model was in the checkpoint, so a wrong file cannot give silently random labels.

Raw CheXbert outputs. The model has 14 heads in f1chexbert's order (``F1CHEXBERT_ORDER``: the 13 findings in
CheXpert order, then No Finding). Each of the first 13 heads has 4 classes: 0 = blank (not mentioned),
1 = positive, 2 = negative, 3 = uncertain; the No Finding head has 2: 0 = blank, 1 = positive. CheXbert's own
labeler (and f1chexbert's ``mode="classification"``) maps them to '', 1, 0, -1; here blank is nan and the
columns are reordered to ``OBSERVATIONS`` (No Finding first).

Binarisation (``binarize``):
- ``"paper"`` (default): only positive counts (1); negative, uncertain and not mentioned are 0. This is the
  REVA-PO / R2Gen CE protocol ("positive as 1; negative, uncertain, and not mentioned as 0") and what
  ``harness.scoring.evaluation.ce_scores`` does with any labels (``labels == 1``).
- ``"rrg"``: positive *or uncertain* counts (1), as f1chexbert's own default ``get_label(mode="rrg")``.
``label_reports_chexbert(..., mode="rrg")`` returns uncertain as 1 already (values 1/0/nan), so that code which
counts ``== 1`` (e.g. ``ce_scores``) gets the rrg protocol; ``mode="paper"`` returns the raw labels with -1 kept.
In both cases ``binarize(label_reports_chexbert(r, "paper"), m) == binarize(label_reports_chexbert(r, m))``.

Batching: f1chexbert's ``get_label`` runs one report at a time; here reports are tokenised by f1chexbert's own
``tokenize`` (whitespace normalisation, truncation to 512 word pieces), padded with the tokenizer's pad id and
masked with its ``generate_attention_masks``, as CheXbert's own batch labeler does. ``batch_size=1`` is exactly
``get_label``.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from harness.constants import NUM_OBSERVATIONS, OBSERVATIONS
from rewards import hf_compat
from rewards.hub_offline import hub_cache_dir, hub_offline
from rewards.registry import register_reward

__all__ = [
    "CHEXBERT_FILE",
    "CHEXBERT_HUB_REPO",
    "F1CHEXBERT_ORDER",
    "MODES",
    "TOKENIZER_REPO",
    "binarize",
    "chexbert_available",
    "chexbert_checkpoint_path",
    "chexbert_f1",
    "check_chexbert_files",
    "clear_cache",
    "label_reports_chexbert",
    "labels_from_classes",
    "per_sample_f1",
]

CHEXBERT_HUB_REPO = "StanfordAIMI/RRG_scorers"
CHEXBERT_FILE = "chexbert.pth"
TOKENIZER_REPO = "bert-base-uncased"
MODES = ("paper", "rrg")

# f1chexbert's `F1CheXbert.target_names` (the order of the model's heads).
F1CHEXBERT_ORDER: tuple[str, ...] = (
    "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema", "Consolidation",
    "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other", "Fracture",
    "Support Devices", "No Finding",
)
# Column j of the project's labels is head _HEAD_OF_COLUMN[j] of the model.
_HEAD_OF_COLUMN = np.array([F1CHEXBERT_ORDER.index(name) for name in OBSERVATIONS], dtype=np.int64)
# Class index -> label value. Findings heads: blank, positive, negative, uncertain. No Finding: blank, positive.
_FINDING_VALUES = np.array([np.nan, 1.0, 0.0, -1.0])
_NO_FINDING_VALUES = np.array([np.nan, 1.0])
_NO_FINDING_HEAD = F1CHEXBERT_ORDER.index("No Finding")

_MODELS: dict[str, object] = {}  # device -> loaded F1CheXbert (one per process and device)
_LOCK = threading.Lock()
_LABEL_CACHE: OrderedDict[str, np.ndarray] = OrderedDict()  # report text -> raw labels (reward path only)
_LABEL_CACHE_SIZE = 50_000


# --------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------
def chexbert_checkpoint_path() -> Path:
    """The exact file f1chexbert loads: ``<f1chexbert.f1chexbert.CACHE_DIR>/chexbert.pth``."""
    # lazy: start-up cost (f1chexbert)
    from f1chexbert import f1chexbert as package

    return Path(package.CACHE_DIR) / CHEXBERT_FILE


def _hub_cache_dir() -> str:
    return hub_cache_dir()


def _cached_hub_file(repo_id: str, filename: str, cache_dir: str | None = None) -> str | None:
    """Path of ``filename`` of ``repo_id`` in a Hugging Face cache, without any network access; None if absent."""
    # lazy: start-up cost (transformers)
    from transformers.utils.hub import cached_file

    try:
        return cached_file(repo_id, filename, cache_dir=cache_dir, local_files_only=True,
                           _raise_exceptions_for_missing_entries=False,
                           _raise_exceptions_for_connection_errors=False)
    except OSError:
        return None


def check_chexbert_files() -> Path:
    """Raise FileNotFoundError naming the missing file and where to put it; return the checkpoint path."""
    checkpoint = chexbert_checkpoint_path()
    if not checkpoint.is_file():
        hint = ""
        stray = _cached_hub_file(CHEXBERT_HUB_REPO, CHEXBERT_FILE, cache_dir=str(checkpoint.parent))
        if stray:
            hint = f" A copy was found at {stray} (where huggingface_hub put it); copy or link it to that path."
        raise FileNotFoundError(
            f"CheXbert weights not found: put '{CHEXBERT_FILE}' (file '{CHEXBERT_FILE}' of the Hugging Face "
            f"repository '{CHEXBERT_HUB_REPO}') at {checkpoint} . f1chexbert reads exactly that path "
            "(appdirs.user_cache_dir('chexbert'), i.e. $XDG_CACHE_HOME/chexbert or ~/.cache/chexbert); "
            "regbench never downloads it." + hint
        )
    missing = [name for name in ("config.json", "vocab.txt") if not _cached_hub_file(TOKENIZER_REPO, name)]
    if missing:
        raise FileNotFoundError(
            f"CheXbert needs the tokenizer and config of '{TOKENIZER_REPO}' in the Hugging Face cache "
            f"({_hub_cache_dir()}); missing: {', '.join(missing)}. Put them there, e.g. with "
            f"`huggingface-cli download {TOKENIZER_REPO} config.json vocab.txt tokenizer_config.json` on a "
            "machine with network access (HF_HOME / HF_HUB_CACHE choose the cache folder)."
        )
    return checkpoint


def chexbert_available() -> bool:
    """True if the CheXbert weights and tokenizer files are where f1chexbert reads them."""
    try:
        check_chexbert_files()
    except FileNotFoundError:
        return False
    return True


# --------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------
def _canonical_device(device) -> str:
    # lazy: start-up cost (torch)
    import torch

    return str(torch.device(device))


def _load(device: str):
    """The process-wide F1CheXbert on ``device``, loaded on first use through the package's own constructor."""
    key = _canonical_device(device)
    with _LOCK:
        if key in _MODELS:
            return _MODELS[key]
        checkpoint = check_chexbert_files()
        # lazy: start-up cost (f1chexbert)
        from f1chexbert import F1CheXbert


        hf_compat.install()  # f1chexbert calls encode_plus, gone in transformers 5.x

        with hub_offline():
            scorer = F1CheXbert(device=key)
        _check_checkpoint_matches(scorer.model, checkpoint)
        _MODELS[key] = scorer
        return scorer


def _check_checkpoint_matches(model, checkpoint: Path) -> None:
    """f1chexbert loads with strict=False: fail if any parameter of the model was not in the checkpoint."""
    # lazy: start-up cost (torch)
    import torch

    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:  # legacy (non-zip) serialisation cannot be memory-mapped
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    keys = {k.replace("module.", "") for k in state["model_state_dict"]}
    missing = sorted(set(dict(model.named_parameters())) - keys)
    if missing:
        raise RuntimeError(
            f"{checkpoint} does not hold CheXbert weights for this architecture: {len(missing)} parameters are "
            f"missing (e.g. {missing[:3]}); f1chexbert would leave them randomly initialised."
        )


def _raw_classes(scorer, reports: Sequence[str], batch_size: int) -> np.ndarray:
    """Argmax class of each of the 14 heads (f1chexbert order) for each report: int array [N, 14]."""
    # lazy: start-up cost (f1chexbert, pandas, torch)
    import pandas as pd
    import torch
    from f1chexbert.f1chexbert import generate_attention_masks, tokenize

    ids = tokenize(pd.Series([str(r) for r in reports], dtype=object), scorer.tokenizer)
    pad = scorer.tokenizer.pad_token_id or 0
    out = np.zeros((len(ids), len(F1CHEXBERT_ORDER)), dtype=np.int64)
    with torch.inference_mode():
        for start in range(0, len(ids), batch_size):
            chunk = ids[start:start + batch_size]
            lengths = [len(x) for x in chunk]
            batch = torch.full((len(chunk), max(lengths)), pad, dtype=torch.long)
            for i, x in enumerate(chunk):
                batch[i, : len(x)] = torch.tensor(x, dtype=torch.long)
            mask = generate_attention_masks(batch, lengths, scorer.device)
            logits = scorer.model(batch.to(scorer.device), mask)
            classes = torch.stack([head.argmax(dim=1) for head in logits], dim=1)
            out[start:start + len(chunk)] = classes.cpu().numpy()
    return out


def labels_from_classes(classes: np.ndarray) -> np.ndarray:
    """CheXbert head classes [N, 14] in f1chexbert order -> labels [N, 14] in OBSERVATIONS order (1/0/-1/nan)."""
    classes = np.asarray(classes, dtype=np.int64)
    if classes.ndim != 2 or classes.shape[1] != len(F1CHEXBERT_ORDER):
        raise ValueError(f"classes must have shape [N, {len(F1CHEXBERT_ORDER)}], got {classes.shape}")
    values = np.empty(classes.shape, dtype=np.float64)
    for head in range(classes.shape[1]):
        table = _NO_FINDING_VALUES if head == _NO_FINDING_HEAD else _FINDING_VALUES
        col = classes[:, head]
        if col.size and (col.min() < 0 or col.max() >= len(table)):
            raise ValueError(f"head {head} ({F1CHEXBERT_ORDER[head]}) has classes outside 0..{len(table) - 1}")
        values[:, head] = table[col]
    return values[:, _HEAD_OF_COLUMN]


def binarize(labels: np.ndarray, mode: str = "paper") -> np.ndarray:
    """Labels (1/0/-1/nan, [..., 14]) -> float 0/1 positives. ``paper``: 1 only; ``rrg``: 1 or -1."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    labels = np.asarray(labels, dtype=np.float64)
    positive = labels == 1.0
    if mode == "rrg":
        positive |= labels == -1.0
    return positive.astype(np.float64)


def _apply_mode(raw: np.ndarray, mode: str) -> np.ndarray:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return np.where(raw == -1.0, 1.0, raw) if mode == "rrg" else raw


def label_reports_chexbert(reports: Sequence[str], mode: str = "paper", device="cpu",
                           batch_size: int = 32) -> np.ndarray:
    """CheXbert labels ``[N, 14]`` in ``OBSERVATIONS`` order: 1 / 0 / -1 / nan (``mode="rrg"``: -1 becomes 1).

    Loads f1chexbert's model once per process and device; raises FileNotFoundError (never falls back to the
    rule labeler) when its files are missing.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    reports = list(reports)
    if not reports:
        return np.zeros((0, NUM_OBSERVATIONS), dtype=np.float64)
    scorer = _load(device)
    return _apply_mode(labels_from_classes(_raw_classes(scorer, reports, batch_size)), mode)


# --------------------------------------------------------------------------------------------------
# Reward
# --------------------------------------------------------------------------------------------------
def _default_device() -> str:
    # lazy: start-up cost (torch)
    import torch

    return os.environ.get("REGBENCH_CHEXBERT_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")


def _labels_cached(texts: list[str], device: str, batch_size: int) -> np.ndarray:
    """Raw labels of each text, labelling each distinct text once (references repeat across a GRPO group)."""
    known = {t: _LABEL_CACHE[t] for t in dict.fromkeys(texts) if t in _LABEL_CACHE}
    todo = [t for t in dict.fromkeys(texts) if t not in known]
    if todo:
        fresh = label_reports_chexbert(todo, mode="paper", device=device, batch_size=batch_size)
        known.update(zip(todo, fresh, strict=True))
    for text, row in known.items():
        _LABEL_CACHE[text] = row
        _LABEL_CACHE.move_to_end(text)
    while len(_LABEL_CACHE) > _LABEL_CACHE_SIZE:
        _LABEL_CACHE.popitem(last=False)
    return np.stack([known[t] for t in texts]) if texts else np.zeros((0, NUM_OBSERVATIONS))


def per_sample_f1(hyp: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per-row F1 of 0/1 arrays [N, 14]: 2 tp / (2 tp + fp + fn), 0 when neither has a positive
    (the convention of ``ce_example_f1`` in harness.scoring.evaluation)."""
    hyp = np.asarray(hyp) > 0.5
    ref = np.asarray(ref) > 0.5
    tp = (hyp & ref).sum(1)
    denom = hyp.sum(1) + ref.sum(1)
    out = np.zeros(hyp.shape[0], dtype=np.float64)
    np.divide(2.0 * tp, denom, out=out, where=denom > 0)
    return out


@register_reward("chexbert_f1")
def chexbert_f1(candidates: list[str], references: list[str], chexbert_mode: str = "paper",
                chexbert_device: str | None = None, chexbert_batch_size: int = 32, **_) -> np.ndarray:
    """Per-candidate F1 of CheXbert positives (14 observations, ``binarize(mode)``) against its reference."""
    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} references")
    if not candidates:
        return np.zeros(0)
    device = chexbert_device or _default_device()
    labels = _labels_cached(list(candidates) + list(references), device, chexbert_batch_size)
    n = len(candidates)
    return per_sample_f1(binarize(labels[:n], chexbert_mode), binarize(labels[n:], chexbert_mode))


chexbert_f1.scorers = ("chexbert",)  # weights it loads: preflight checks them first (rewards/spec.py reward_scorers)


def clear_cache() -> None:
    """Forget the loaded models and the per-text label cache (e.g. after replacing the weights)."""
    with _LOCK:
        _MODELS.clear()
        _LABEL_CACHE.clear()
