"""Data: report cleaning, the synthetic phantom generator, and the R2Gen / REVA-PO annotation loaders."""

from harness.data.cleaning import clean_report
from harness.data.datasets import Sample, load_annotation, load_image, load_views
from harness.data.phantom import Case, PhantomConfig, draw_image, sample_case, synthesize, write_report

__all__ = [
    "Case",
    "PhantomConfig",
    "Sample",
    "clean_report",
    "draw_image",
    "load_annotation",
    "load_image",
    "load_views",
    "sample_case",
    "synthesize",
    "write_report",
]
