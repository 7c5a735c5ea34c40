"""Images decoded on demand: memory independent of the data set's size (issue 14).

A stage used to decode every training image into RAM before its first step (MIMIC-CXR: ~92 GB per process at
336 px). Here a data set holds only the samples' paths; an image is opened, padded and resized
(harness/data/datasets.py load_image) when a batch asks for it and dropped with the batch. Both classes are
torch Datasets, so a DataLoader with workers can decode ahead of the model (and pin the classifier's tensors
for the GPU).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Dataset

from harness.data.datasets import Sample, load_image, load_views
from harness.data.pixel_cache import PixelCache
from harness.models.classifier import preprocess


def _paths(items: Sequence) -> list:
    return [p for item in items if isinstance(item, Sample) for p in item.image_paths]


class LazyViews(Dataset):
    """Per sample, its list of PIL views (size x size), decoded on every access and never cached.

    Indexing by an int gives one sample's views, by a slice a list of them, so code written for a list of
    decoded views (stages, the RL prompt sets, decoding) works unchanged. An entry may also be an already
    decoded list of views (kept as it is), e.g. the extra copies a stage-0 data mix appends with `+`.
    `cache_dir`: keep the decoded pixels in a uint8 file there (harness/data/pixel_cache.py), so an image is
    decoded once, not once per epoch; the same pixels either way.
    """

    def __init__(self, items: Sequence, size: int, cache_dir: str | None = None, cache: PixelCache | None = None):
        self.items, self.size = list(items), size
        self.cache = cache or (PixelCache(cache_dir, size, _paths(self.items)) if cache_dir else None)

    def _load(self, item: Sample) -> list:
        if self.cache is None:
            return load_views(item, self.size)
        return [self.cache.get(p, lambda q: load_image(q, self.size)) for p in item.image_paths]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        item = self.items[i]
        return self._load(item) if isinstance(item, Sample) else item

    def __iter__(self) -> Iterator[list]:
        return (self[i] for i in range(len(self)))

    def view_count(self, i: int) -> int:
        """How many views sample i has, without decoding them."""
        item = self.items[i]
        return len(item.image_paths) if isinstance(item, Sample) else len(item)

    def __add__(self, other) -> LazyViews:
        if isinstance(other, LazyViews):
            if other.size != self.size:
                raise ValueError(f"cannot join images of {self.size} px and {other.size} px")
            return LazyViews(self.items + other.items, self.size)
        return LazyViews(self.items + list(other), self.size, cache=self.cache)  # decoded entries need no slot


class ClassifierImages(Dataset):
    """The classifier's input, one preprocessed [3, H, W] tensor per study (its first view), decoded on demand.

    An int gives one tensor, a slice a stacked [n, 3, H, W] batch (what the evaluation loops slice). `cache_dir`:
    the decoded pixels are kept there (as in LazyViews), so the epochs after the first do not decode again."""

    def __init__(self, samples: Sequence[Sample], size: int, normalization: str = "imagenet",
                 cache_dir: str | None = None):
        self.samples, self.size, self.normalization = list(samples), size, normalization
        self.cache = PixelCache(cache_dir, size, _paths(self.samples)) if cache_dir else None

    def _image(self, sample: Sample):
        path = sample.image_paths[0]
        if self.cache is None:
            return load_image(path, self.size)
        return self.cache.get(path, lambda q: load_image(q, self.size))

    def __len__(self) -> int:
        return len(self.samples)

    def _batch(self, samples: Sequence[Sample]) -> torch.Tensor:
        return preprocess([self._image(s) for s in samples], self.size,
                          normalization=self.normalization)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self._batch(self.samples[i])
        return self._batch([self.samples[i]])[0]
