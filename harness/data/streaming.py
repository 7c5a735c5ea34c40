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


class LazyViews(Dataset):
    """Per sample, its list of PIL views (size x size), decoded on every access and never cached.

    Indexing by an int gives one sample's views, by a slice a list of them, so code written for a list of
    decoded views (stages, the RL prompt sets, decoding) works unchanged. An entry may also be an already
    decoded list of views (kept as it is), e.g. the extra copies a stage-0 data mix appends with `+`.
    """

    def __init__(self, items: Sequence, size: int):
        self.items, self.size = list(items), size

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        item = self.items[i]
        return load_views(item, self.size) if isinstance(item, Sample) else item

    def __iter__(self) -> Iterator[list]:
        return (self[i] for i in range(len(self)))

    def __add__(self, other) -> LazyViews:
        if isinstance(other, LazyViews):
            if other.size != self.size:
                raise ValueError(f"cannot join images of {self.size} px and {other.size} px")
            return LazyViews(self.items + other.items, self.size)
        return LazyViews(self.items + list(other), self.size)


class ClassifierImages(Dataset):
    """The classifier's input, one preprocessed [3, H, W] tensor per study (its first view), decoded on demand.

    An int gives one tensor, a slice a stacked [n, 3, H, W] batch (what the evaluation loops slice)."""

    def __init__(self, samples: Sequence[Sample], size: int, normalization: str = "imagenet"):
        self.samples, self.size, self.normalization = list(samples), size, normalization

    def __len__(self) -> int:
        return len(self.samples)

    def _batch(self, samples: Sequence[Sample]) -> torch.Tensor:
        from harness.models.classifier import preprocess

        return preprocess([load_image(s.image_paths[0], self.size) for s in samples], self.size,
                          normalization=self.normalization)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self._batch(self.samples[i])
        return self._batch([self.samples[i]])[0]
