import pytest

from harness.data.cleaning import clean_report


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The heart is normal. No effusion.", "the heart is normal . no effusion ."),
        ("", ""),
        ("   \n\n ", ""),
        ("...", ""),
        ("Heart normal.. Lungs clear...", "heart normal . lungs clear ."),
        ("Heart normal. . Lungs clear", "heart normal . lungs clear ."),
        ("1. Heart size normal. 2. No pneumothorax.", "heart size normal . no pneumothorax ."),
        ("1.Heart size normal 2.Lungs clear", "heart size normal . lungs clear ."),
        ("FINDINGS:\nThe lungs are clear.\n\nNo effusion.", "findings the lungs are clear . no effusion ."),
        ("Nodule measures 2.5 cm.", "nodule measures 25 cm ."),
        ("Left-sided effusion/atelectasis; (stable)!", "left sided effusion atelectasis stable ."),
        ("The patient's heart, lungs: OK", "the patients heart lungs ok ."),
        ("Compared to 2010. Stable.", "compared to 2010 . stable ."),
        ("XXXX normal", "xxxx normal ."),
    ],
)
def test_clean_report_cases(raw, expected):
    assert clean_report(raw) == expected


def test_mimic_style_placeholders_and_newlines():
    raw = "FINAL REPORT\n Dr. ___ was paged.\n\n1. No acute process."
    assert clean_report(raw, "mimic_cxr") == "final report dr . was paged . no acute process ."


@pytest.mark.parametrize("raw", ["A. B.. 1. c", "Heart 2.5cm.\n3) x", "no effusion .", "a . b ."])
def test_idempotent(raw):
    once = clean_report(raw)
    assert clean_report(once) == once


def test_unknown_style():
    with pytest.raises(ValueError, match="style"):
        clean_report("x", "chexpert")
