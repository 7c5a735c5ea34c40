"""Writing the phantom set: per-sample generators, one annotation item + image each, the R2Gen-format folder."""

from __future__ import annotations

import dataclasses
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
from harness.runs import preemption
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


def _annotation_item(cfg: PhantomConfig, index: int, case: Case, report: Report) -> dict:
    item_id = f"{cfg.id_prefix}_{index:05d}"
    present = case.present
    return {
        "id": item_id,
        "report": report.text,
        "image_path": [f"images/{item_id}.png"],
        "labels": report.labels,
        "categories": [name for name, flag in zip(OBSERVATIONS, present, strict=True) if flag],
        "present": [int(v) for v in present],
        "attributes": case.attributes(),
    }


def generate_item(cfg: PhantomConfig, index: int) -> tuple[dict, np.ndarray]:
    """Annotation item and image for sample ``index`` (independent of ``cfg.n``)."""
    case, report = case_and_report(cfg, index)
    image_rng = _sample_generators(cfg.seed, index)[2]
    return _annotation_item(cfg, index, case, report), draw_image(case, image_rng, cfg.image_size)


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
    keep = _start_partial(out, cfg)
    ranges = split_ranges(cfg.n, cfg.split_fractions)
    drawn: dict[str, list[dict]] = {name: [] for name in SPLITS}
    indices = [(name, index) for name in SPLITS if name in splits for index in ranges[name]]
    bar = tqdm(indices, desc="phantom", unit="img", disable=not sys.stderr.isatty())
    for n_done, (name, index) in enumerate(bar):
        # A safe point: every image so far is whole on disk, and the partial marker lets a rerun keep them.
        preemption.check(f"data synth {out}", f"{n_done} of {len(indices)} images kept for the rerun")
        drawn[name].append(_draw_one(out, cfg, index, keep))
    path = out / "annotation.json"
    atomic_write_bytes(path, (json.dumps(drawn, sort_keys=True, indent=2) + "\n").encode("utf-8"))
    (out / PARTIAL).unlink(missing_ok=True)
    return path


# Beside the images of a synthesis that has not written its annotation yet: its config. A rerun with the same
# config keeps those images (each was written whole, with a rename) instead of drawing them again.
PARTIAL = "synth.partial.json"


def _start_partial(out: Path, cfg: PhantomConfig) -> bool:
    """Mark `out` as being synthesized with `cfg`; whether its images are an earlier try's with the same cfg."""
    fields = dataclasses.asdict(cfg)
    if fields["report_variation"] == "none":  # the marker of a plain set as before the field existed
        del fields["report_variation"]
    want = json.dumps(fields, sort_keys=True)
    marker = out / PARTIAL
    same = marker.is_file() and marker.read_text(encoding="utf-8") == want
    if not same:
        atomic_write_bytes(marker, want.encode("utf-8"))
    return same


def _draw_one(out: Path, cfg: PhantomConfig, index: int, keep: bool) -> dict:
    """Sample `index`'s annotation item, its image written unless an interrupted try with this cfg wrote it."""
    case, report = case_and_report(cfg, index)
    item = _annotation_item(cfg, index, case, report)
    image_path = out / item["image_path"][0]
    if not (keep and image_path.is_file()):
        image = draw_image(case, _sample_generators(cfg.seed, index)[2], cfg.image_size)
        atomic_write_bytes(image_path, _png_bytes(image))
    return item
