"""Issue 42: the official REVA-PO prompts and SFT targets, as options whose defaults keep today's behaviour.

The official strings below are facts of reva_po/models/reva.py (build_prompt of REVA_stage1/2/3), LiGuo12/REVA_PO."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import harness.stages.prompts as prompts
from harness.config import ConfigError, RunConfig, load_config
from harness.models.classifier.thresholds import positive_names
from harness.prompting.batching import END, IGNORE, encode_sft, instruction_text

PRESETS = Path(__file__).resolve().parents[2] / "experiments" / "presets"
MIMIC = ("You are a radiologist. Analyze the input chest X-ray. Assess the major anatomical regions if visible (e.g., "
         "airways, lungs, pleura, heart, mediastinum, great vessels, diaphragm, bones, upper abdomen [e.g., liver, "
         "stomach], and support devices). Describe any observed findings that are clinically relevant, whether normal "
         "or abnormal.")
IU = "Generate a diagnosis report for these chest x-ray images (frontal and side views)."
TEMPLATE = "The following findings may be present: {diseases}."


def _official(instruction: str, names: list[str]) -> str:
    """The official stage-2/3 prompt text: the f-string of reva.py build_prompt."""
    return f"{instruction}\nThe following findings may be present: {names}."


@pytest.mark.parametrize("names", [["Cardiomegaly", "Pleural Effusion"], ["No Finding"], [], ["Lung Opacity"]])
def test_python_list_format_writes_the_official_prompt(names):
    assert instruction_text(MIMIC, names, TEMPLATE, "python_list", "\n") == _official(MIMIC, names)
    assert instruction_text(IU, names, TEMPLATE, "python_list", "\n") == _official(IU, names)


def test_the_default_format_is_unchanged():
    assert instruction_text("Write.", ["Cardiomegaly", "Pleural Effusion"]) == \
        "Write. The classifier suggests: cardiomegaly, pleural effusion."
    assert instruction_text("Write.", []) == instruction_text("Write.", ["No Finding"]) == \
        "Write. The classifier suggests: no finding."
    assert instruction_text("Write.") == "Write."  # stage 1: the instruction alone
    with pytest.raises(ValueError, match="disease list format"):
        instruction_text("Write.", ["Edema"], list_format="json")


def test_no_prediction_is_an_empty_list_only_in_the_official_format():
    row = np.zeros(14, dtype=int)
    assert positive_names(row) == ["No Finding"]  # this project's fill
    assert positive_names(row, fill_empty=False) == []  # the official code's
    assert prompts.fills_empty("comma") and not prompts.fills_empty("python_list")


@pytest.mark.parametrize("preset, instruction", [("mimic-qwen2.5vl-7b", MIMIC), ("mimic-qwen2.5vl-3b", MIMIC),
                                                 ("iuxray-qwen2.5vl-7b", IU), ("iuxray-qwen2.5vl-3b", IU)])
def test_paper_presets_take_the_official_prompts_and_untruncated_targets(preset, instruction):
    for stage in ("warmup", "sft", "rl", "eval"):
        cfg = load_config(PRESETS / f"{preset}.yaml", ["data.annotation=ann.json"], stage=stage)
        p = cfg.prompt
        assert (p.instruction, p.disease_template, p.disease_list_format, p.disease_separator) == \
            (instruction, TEMPLATE, "python_list", "\n"), stage
        assert p.max_report_tokens is None, stage
        names = ["Cardiomegaly", "Edema"]
        assert prompts.disease_instructions(cfg, [names, []]) == [_official(instruction, names),
                                                                   _official(instruction, [])]


@pytest.mark.parametrize("preset", ["tiny", "tiny-bench", "tiny-power"])
def test_tiny_presets_keep_the_project_prompts(preset):
    cfg = load_config(PRESETS / f"{preset}.yaml", stage="sft")
    assert (cfg.prompt.disease_list_format, cfg.prompt.disease_separator, cfg.prompt.max_report_tokens) == \
        ("comma", " ", 100)


def test_instructions_for_rebuilds_the_prompts_a_spec_records(tmp_path, monkeypatch):
    """RL and evaluation rebuild an SFT model's prompts from its spec.json: the official format when it says so
    (with the classifier's raw answer, [] for none), today's for a spec written before the keys existed."""
    from harness.data.datasets import Sample

    asked = []

    def fake(d, samples, device="cpu", fill_empty=True):
        asked.append(fill_empty)
        return [["Edema"], []] if not fill_empty else [["Edema"], ["No Finding"]]

    monkeypatch.setattr(prompts, "predicted_diseases", fake)
    samples = [Sample(id=f"s{i}", report="r .", image_paths=[tmp_path / "x.png"]) for i in range(2)]
    cfg = RunConfig()
    official = {"classifier_dir": "clf", "instruction": IU, "disease_template": TEMPLATE,
                "disease_list_format": "python_list", "disease_separator": "\n"}
    assert prompts.instructions_for(cfg.prompt, cfg.model, samples, official) == [_official(IU, ["Edema"]),
                                                                                  _official(IU, [])]
    old = {"classifier_dir": "clf", "instruction": "Write.", "disease_template": "Seen: {diseases}."}
    assert prompts.instructions_for(cfg.prompt, cfg.model, samples, old) == ["Write. Seen: edema.",
                                                                             "Write. Seen: no finding."]
    assert asked == [False, True]
    # SFT records every key RL and evaluation read back
    assert set(prompts.PROMPT_SPEC_DEFAULTS) <= set(prompts.prompt_spec(cfg))


def test_untruncated_targets_cover_the_whole_report(tiny_processor, xray_images):
    """prompt.max_report_tokens null: the labels are every report token and <|im_end|> (official: prompt + report +
    eos); an int keeps the first N, as before."""
    report = " ".join(["the heart size is normal . the lungs are clear ."] * 6)
    tok = tiny_processor.tokenizer
    ids = tok(report, add_special_tokens=False)["input_ids"]
    assert len(ids) > 30
    end = tok.convert_tokens_to_ids(END)
    for cap, want in ((None, ids), (30, ids[:30])):
        batch = encode_sft(tiny_processor, [[xray_images[0]]], ["Write."], [report], cap)
        labels = batch["labels"][0]
        assert labels[labels != IGNORE].tolist() == [*want, end]


def test_new_prompt_values_are_refused_with_their_key():
    with pytest.raises(ConfigError, match="'prompt.disease_list_format' = 'json'"):
        load_config(None, ["prompt.disease_list_format=json"])
    with pytest.raises(ConfigError, match="'prompt.max_report_tokens' = 0"):
        load_config(None, ["prompt.max_report_tokens=0"])
    assert load_config(None, ["prompt.max_report_tokens=null"]).prompt.max_report_tokens is None


def test_prompt_assembly_is_the_official_message_layout(tiny_processor, xray_images):
    """regbench's prompt text is what the official build_prompt + apply_chat_template(add_generation_prompt=True)
    makes: one user turn, the image(s) first, then the text, under the template's default system prompt (the official
    code passes no system message)."""
    from harness.prompting.batching import prompt_text

    text = _official(IU, ["Edema"])
    views = [xray_images[0], xray_images[1]]
    message = [{"role": "user", "content": [*({"type": "image", "image": im} for im in views),
                                            {"type": "text", "text": text}]}]
    official = tiny_processor.apply_chat_template(message, tokenize=False, add_generation_prompt=True)
    assert prompt_text(tiny_processor, text, 2) == official
    assert official.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n")
    assert official.endswith(f"{text}<|im_end|>\n<|im_start|>assistant\n")


def test_stage0_hints_take_the_configured_layout_and_key_it_only_when_set(tmp_path, xray_images):
    """Stage 0 (tiny) teaches the base stage 2's prompt with noisy hints: in the configured layout, which enters the
    base's cache key only when it is not the default (every existing base keeps its key)."""
    from harness.config import build_config
    from harness.data.datasets import Sample
    from harness.stages import paths
    from harness.stages.lm_train import LMData
    from harness.stages.pretrain import with_hint_task

    default = build_config({"cache_dir": str(tmp_path)})
    official = build_config({"cache_dir": str(tmp_path), "prompt": {"disease_list_format": "python_list",
                                                                    "disease_separator": "\n"}})
    assert paths.base_key(official) != paths.base_key(default)
    assert paths.base_key(build_config({"cache_dir": str(tmp_path), "prompt": {"disease_list_format": "comma"}})) \
        == paths.base_key(default)
    labels = np.zeros(14)
    labels[2] = 1.0
    samples = [Sample(id="a", report="r .", image_paths=[tmp_path / "x.png"], labels=labels)]
    data = LMData([[xray_images[0]]], ["Write."], ["r ."])
    out = with_hint_task(data, samples, 1.0, 0, "Write.", TEMPLATE, "python_list", "\n")
    assert out.instructions[1].startswith("Write.\nThe following findings may be present: [")
