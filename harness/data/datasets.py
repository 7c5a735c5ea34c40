"""Loaders for R2Gen-format annotation files (IU-Xray, MIMIC-CXR, the phantom set) and their images.

``annotation.json`` is ``{"train" | "val" | "test": [{"id", "report", "image_path": [...]}, ...]}``.
REVA-PO's ``annotation_with_categories.json`` adds ``categories`` (positive CheXpert observations); the
phantom set adds ``labels`` (14 CheXpert values). Image paths are relative to ``image_dir``, which defaults
to ``<annotation folder>/images`` for the real data sets (R2Gen's layout) and to the annotation folder for
the phantom set (whose paths start with ``images/``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from harness.constants import NUM_OBSERVATIONS, OBSERVATIONS
from harness.data.cleaning import clean_report, cleaning_style, has_words
from harness.data.leaks import check_content_leak

DATASETS: tuple[str, ...] = ("iu_xray", "mimic_cxr", "phantom")
# Views used per study when `views` is None: every view for IU-Xray (1-5 per study; REVA-PO's official
# loader), the first for MIMIC-CXR (R2Gen's and the official loader) and the phantom set (one image per case).
DEFAULT_VIEWS: dict[str, int | None] = {"iu_xray": None, "mimic_cxr": 1, "phantom": 1}
_OBSERVATION_BY_NAME = {name.lower(): name for name in OBSERVATIONS}


@dataclass
class Sample:
    id: str
    report: str  # cleaned
    image_paths: list[Path]
    labels: np.ndarray | None = None  # float [14]: 1, 0, -1, nan for not mentioned
    categories: list[str] | None = None  # positive observation names, in OBSERVATIONS order
    present: np.ndarray | None = None  # int8 [14]: 1 where the phantom drew the observation (the image truth)


def load_annotation(
    path: str | Path,
    dataset: str,
    image_dir: str | Path | None = None,
    splits: Sequence[str] = ("train", "val", "test"),
    check_images: bool = True,
    views: int | None = None,
    allow_outside_image_dir: bool = False,
    cleaning: str = "r2gen",
    leak_check: str = "content",
) -> dict[str, list[Sample]]:
    """Read an annotation file into cleaned samples per split.

    `views`: at most this many views per study, the first ones in the file's order; None = the data set's
    default (`DEFAULT_VIEWS`: every view for IU-Xray). A study with fewer views keeps all it has (one at least).
    Image paths must stay inside `image_dir` (no absolute path, no `..`) unless `allow_outside_image_dir`: an
    annotation file copied from elsewhere must not make the program read arbitrary files.
    `cleaning`: the report cleaner family, "r2gen" or "reva_po" (harness/data/cleaning.py: cleaning_style).
    `leak_check`: "content" also refuses an image of one split with the same bytes as one of another split
    (harness/data/leaks.py); "path" compares paths and study ids only.
    Raises FileNotFoundError or ValueError naming the file (and the item id) on any bad input.
    """
    path = Path(path)
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r} for {path}; expected one of {DATASETS}")
    if views is not None and (isinstance(views, bool) or not isinstance(views, int) or views < 1):
        raise ValueError(f"views = {views!r} for {path}: must be a positive integer or None (every view)")
    if views is None:
        views = DEFAULT_VIEWS[dataset]
    style = cleaning_style(dataset, cleaning)
    if not path.is_file():
        raise FileNotFoundError(f"annotation file not found: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object of splits, got {type(data).__name__}")
    if image_dir is None:
        image_dir = path.parent if dataset == "phantom" else path.parent / "images"
    image_dir = Path(image_dir)
    out: dict[str, list[Sample]] = {}
    for split in splits:
        if split not in data:
            raise ValueError(f"{path}: split {split!r} requested but the file has {sorted(data)}")
        items = data[split]
        if not isinstance(items, list):
            raise ValueError(f"{path}: split {split!r} must be a list of items")
        out[split] = [_parse_item(item, path, style, image_dir, check_images, views, allow_outside_image_dir)
                      for item in items]
    check_no_leak(out, path)
    if leak_check == "content":

        check_content_leak(out, path)
    return out


def check_no_leak(splits: dict[str, list[Sample]], path: str | Path) -> None:
    """No study id and no image in two splits: a test or validation study that was also trained on scores what
    the model memorised. ValueError naming both places and the fix. (A duplicate within one split is left
    alone: it weighs a study twice but leaks nothing.)"""
    seen_id: dict[str, str] = {}
    seen_image: dict[str, tuple[str, str]] = {}
    for split, samples in splits.items():
        for s in samples:
            first = seen_id.setdefault(s.id, split)
            if first != split:
                raise ValueError(f"{path}: study {s.id!r} is in both the {first} and the {split} split (a leak: "
                                 "a study must be in one split only); remove it from one of them")
            for image in s.image_paths:
                key = str(Path(image).resolve())
                other = seen_image.setdefault(key, (split, s.id))
                if other[0] != split:
                    raise ValueError(f"{path}: image '{image}' is in both the {other[0]} split (study {other[1]!r}) "
                                     f"and the {split} split (study {s.id!r}) (a leak: an image must be in one split "
                                     "only); remove it from one of them")


def _parse_item(item: object, path: Path, style: str, image_dir: Path, check_images: bool,
                max_views: int | None, allow_outside: bool = False) -> Sample:
    if not isinstance(item, dict):
        raise ValueError(f"{path}: every item must be an object, got {type(item).__name__}")
    item_id = item.get("id")
    if item_id is None:
        raise ValueError(f"{path}: an item has no 'id' field (report starts {str(item.get('report'))[:40]!r})")
    where = f"{path}: item {item_id!r}"
    for key in ("report", "image_path"):
        if key not in item:
            raise ValueError(f"{where}: missing field {key!r}")
    if not isinstance(item["report"], str):
        raise ValueError(f"{where}: field 'report' must be a string")
    report = clean_report(item["report"], style)
    if not has_words(report):
        raise ValueError(f"{where}: report is empty after cleaning (no words in {item['report'][:40]!r})")
    views = item["image_path"]
    if isinstance(views, str):
        views = [views]
    if not isinstance(views, list) or not all(isinstance(v, str) for v in views):
        raise ValueError(f"{where}: field 'image_path' must be a list of paths")
    if not views:
        raise ValueError(f"{where}: field 'image_path' is empty (a study needs at least one view)")
    for v in views[:max_views]:
        # Confined to image_dir (lexically, so a data set whose folder holds symlinks to other disks still works):
        # an annotation file must not make the program read arbitrary files.
        if not allow_outside and (os.path.isabs(v) or os.path.normpath(v).split(os.sep)[0] == os.pardir):
            raise ValueError(f"{where}: image path {v!r} leaves the image folder {image_dir}; image paths must be "
                             "relative to data.image_dir (set data.image_dir to a folder that holds them, or "
                             "data.allow_outside_image_dir=true for an annotation file you trust)")
    image_paths = [image_dir / v for v in views[:max_views]]
    if check_images:
        for image_path in image_paths:
            if not image_path.is_file():
                raise FileNotFoundError(f"{where}: image file not found: {image_path}")
            check_image_header(image_path, where)
    labels = _parse_labels(item["labels"], where) if item.get("labels") is not None else None
    categories = _parse_categories(item["categories"], where) if item.get("categories") is not None else None
    present = _parse_present(item["present"], where) if item.get("present") is not None else None
    return Sample(str(item_id), report, image_paths, labels, categories, present)


def _parse_present(values: object, where: str) -> np.ndarray:
    """The phantom's image truth: 14 flags, 1 where drawn (harness/data/phantom/case.py: Case.present)."""
    if (not isinstance(values, list) or len(values) != NUM_OBSERVATIONS
            or any(v not in (0, 1) or isinstance(v, bool) for v in values)):
        raise ValueError(f"{where}: 'present' must be a list of {NUM_OBSERVATIONS} flags 0 or 1, got {values!r}")
    return np.array(values, dtype=np.int8)


def _parse_labels(values: object, where: str) -> np.ndarray:
    if not isinstance(values, list) or len(values) != NUM_OBSERVATIONS:
        raise ValueError(f"{where}: 'labels' must be a list of {NUM_OBSERVATIONS} values")
    out = np.full(NUM_OBSERVATIONS, np.nan)
    for index, value in enumerate(values):
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if value not in (1, 0, -1) or isinstance(value, bool):
            raise ValueError(f"{where}: 'labels' value {value!r} for {OBSERVATIONS[index]!r} is not 1, 0, -1 or null")
        out[index] = float(value)
    return out


def _parse_categories(values: object, where: str) -> list[str]:
    """A list of observation names (any case) or a 14-vector of 0/1 -> names in OBSERVATIONS order."""
    if not isinstance(values, list):
        raise ValueError(f"{where}: 'categories' must be a list")
    if len(values) == NUM_OBSERVATIONS and all(isinstance(v, int | float) and not isinstance(v, str) for v in values):
        if any(v not in (0, 1) for v in values):
            raise ValueError(f"{where}: 'categories' as a vector must hold only 0 and 1")
        return [name for name, flag in zip(OBSERVATIONS, values, strict=True) if flag]
    names = set()
    for value in values:
        name = _OBSERVATION_BY_NAME.get(str(value).strip().lower()) if isinstance(value, str) else None
        if name is None:
            raise ValueError(f"{where}: unknown category {value!r}; expected one of {OBSERVATIONS}")
        names.add(name)
    return [name for name in OBSERVATIONS if name in names]


def check_image_header(path: Path, where: str) -> None:
    """An image file whose header an image reader cannot read (empty, not an image): refused when the annotation is
    read, before any stage opens its run folder (issue 49). Only the header is read (PIL opens lazily), so the check
    costs a file open per image; a file cut short after its header still fails when it is decoded, in a run folder
    that stays resumable."""
    try:
        with Image.open(path) as image:
            image.size  # noqa: B018 (the header is parsed by open; size is what the decode will need)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:  # PIL's corrupt-file errors
        raise ValueError(f"{where}: {path}: not a readable image ({type(e).__name__}: {e}); replace the file or drop "
                         "its study from the annotation file") from e


def load_image(path: str | Path, size: int) -> Image.Image:
    """Open an image as RGB, pad it to a square with black (centred), resize it to size x size (bicubic)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image file not found: {path}")
    try:
        with Image.open(path) as raw:
            image = _to_rgb(raw)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:  # PIL's corrupt-file errors
        raise ValueError(f"{path}: not a readable image ({type(e).__name__}: {e}); replace the file or drop its "
                         "study from the annotation file") from e
    width, height = image.size
    side = max(width, height)
    if width != height:
        square = Image.new("RGB", (side, side), (0, 0, 0))
        square.paste(image, ((side - width) // 2, (side - height) // 2))
        image = square
    if side != size:
        image = image.resize((size, size), Image.Resampling.BICUBIC)
    return image


def _to_rgb(image: Image.Image) -> Image.Image:
    # 16-bit grayscale (some DICOM exports) would clip under a plain convert: rescale to 8 bits first.
    if image.mode in ("I", "I;16", "I;16B", "I;16L", "F"):
        values = np.asarray(image, dtype=np.float64)
        low, high = float(values.min()), float(values.max())
        scaled = (values - low) / (high - low) * 255.0 if high > low else np.zeros_like(values)
        image = Image.fromarray(np.round(scaled).astype(np.uint8), mode="L")
    return image.convert("RGB")


def load_views(sample: Sample, size: int) -> list[Image.Image]:
    """All views of a sample, each padded and resized to size x size."""
    return [load_image(p, size) for p in sample.image_paths]
