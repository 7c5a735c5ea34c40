"""harness/stages/common.py: the training subset (REVA-PO's RL subset: >= 30 tokens, 10k at random)."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from harness.config import ConfigError, DataConfig, load_config
from harness.data.datasets import Sample
from harness.stages.common import load_splits, select_train


def _samples(lengths: list[int]) -> list[Sample]:
    return [Sample(id=f"s{i}", report=" ".join(["word"] * n), image_paths=[]) for i, n in enumerate(lengths)]


def test_min_tokens_drops_short_reports_and_keeps_order():
    samples = _samples([3, 30, 29, 31, 0, 30])
    kept = select_train(samples, DataConfig(train_min_tokens=30), "ann.json")
    assert [s.id for s in kept] == ["s1", "s3", "s5"]


def test_first_and_random_subsets():
    samples = _samples([5] * 50)
    assert [s.id for s in select_train(samples, DataConfig(max_train=3), "a")] == ["s0", "s1", "s2"]
    d = DataConfig(max_train=10, train_subset="random", train_subset_seed=4)
    drawn = select_train(samples, d, "a")
    ids = [int(s.id[1:]) for s in drawn]
    assert len(ids) == 10 and ids == sorted(ids) and ids != list(range(10))  # data order, not the first 10
    assert select_train(samples, d, "a") == drawn  # the seed fixes the subset
    assert select_train(samples, DataConfig(max_train=10, train_subset="random", train_subset_seed=5), "a") != drawn
    assert select_train(samples, DataConfig(max_train=80, train_subset="random"), "a") == samples


def test_filter_then_sample():
    samples = _samples([40, 10] * 20)  # the 20 long reports are s0, s2, ..., s38
    drawn = select_train(samples, DataConfig(max_train=5, train_min_tokens=30, train_subset="random"), "a")
    assert len(drawn) == 5 and all(int(s.id[1:]) % 2 == 0 for s in drawn)


def test_no_report_long_enough_names_the_file_and_field():
    with pytest.raises(ValueError, match=r"ann\.json: no training report has >= 99 tokens \(data.train_min_tokens\)"):
        select_train(_samples([3, 4]), DataConfig(train_min_tokens=99), "ann.json")


@pytest.mark.parametrize(("override", "message"), [
    ("data.train_subset=shuffled", "data.train_subset"), ("data.train_min_tokens=0", "data.train_min_tokens"),
    ("data.max_train=0", "data.max_train"),
])
def test_bad_subset_settings_are_config_errors(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_load_splits_applies_the_subset_to_train_only(tmp_path):
    reports = {"train": [40, 10, 40, 40], "val": [10, 10], "test": [10]}
    ann = {split: [{"id": f"{split}{i}", "report": " ".join(["w"] * n), "image_path": [f"{split}{i}.png"],
                    "split": split} for i, n in enumerate(lengths)] for split, lengths in reports.items()}
    (tmp_path / "annotation.json").write_text(json.dumps(ann))
    items = [item for split_items in ann.values() for item in split_items]
    for k, item in enumerate(items):  # the loader reads each image's header; distinct bytes (no content leak)
        Image.new("L", (8, 8), 10 * k).save(tmp_path / item["image_path"][0])
    cfg = load_config(None, ["data.dataset=mimic_cxr", f"data.annotation={tmp_path / 'annotation.json'}",
                             f"data.image_dir={tmp_path}", "data.train_min_tokens=30", "data.max_train=2"])
    splits = load_splits(cfg, progress=False)
    assert [s.id for s in splits["train"]] == ["train0", "train2"]
    assert [s.id for s in splits["val"]] == ["val0", "val1"] and len(splits["test"]) == 1


def test_torch_threads_sets_and_restores():
    import torch

    from harness.stages.common import torch_threads

    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), torch_threads(1):
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before


def test_the_classifier_stage_passes_amp_bf16_to_the_classifier():
    """issue 27: classifier.amp_bf16 is a stage config field (it existed only on ClassifierConfig, unreachable
    from a config file or `--set`)."""
    from harness.config import load_config
    from harness.stages.classifier import classifier_config

    assert classifier_config(load_config(None, [])).amp_bf16 is False
    assert classifier_config(load_config(None, ["classifier.amp_bf16=true"])).amp_bf16 is True
