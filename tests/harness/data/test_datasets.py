import json
import re

import numpy as np
import pytest
from PIL import Image

from harness.constants import OBSERVATIONS
from harness.data.cleaning import clean_report
from harness.data.datasets import load_annotation, load_image, load_views
from harness.data.phantom import PhantomConfig, synthesize

IU_REPORTS = [
    "The heart is normal in size. The lungs are clear.",
    "1. Mild cardiomegaly. 2. Small left pleural effusion..",
    "No acute cardiopulmonary abnormality.\nXXXX degenerative changes.",
]


def _png(path, size=(40, 30), mode="L", value=120):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, value).save(path)


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def iu_file(tmp_path):
    items = []
    for i, report in enumerate(IU_REPORTS):
        study = f"CXR{i}_IM-000{i}"
        for view in (0, 1):
            _png(tmp_path / "images" / study / f"{view}.png", value=100 + 10 * i + view)  # distinct: no leak
        items.append({"id": study, "report": report, "image_path": [f"{study}/0.png", f"{study}/1.png"]})
    return _write(tmp_path / "annotation.json", {"train": items[:2], "val": items[2:], "test": []})


def test_iu_xray_two_view_studies(iu_file):
    data = load_annotation(iu_file, "iu_xray")
    assert [len(data[s]) for s in ("train", "val", "test")] == [2, 1, 0]
    sample = data["train"][1]
    assert sample.id == "CXR1_IM-0001"
    assert sample.report == "mild cardiomegaly . small left pleural effusion ."
    assert sample.image_paths == [iu_file.parent / "images" / "CXR1_IM-0001" / f"{v}.png" for v in (0, 1)]
    assert sample.labels is None and sample.categories is None
    views = load_views(sample, 32)
    assert [(v.size, v.mode) for v in views] == [((32, 32), "RGB")] * 2
    assert load_annotation(iu_file, "iu_xray", splits=("val",)).keys() == {"val"}


def _iu_views(tmp_path, counts):
    """An IU file whose study i has counts[i] views."""
    items = []
    for i, n in enumerate(counts):
        study = f"CXR{i}"
        for view in range(n):
            _png(tmp_path / "images" / study / f"{view}.png")
        items.append({"id": study, "report": "Heart normal.", "image_path": [f"{study}/{v}.png" for v in range(n)]})
    return _write(tmp_path / "annotation.json", {"train": items, "val": [], "test": []})


def test_iu_xray_uses_every_view_by_default(tmp_path):
    path = _iu_views(tmp_path, [1, 2, 3, 5])
    train = load_annotation(path, "iu_xray")["train"]
    assert [len(s.image_paths) for s in train] == [1, 2, 3, 5]
    assert train[3].image_paths == [tmp_path / "images" / "CXR3" / f"{v}.png" for v in range(5)]
    assert [len(v) for v in map(lambda s: load_views(s, 28), train)] == [1, 2, 3, 5]


def test_iu_xray_views_option_caps_views(tmp_path):
    path = _iu_views(tmp_path, [1, 2, 4])
    train = load_annotation(path, "iu_xray", views=2)["train"]
    assert [len(s.image_paths) for s in train] == [1, 2, 2]
    assert train[2].image_paths == [tmp_path / "images" / "CXR2" / f"{v}.png" for v in (0, 1)]
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match=rf"views = {re.escape(repr(bad))}.*annotation.json"):
            load_annotation(path, "iu_xray", views=bad)


def test_every_used_view_must_exist_and_one_is_needed(tmp_path):
    path = _iu_views(tmp_path, [3])
    (tmp_path / "images" / "CXR0" / "2.png").unlink()
    with pytest.raises(FileNotFoundError, match=r"CXR0.*2\.png"):
        load_annotation(path, "iu_xray")
    assert len(load_annotation(path, "iu_xray", views=2)["train"][0].image_paths) == 2
    data = json.loads(path.read_text())
    data["train"][0]["image_path"] = []
    _write(path, data)
    with pytest.raises(ValueError, match=r"'CXR0'.*'image_path' is empty"):
        load_annotation(path, "iu_xray")


def test_iu_reports_cleaned_as_r2gen(tmp_path):
    path = _iu_views(tmp_path, [1])
    data = json.loads(path.read_text())
    data["train"][0]["report"] = "Left-sided effusion and/or atelectasis. . No pneumothorax."
    _write(path, data)
    report = load_annotation(path, "iu_xray")["train"][0].report
    assert report == "left-sided effusion andor atelectasis . . no pneumothorax ."


def test_mimic_first_view_only(tmp_path):
    _png(tmp_path / "imgs" / "p10" / "a.jpg")
    item = {
        "id": "d1",
        "report": "FINAL REPORT\n Dr. ___ notified. No pneumothorax.",
        "image_path": ["p10/a.jpg", "p10/missing_second_view.jpg"],
    }
    path = _write(tmp_path / "annotation.json", {"train": [item], "val": [], "test": []})
    sample = load_annotation(path, "mimic_cxr", image_dir=tmp_path / "imgs")["train"][0]
    assert sample.image_paths == [tmp_path / "imgs" / "p10" / "a.jpg"]
    assert sample.report == "final report dr . notified . no pneumothorax ."


def test_mimic_reports_cleaned_as_reva_po_on_request(tmp_path):
    # data.report_cleaning: reva_po (the MIMIC-CXR presets) splits words a colon joined; IU-Xray stays R2Gen's.
    _png(tmp_path / "images" / "a.jpg")
    item = {"id": "d1", "report": "IMPRESSION:No acute process.", "image_path": ["a.jpg"]}
    path = _write(tmp_path / "annotation.json", {"train": [item], "val": [], "test": []})
    assert load_annotation(path, "mimic_cxr")["train"][0].report == "impressionno acute process ."
    assert load_annotation(path, "mimic_cxr", cleaning="reva_po")["train"][0].report == "impression no acute process ."
    assert load_annotation(path, "iu_xray", cleaning="reva_po")["train"][0].report == "impressionno acute process ."
    with pytest.raises(ValueError, match="unknown report cleaning"):
        load_annotation(path, "mimic_cxr", cleaning="R2Gen")


def test_annotation_with_categories(tmp_path):
    _png(tmp_path / "images" / "s1" / "0.png")
    items = [
        {
            "id": "a",
            "report": "Effusion.",
            "image_path": ["s1/0.png"],
            "categories": ["pleural effusion", "Cardiomegaly"],
        },
        {"id": "b", "report": "Normal.", "image_path": ["s1/0.png"], "categories": [1] + [0] * 13},
    ]
    path = _write(tmp_path / "annotation_with_categories.json", {"train": items, "val": [], "test": []})
    train = load_annotation(path, "mimic_cxr")["train"]
    assert train[0].categories == ["Cardiomegaly", "Pleural Effusion"]
    assert train[1].categories == ["No Finding"]


def test_phantom_set_loads(tmp_path):
    path = synthesize(tmp_path, PhantomConfig(n=10, seed=2, image_size=64))
    data = load_annotation(path, "phantom")
    raw = json.loads(path.read_text())
    for split, samples in data.items():
        assert [s.id for s in samples] == [item["id"] for item in raw[split]]
        for sample, item in zip(samples, raw[split], strict=True):
            assert sample.report == item["report"] == clean_report(item["report"])
            assert sample.image_paths == [tmp_path / item["image_path"][0]]
            assert sample.categories == item["categories"]
            expected = [np.nan if v is None else v for v in item["labels"]]
            assert np.array_equal(sample.labels, expected, equal_nan=True)
            assert sample.present.tolist() == item["present"]  # the image truth (the gold reader's)
    image = load_views(data["train"][0], 48)[0]
    assert image.size == (48, 48) and image.mode == "RGB"


def test_load_image_pads_to_square(tmp_path):
    path = tmp_path / "wide.png"
    Image.new("L", (60, 20), 200).save(path)
    pixels = np.asarray(load_image(path, 30))
    assert pixels.shape == (30, 30, 3)
    assert pixels[0, 15].max() == 0 and pixels[-1, 15].max() == 0  # black padding above and below
    assert abs(int(pixels[15, 15, 0]) - 200) <= 2
    sixteen = tmp_path / "deep.png"
    Image.fromarray(np.arange(64 * 64, dtype=np.uint16).reshape(64, 64) * 16).save(sixteen)
    deep = np.asarray(load_image(sixteen, 64))
    assert deep[0, 0, 0] == 0 and deep[-1, -1, 0] == 255
    with pytest.raises(FileNotFoundError, match="nope.png"):
        load_image(tmp_path / "nope.png", 30)


# --- errors: each names the file and, for item errors, the item id -------------------------------------


def _item_error(iu_file, mutate, exc=ValueError, item_id="CXR0_IM-0000"):
    data = json.loads(iu_file.read_text())
    mutate(data["train"][0])
    _write(iu_file, data)
    with pytest.raises(exc) as info:
        load_annotation(iu_file, "iu_xray")
    message = str(info.value)
    assert str(iu_file) in message and (item_id is None or item_id in message), message
    return message


def test_error_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="absent.json"):
        load_annotation(tmp_path / "absent.json", "iu_xray")


def test_error_not_json(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="broken.json.*not valid JSON"):
        load_annotation(path, "iu_xray")


def test_error_unknown_split_and_dataset(iu_file):
    with pytest.raises(ValueError, match=rf"{re.escape(str(iu_file))}.*'dev'"):
        load_annotation(iu_file, "iu_xray", splits=("train", "dev"))
    with pytest.raises(ValueError, match="unknown dataset 'chexpert'"):
        load_annotation(iu_file, "chexpert")


@pytest.mark.parametrize("field", ["report", "image_path"])
def test_error_missing_field(iu_file, field):
    assert f"missing field '{field}'" in _item_error(iu_file, lambda item: item.pop(field))


def test_error_missing_id(iu_file):
    message = _item_error(iu_file, lambda item: item.pop("id"), item_id=None)
    assert "no 'id'" in message and "heart is normal" in message


def test_error_empty_report(iu_file):
    assert "empty after cleaning" in _item_error(iu_file, lambda item: item.update(report=" .. ;"))


def test_error_missing_image(iu_file):
    message = _item_error(iu_file, lambda item: item.update(image_path=["x/0.png", "x/1.png"]), FileNotFoundError)
    assert "x/0.png" in message


def test_error_unknown_category(iu_file):
    message = _item_error(iu_file, lambda item: item.update(categories=["Cardiomegaly", "Headache"]))
    assert "'Headache'" in message


def test_error_bad_present(iu_file):
    assert "'present'" in _item_error(iu_file, lambda item: item.update(present=[2] * len(OBSERVATIONS)))
    assert "'present'" in _item_error(iu_file, lambda item: item.update(present=[1, 0]))


def test_error_bad_labels(iu_file):
    labels = [None] * len(OBSERVATIONS)
    labels[3] = 2
    assert "Lung Opacity" in _item_error(iu_file, lambda item: item.update(labels=labels))


def test_image_paths_stay_inside_image_dir_unless_allowed(tmp_path):
    outside = tmp_path / "elsewhere" / "a.png"
    _png(outside)
    ann = tmp_path / "ds" / "annotation.json"
    (tmp_path / "ds" / "images").mkdir(parents=True)
    item = {"id": "s1", "report": "The heart is normal.", "image_path": ["../../elsewhere/a.png"]}
    _write(ann, {"train": [item], "val": [], "test": []})
    with pytest.raises(ValueError, match=r"annotation.json.*s1.*leaves the image folder.*allow_outside_image_dir"):
        load_annotation(ann, "mimic_cxr")
    # absolute paths too
    _write(ann, {"train": [{**item, "image_path": [str(outside)]}], "val": [], "test": []})
    with pytest.raises(ValueError, match="leaves the image folder"):
        load_annotation(ann, "mimic_cxr")
    splits = load_annotation(ann, "mimic_cxr", allow_outside_image_dir=True)
    assert splits["train"][0].image_paths[0] == outside


def _split_file(tmp_path, train, test):
    for item in train + test:
        for v in item["image_path"]:
            _png(tmp_path / "images" / v)
    return _write(tmp_path / "annotation.json", {"train": train, "val": [], "test": test})


def test_a_study_in_two_splits_is_refused_naming_both(tmp_path):
    a = {"id": "s1", "report": IU_REPORTS[0], "image_path": ["a/0.png"]}
    b = {"id": "s2", "report": IU_REPORTS[1], "image_path": ["b/0.png"]}
    path = _split_file(tmp_path, [a, b], [{**b, "image_path": ["c/0.png"]}])
    with pytest.raises(ValueError, match=r"annotation\.json: study 's2' is in both the train and the test split"):
        load_annotation(path, "iu_xray")


def test_an_image_in_two_splits_is_refused_naming_both_studies(tmp_path):
    a = {"id": "s1", "report": IU_REPORTS[0], "image_path": ["a/0.png", "a/1.png"]}
    b = {"id": "s9", "report": IU_REPORTS[1], "image_path": ["a/1.png"]}
    path = _split_file(tmp_path, [a], [b])
    with pytest.raises(ValueError, match=r"image '.*a/1\.png' is in both the train split \(study 's1'\) and the test "
                                         r"split \(study 's9'\)"):
        load_annotation(path, "iu_xray")


def test_distinct_splits_and_a_phantom_set_pass_the_leak_check(tmp_path, iu_file):
    assert load_annotation(iu_file, "iu_xray")["train"]
    ann = synthesize(tmp_path / "ph", PhantomConfig(n=20, seed=0, image_size=32))
    assert sum(len(v) for v in load_annotation(ann, "phantom").values()) == 20
