"""Synthetic chest X-ray data set ("phantom"): cases, drawings, reports, and the R2Gen-format writer.

A case is a set of present observations plus their attributes (side, severity, zone, devices). The image
is drawn from the case, the report is written from the case, so every sample carries ground truth.
Sides are the patient's: the patient's right is on the image's left, as on a real frontal radiograph.

Randomness: sample ``i`` of seed ``s`` uses ``SeedSequence([s, i])`` split into three generators (case,
report, image), so a sample does not depend on ``n``, on the image size, or on how the others were drawn.

Modules, from the bottom up: ``vocabulary`` (findings, attributes, their frequencies), ``config``
(``PhantomConfig``), ``case`` (``Case``, ``sample_case``), ``phrases`` + ``report`` (the report grammar),
``geometry`` + ``anatomy`` + ``draw_findings`` + ``render`` (the image), ``writer`` (the data set folder);
``phrasings`` + ``variation`` (the varied report language, ``report_variation`` low/high), ``gold_reader`` and
``gold_reader_v2`` (the gold readers: the grammar's own sentences; meaning).
"""

from harness.data.phantom.case import Case, sample_case
from harness.data.phantom.config import GENERATOR_VERSION, PhantomConfig
from harness.data.phantom.render import draw_image
from harness.data.phantom.report import Report, compose_report, write_report
from harness.data.phantom.vocabulary import (
    DEVICES,
    FINDINGS,
    FRACTURE_RIBS,
    GRADED,
    LATERAL,
    SEVERITIES,
    SIDES,
    ZONED,
    ZONES,
)
from harness.data.phantom.writer import (
    SPLITS,
    case_and_report,
    generate_item,
    split_counts,
    split_ranges,
    synthesize,
)

__all__ = [
    "DEVICES",
    "FINDINGS",
    "FRACTURE_RIBS",
    "GENERATOR_VERSION",
    "GRADED",
    "LATERAL",
    "SEVERITIES",
    "SIDES",
    "SPLITS",
    "ZONED",
    "ZONES",
    "Case",
    "PhantomConfig",
    "Report",
    "case_and_report",
    "compose_report",
    "draw_image",
    "generate_item",
    "sample_case",
    "split_counts",
    "split_ranges",
    "synthesize",
    "write_report",
]
