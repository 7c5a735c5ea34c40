"""RadGraph F1 through the ``radgraph`` package (radgraph / radgraph-xl; reward levels simple / partial / complete).

``radgraph_f1(hyps, refs)`` gives one score per pair (REVA-PO: radgraph-xl, partial); ``radgraph_scores(hyps,
refs)`` gives the corpus-level numbers of the package's ``F1RadGraph`` (the mean of the per-pair scores, for
all three levels from one pass). The ``radgraph_f1`` reward is the per-pair score (radgraph-xl, partial).

Where radgraph 0.1.18 looks for its files (read from its source):
- model directory: ``<radgraph.radgraph.CACHE_DIR>/<model_type>/`` with ``config.json`` (AllenNLP-style DyGIE
  config), ``vocabulary/`` (AllenNLP vocabulary: ``<model_type>__ner_labels.txt``,
  ``<model_type>__relation_labels.txt``, ``non_padded_namespaces.txt``) and ``weights.th`` (the DyGIE state
  dict, loaded with ``strict=True``). ``CACHE_DIR`` is ``appdirs.user_cache_dir("radgraph")/<version>``, i.e.
  ``~/.cache/radgraph/0.1.18`` (or ``$XDG_CACHE_HOME/radgraph/0.1.18``), fixed when radgraph is imported.
- If that directory is missing or empty the package downloads ``radgraph.tar.gz`` / ``radgraph-xl.tar.gz``
  from the Hub repository ``StanfordAIMI/RRG_scorers`` with ``hf_hub_download(cache_dir=CACHE_DIR)`` (so into
  ``CACHE_DIR/models--StanfordAIMI--RRG_scorers/snapshots/<rev>/``) and extracts it into the directory. This
  module never lets it download: when the directory is incomplete it extracts the archive itself if it is
  already in that cache (or in the default Hugging Face cache), and otherwise raises FileNotFoundError saying
  what to put where.
- the encoder: the ``model_name`` in ``config.json`` (a BERT-type Hub id) is read from the Hugging Face cache
  (``$HF_HUB_CACHE``, default ``~/.cache/huggingface/hub``) for its ``config.json`` and tokenizer files only;
  the encoder is built with ``AutoModel.from_config`` and its weights come from ``weights.th``. Both are
  checked with ``local_files_only=True`` before the package loads them, and while it loads, huggingface_hub /
  transformers are held to local files (``hub_offline``), so no request reaches the Hub even without
  ``HF_HUB_OFFLINE=1``.

Per-pair scores come from the package's own annotator (``F1RadGraph.radgraph``) and reward function
(``radgraph.rewards.compute_reward``), as ``F1RadGraph.forward`` computes them, but each distinct text is
annotated once and its annotation kept (references repeat across a GRPO group and across epochs). A pair whose
hypothesis or reference is empty (or only whitespace) scores 0, as in ``F1RadGraph``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tarfile
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rewards import hf_compat
from rewards.hub_offline import hub_cache_dir, hub_offline
from rewards.registry import register_reward

__all__ = [
    "MODEL_TYPES",
    "RADGRAPH_HUB_REPO",
    "REWARD_LEVELS",
    "check_radgraph_files",
    "clear_cache",
    "radgraph_available",
    "radgraph_f1",
    "radgraph_model_dir",
    "radgraph_reward",
    "radgraph_scores",
]

RADGRAPH_HUB_REPO = "StanfordAIMI/RRG_scorers"
MODEL_TYPES = ("radgraph", "radgraph-xl")
REWARD_LEVELS = ("simple", "partial", "complete", "all")
_LEVEL_INDEX = {"simple": 0, "partial": 1, "complete": 2}
_MODEL_FILES = ("config.json", "weights.th", "vocabulary")

_SCORERS: dict[tuple[str, str], object] = {}  # (model_type, device) -> F1RadGraph, one per process
_LOCK = threading.Lock()
_ANNOTATIONS: OrderedDict[tuple[str, str], dict] = OrderedDict()  # (model_type, text) -> annotation
_ANNOTATION_CACHE_SIZE = 50_000


# --------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------
def _check_model_type(model_type: str) -> None:
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {model_type!r}")


def _cache_dir() -> Path:
    # lazy: start-up cost (radgraph)
    from radgraph import radgraph as package

    return Path(package.CACHE_DIR)


def _archive_name(model_type: str) -> str:
    # lazy: start-up cost (radgraph)
    from radgraph import radgraph as package

    return package.MODEL_MAPPING[model_type]


def radgraph_model_dir(model_type: str = "radgraph-xl") -> Path:
    """The directory radgraph loads ``model_type`` from: ``<radgraph.radgraph.CACHE_DIR>/<model_type>``."""
    _check_model_type(model_type)
    return _cache_dir() / model_type


def _cached_archive(model_type: str) -> str | None:
    """The model archive if it is already in radgraph's hub cache or the default one (no network access)."""
    # lazy: start-up cost (huggingface_hub)
    from huggingface_hub import try_to_load_from_cache

    for cache_dir in (str(_cache_dir()), None):
        path = try_to_load_from_cache(RADGRAPH_HUB_REPO, _archive_name(model_type), cache_dir=cache_dir)
        if isinstance(path, str) and os.path.isfile(path):
            return path
    return None


def _extract(archive: str, model_dir: Path) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(path=model_dir, filter="data")
        else:  # pragma: no cover - Python without extraction filters
            tar.extractall(path=model_dir)


def _missing_model_files(model_dir: Path) -> list[str]:
    return [name for name in _MODEL_FILES if not (model_dir / name).exists()]


def _hub_file(repo_id: str, filename: str) -> str | None:
    # lazy: start-up cost (transformers)
    from transformers.utils.hub import cached_file

    try:
        return cached_file(repo_id, filename, local_files_only=True, _raise_exceptions_for_missing_entries=False,
                           _raise_exceptions_for_connection_errors=False)
    except OSError:
        return None


def _encoder_names(model_dir: Path) -> list[str]:
    config = json.loads((model_dir / "config.json").read_text())
    names = [config["dataset_reader"]["token_indexers"]["bert"]["model_name"],
             config["model"]["embedder"]["token_embedders"]["bert"]["model_name"]]
    return list(dict.fromkeys(names))


def check_radgraph_files(model_type: str = "radgraph-xl", extract: bool = True) -> Path:
    """Make sure radgraph can load ``model_type`` without any download; return its model directory.

    Extracts the model archive into the model directory when only the archive is cached; with
    ``extract=False`` (preflight: reads only) a cached archive counts as present, and the encoder named in its
    config is checked when the scorer loads and extracts it. Raises FileNotFoundError naming what is missing and
    where to put it.
    """
    model_dir = radgraph_model_dir(model_type)
    missing = _missing_model_files(model_dir)
    if missing and (not model_dir.exists() or not any(model_dir.iterdir())):
        archive = _cached_archive(model_type)
        if archive is not None:
            if not extract:
                return model_dir
            _extract(archive, model_dir)
            missing = _missing_model_files(model_dir)
    if missing:
        name = _archive_name(model_type)
        raise FileNotFoundError(
            f"RadGraph weights for '{model_type}' not found: {model_dir} lacks {', '.join(missing)}. Extract "
            f"'{name}' (file '{name}' of the Hugging Face repository '{RADGRAPH_HUB_REPO}') into {model_dir} so "
            f"that {model_dir}/config.json, {model_dir}/weights.th and {model_dir}/vocabulary/ exist, or put the "
            f"archive in the Hub cache at {_cache_dir()} (as `huggingface-cli download {RADGRAPH_HUB_REPO} {name} "
            f"--cache-dir {_cache_dir()}` does). radgraph reads {_cache_dir()} "
            "(appdirs.user_cache_dir('radgraph')/<version>); regbench never downloads it."
        )
    for encoder in _encoder_names(model_dir):
        lacking = [f for f in ("config.json",) if not _hub_file(encoder, f)]
        if not lacking:
            try:
                # lazy: start-up cost (transformers)
                from transformers import AutoTokenizer

                with hub_offline():
                    AutoTokenizer.from_pretrained(encoder, local_files_only=True)
            except (OSError, ValueError) as error:
                lacking = [f"a loadable tokenizer ({error.__class__.__name__}: {str(error)[:200]})"]
        if lacking:
            raise FileNotFoundError(
                f"RadGraph '{model_type}' needs the config and tokenizer of '{encoder}' (named in "
                f"{model_dir}/config.json) in the Hugging Face cache ({hub_cache_dir()}); missing: "
                f"{', '.join(lacking)}. Put them there, e.g. `huggingface-cli download {encoder} config.json "
                "vocab.txt tokenizer_config.json` on a machine with network access (HF_HOME / HF_HUB_CACHE "
                "choose the cache folder); its weights are not needed."
            )
    return model_dir


def radgraph_available(model_type: str = "radgraph-xl") -> bool:
    """True if radgraph can load ``model_type`` from local files (extracting a cached archive if needed)."""
    try:
        check_radgraph_files(model_type)
    except FileNotFoundError:
        return False
    return True


# --------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------
def _resolve_device(device) -> str:
    # lazy: start-up cost (torch)
    import torch

    if device is None:
        device = os.environ.get("REGBENCH_RADGRAPH_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda:{device.index or 0}"
    if device.type != "cpu":
        raise ValueError(f"radgraph runs on cpu or cuda, not {device}")
    return "cpu"


def _load(model_type: str, device: str):
    """The process-wide ``F1RadGraph`` for ``model_type`` on ``device``, built by the package's constructor."""
    key = (model_type, device)
    with _LOCK:
        if key in _SCORERS:
            return _SCORERS[key]
        check_radgraph_files(model_type)
        # lazy: start-up cost (radgraph)
        from radgraph import F1RadGraph


        hf_compat.install()  # radgraph calls encode_plus, gone in transformers 5.x

        cuda = -1 if device == "cpu" else int(device.split(":")[1])
        with hub_offline(), contextlib.redirect_stdout(io.StringIO()):  # it prints "Using device: ..."
            scorer = F1RadGraph(reward_level="all", model_type=model_type, cuda=cuda,
                                model_cache_dir=str(_cache_dir()))
        _SCORERS[key] = scorer
        return scorer


def clear_cache() -> None:
    """Forget the loaded models and the kept annotations (e.g. after replacing the weights)."""
    with _LOCK:
        _SCORERS.clear()
        _ANNOTATIONS.clear()


def _normalise(texts: Sequence[str]) -> list[str]:
    return ["" if not str(t).strip() else str(t) for t in texts]


def _annotate(scorer, model_type: str, texts: list[str]) -> list[dict]:
    """Annotations of non-empty texts, each distinct text run through the package's RadGraph once."""
    known = {t: _ANNOTATIONS[(model_type, t)] for t in dict.fromkeys(texts) if (model_type, t) in _ANNOTATIONS}
    todo = [t for t in dict.fromkeys(texts) if t not in known]
    if todo:
        inference = scorer.radgraph(todo)
        known.update((text, inference[str(i)]) for i, text in enumerate(todo))
    for text, annotation in known.items():
        _ANNOTATIONS[(model_type, text)] = annotation
        _ANNOTATIONS.move_to_end((model_type, text))
    while len(_ANNOTATIONS) > _ANNOTATION_CACHE_SIZE:
        _ANNOTATIONS.popitem(last=False)
    return [known[t] for t in texts]


def _check_pairs(hyps: Sequence[str], refs: Sequence[str], model_type: str) -> None:
    _check_model_type(model_type)
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")


def radgraph_f1(hyps: Sequence[str], refs: Sequence[str], model_type: str = "radgraph-xl",
                reward_level: str = "partial", device=None) -> np.ndarray:
    """Per-pair RadGraph F1 ``[N]`` (``reward_level="all"``: ``[N, 3]``, columns simple, partial, complete).

    Raises FileNotFoundError when the model's files are missing; never substitutes another score.
    """
    _check_pairs(hyps, refs, model_type)
    if reward_level not in REWARD_LEVELS:
        raise ValueError(f"reward_level must be one of {REWARD_LEVELS}, got {reward_level!r}")
    hyps, refs = _normalise(hyps), _normalise(refs)
    n = len(hyps)
    scores = np.zeros((n, 3), dtype=np.float64)
    if n:
        # lazy: start-up cost (radgraph)
        from radgraph.rewards import compute_reward

        scorer = _load(model_type, _resolve_device(device))
        pairs = [i for i in range(n) if hyps[i] and refs[i]]
        annotations = _annotate(scorer, model_type, [hyps[i] for i in pairs] + [refs[i] for i in pairs])
        for k, i in enumerate(pairs):
            scores[i] = compute_reward(annotations[k], annotations[len(pairs) + k], "all")
    return scores if reward_level == "all" else scores[:, _LEVEL_INDEX[reward_level]].copy()


def radgraph_scores(hyps: Sequence[str], refs: Sequence[str], model_type: str = "radgraph-xl",
                    device=None) -> dict:
    """Corpus-level RadGraph F1 from the package's ``F1RadGraph`` (mean over pairs), all three levels.

    Returns ``{"radgraph_simple", "radgraph_partial", "radgraph_complete", "radgraph_num_examples",
    "radgraph_model_type"}``.
    """
    _check_pairs(hyps, refs, model_type)
    if not hyps:
        raise ValueError("radgraph_scores needs at least one pair")
    scorer = _load(model_type, _resolve_device(device))
    mean, _, _, _ = scorer(refs=_normalise(refs), hyps=_normalise(hyps))
    return {
        "radgraph_simple": float(mean[0]),
        "radgraph_partial": float(mean[1]),
        "radgraph_complete": float(mean[2]),
        "radgraph_num_examples": len(hyps),
        "radgraph_model_type": model_type,
    }


@register_reward("radgraph_f1")
def radgraph_reward(candidates: list[str], references: list[str], radgraph_model_type: str = "radgraph-xl",
                    radgraph_reward_level: str = "partial", radgraph_device: str | None = None, **_) -> np.ndarray:
    """Per-candidate RadGraph F1 against its reference (REVA-PO: radgraph-xl, partial)."""
    if radgraph_reward_level == "all":
        raise ValueError("the radgraph_f1 reward needs one reward level: simple, partial or complete")
    return radgraph_f1(candidates, references, model_type=radgraph_model_type,
                       reward_level=radgraph_reward_level, device=radgraph_device)


# The weights it loads, for preflight (rewards/spec.py reward_scorers): the trainer and the validation pass no
# radgraph_model_type, so the reward is always radgraph-xl's.
radgraph_reward.scorers = ("radgraph-xl",)
