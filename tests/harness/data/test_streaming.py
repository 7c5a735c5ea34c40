"""Images decoded on demand (harness/data/streaming.py): the same pixels as decoding everything up front,
without holding them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from harness.data import streaming
from harness.data.datasets import Sample, load_views
from harness.data.streaming import ClassifierImages, LazyViews


@pytest.fixture
def samples(tmp_path):
    rng = np.random.default_rng(1)
    out = []
    for i in range(5):
        paths = []
        for v in range(1 + i % 2):  # one or two views, of different shapes (padded to square on load)
            path = tmp_path / f"s{i}_{v}.png"
            Image.fromarray(rng.integers(0, 255, (40 + 7 * i, 33 + 5 * v), dtype=np.uint8)).save(path)
            paths.append(path)
        out.append(Sample(f"s{i}", "the heart is normal .", paths))
    return out


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.size == y.size and np.array_equal(np.asarray(x), np.asarray(y))


def test_lazy_views_decode_on_access_only(samples, monkeypatch):
    calls = []
    real = streaming.load_views
    monkeypatch.setattr(streaming, "load_views", lambda s, size: calls.append(s.id) or real(s, size))
    views = LazyViews(samples, 24)
    assert calls == [] and len(views) == 5
    _same(views[3], load_views(samples[3], 24))
    assert calls == ["s3"]
    part = views[1:4]
    assert calls == ["s3", "s1", "s2", "s3"] and len(part) == 3
    for got, s in zip(views, samples, strict=True):  # iteration decodes one at a time, every time
        _same(got, load_views(s, 24))
    assert len(calls) == 9


def test_lazy_views_join_with_decoded_entries(samples):
    views = LazyViews(samples[:2], 24)
    extra = [load_views(samples[4], 24)]
    joined = views + extra + LazyViews(samples[2:3], 24)
    assert len(joined) == 4
    _same(joined[2], extra[0])
    _same(joined[3], load_views(samples[2], 24))
    with pytest.raises(ValueError, match="24 px and 32 px"):
        views + LazyViews(samples, 32)


def test_classifier_images_equal_the_preprocessed_first_views(samples):
    from harness.models.classifier import preprocess

    data = ClassifierImages(samples, 32)
    whole = preprocess([load_views(s, 32)[0] for s in samples], 32)
    assert torch.equal(data[0:5], whole) and torch.equal(data[2], whole[2])
    cxr = ClassifierImages(samples, 32, "cxr")
    assert torch.equal(cxr[0:5], preprocess([load_views(s, 32)[0] for s in samples], 32, normalization="cxr"))
    assert not torch.equal(cxr[0:5], whole)


def test_classifier_trains_the_same_from_a_stream_as_from_a_tensor(samples):
    from harness.models.classifier import ClassifierConfig, build_classifier, preprocess, train_classifier

    cfg = ClassifierConfig.preset("tiny", img_size=32, epochs=2, batch_size=2, lr=1e-3, seed=5)
    y = torch.tensor(np.eye(14)[[0, 1, 2, 1, 0]], dtype=torch.float32)
    tensor = preprocess([load_views(s, 32)[0] for s in samples], 32)
    states = []
    for x in (tensor, ClassifierImages(samples, 32)):
        model = build_classifier(cfg)
        train_classifier(model, x, y, x, y, cfg, progress=False)
        states.append(model.state_dict())
    for key in states[0]:
        assert torch.equal(states[0][key], states[1][key]), key


def test_the_pixel_cache_gives_the_same_pixels_and_decodes_each_image_once(samples, tmp_path, monkeypatch):
    """issue 27: with cache_dir the epochs after the first read the decoded uint8 pixels back from a memory-mapped
    file: the same images (and so the same classifier tensors), one decode per image, a cache that survives
    pickling (DataLoader workers, forked or spawned, map the same file)."""
    import pickle

    calls = []
    real = streaming.load_image
    monkeypatch.setattr(streaming, "load_image", lambda p, size: calls.append(p) or real(p, size))
    plain = LazyViews(samples, 24)
    cached = LazyViews(samples, 24, cache_dir=tmp_path / "pixels")
    calls.clear()
    for _ in range(3):  # three epochs
        for i in range(len(samples)):
            _same(cached[i], load_views(samples[i], 24))
    assert len(calls) == sum(len(s.image_paths) for s in samples)  # each view decoded once
    again = pickle.loads(pickle.dumps(cached))
    assert again.cache._pixels is None
    _same(again[3], plain[3])
    assert len(calls) == sum(len(s.image_paths) for s in samples)  # read back from the file, not decoded
    joined = cached + [plain[0]]
    _same(joined[len(samples)], plain[0])
    files = list((tmp_path / "pixels").glob("pixels-24-*.u8"))
    assert len(files) == 1
    assert files[0] == cached.cache.path and files[0].stat().st_size == len(cached.cache.slots) * (24 * 24 * 3 + 1)
    first = ClassifierImages(samples, 20, cache_dir=tmp_path / "clf")
    want = ClassifierImages(samples, 20)[:]
    assert torch.equal(first[:], want) and torch.equal(first[:], want) and torch.equal(first[2], want[2])
    other = ClassifierImages(samples[:2], 20, cache_dir=tmp_path / "clf")  # another set, same folder: its own file
    assert other.cache.path != first.cache.path and torch.equal(other[:], want[:2])


def test_a_second_process_that_found_no_cache_file_keeps_the_one_just_created(samples, tmp_path, monkeypatch):
    """Two evaluations of one test split open its pixel cache at the same moment: the one that looked before the
    other created the file must not truncate it (that would zero the other's images under its mapping)."""
    from pathlib import Path

    from harness.data.pixel_cache import PixelCache

    first = LazyViews(samples, 24, cache_dir=tmp_path / "pixels")
    want = first[1]  # decoded and written through the first process's mapping
    path = first.cache.path
    real_is_file = Path.is_file
    looked = []

    def saw_no_file(self):  # the second process looked before the file existed
        if self == path and not looked:
            looked.append(self)
            return False
        return real_is_file(self)

    monkeypatch.setattr(Path, "is_file", saw_no_file)
    second = PixelCache(tmp_path / "pixels", 24, [p for s in samples for p in s.image_paths])
    assert looked and second.path == path
    second._open()
    assert all(second._ready[second.slots[str(p)]] for p in samples[1].image_paths)  # still there
    _same(first[1], want)
    assert not list(path.parent.glob(".*.tmp"))
    # a stale file of another layout (other image size or list under the same name) is replaced, not reused
    path.write_bytes(b"x")
    PixelCache(tmp_path / "pixels", 24, [p for s in samples for p in s.image_paths])
    assert path.stat().st_size == len(first.cache.slots) * (24 * 24 * 3 + 1)
