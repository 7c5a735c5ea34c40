"""Writing the phantom set: per-sample generators, one annotation item + image each, the R2Gen-format folder."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from harness.constants import OBSERVATIONS
from harness.data.phantom.case import Case, sample_case
from harness.data.phantom.config import PhantomConfig
from harness.data.phantom.render import draw_image
from harness.data.phantom.report import Report, compose_report
from harness.runs.records import atomic_write_bytes


def split_counts(n: int, fractions: tuple[float, float, float]) -> tuple[int, int, int]:
    """Train/val/test sizes: val and test rounded from their fractions, train takes the rest."""
    val, test = round(n * fractions[1]), round(n * fractions[2])
    return n - val - test, val, test


SPLITS = ("train", "val", "test")


def split_ranges(n: int, fractions: tuple[float, float, float]) -> dict[str, range]:
    """{split: the study indices it holds}: train, then val, then test, as `synthesize` draws them."""
    counts = split_counts(n, fractions)
    starts = np.concatenate([[0], np.cumsum(counts)])
    return {name: range(int(starts[i]), int(starts[i + 1])) for i, name in enumerate(SPLITS)}


def _sample_generators(seed: int, index: int) -> list[np.random.Generator]:
    return [np.random.default_rng(s) for s in np.random.SeedSequence([seed, index]).spawn(3)]


def case_and_report(cfg: PhantomConfig, index: int) -> tuple[Case, Report]:
    """Case and report of sample ``index``, without drawing its image (the same as ``generate_item``'s)."""
    case_rng, report_rng, _ = _sample_generators(cfg.seed, index)
    case = sample_case(case_rng, cfg)
    return case, compose_report(case, report_rng, cfg)


def generate_item(cfg: PhantomConfig, index: int) -> tuple[dict, np.ndarray]:
    """Annotation item and image for sample ``index`` (independent of ``cfg.n``)."""
    case, report = case_and_report(cfg, index)
    image_rng = _sample_generators(cfg.seed, index)[2]
    present = case.present
    item_id = f"{cfg.id_prefix}_{index:05d}"
    item = {
        "id": item_id,
        "report": report.text,
        "image_path": [f"images/{item_id}.png"],
        "labels": report.labels,
        "categories": [name for name, flag in zip(OBSERVATIONS, present, strict=True) if flag],
        "present": [int(v) for v in present],
        "attributes": case.attributes(),
    }
    return item, draw_image(case, image_rng, cfg.image_size)


def _png_bytes(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image, mode="L").save(buffer, format="PNG", compress_level=6, optimize=False)
    return buffer.getvalue()


def synthesize(out_dir: str | os.PathLike, cfg: PhantomConfig | None = None,
               splits: tuple[str, ...] = SPLITS) -> Path:
    """Write ``out_dir/annotation.json`` (R2Gen format) and ``out_dir/images/<id>.png``; return the json path.

    `splits`: the splits to draw (the others are written empty). A study depends only on its seed and index, so a
    set drawn with ``splits=("test",)`` holds exactly the test studies of the full set (same items, same image
    bytes) and costs only them: a 4,000-report test split of a 20,000-study set draws 4,000 studies, not 20,000.
    Byte-identical for the same config on the same platform. The annotation is written last and atomically,
    so a present annotation.json always describes a complete set of images.
    """
    cfg = cfg or PhantomConfig()
    unknown = [name for name in splits if name not in SPLITS]
    if unknown or not splits:
        raise ValueError(f"synthesize: splits must be a non-empty subset of {SPLITS}, got {splits!r}")
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    ranges = split_ranges(cfg.n, cfg.split_fractions)
    drawn: dict[str, list[dict]] = {name: [] for name in SPLITS}
    indices = [(name, index) for name in SPLITS if name in splits for index in ranges[name]]
    bar = tqdm(indices, desc="phantom", unit="img", disable=not sys.stderr.isatty())
    for name, index in bar:
        item, image = generate_item(cfg, index)
        atomic_write_bytes(out / item["image_path"][0], _png_bytes(image))
        drawn[name].append(item)
    path = out / "annotation.json"
    atomic_write_bytes(path, (json.dumps(drawn, sort_keys=True, indent=2) + "\n").encode("utf-8"))
    return path
