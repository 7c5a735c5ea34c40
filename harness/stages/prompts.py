"""What a model is asked and what it is scored against, the same in every stage: the instruction (plain, or
with the frozen classifier's predicted diseases: REVA-PO Sec. 3.2), the images of a sample, and the reference
labels of the 14 observations. Each stage reads these; the RL engine reads only the PromptSet they build
(harness/prompting/samples.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.checks.preflight import model_device
from harness.config import ConfigError, RunConfig
from harness.constants import OBSERVATIONS
from harness.data.streaming import ClassifierImages, LazyViews
from harness.models.classifier import load_classifier, positive_names, predict_labels, predict_proba
from harness.models.classifier.storage import META_FILE, WEIGHTS_FILE
from harness.prompting.batching import instruction_text
from harness.prompting.output_format import format_instruction
from harness.prompting.samples import PromptSet
from harness.runs.records import kept_result

if TYPE_CHECKING:
    import torch


def prompt_set(prompt, model, samples, spec: dict, cache_dir=None) -> PromptSet:
    """Samples as the RL loop and the analyses see them (`prompt`, `model`: the run's PromptConfig and ModelConfig):
    instructions rebuilt as the checkpoint was trained (`cache_dir`: decoded images kept there, see `load_images`)."""
    return PromptSet([s.id for s in samples], load_images(samples, model.image_size, cache_dir=cache_dir),
                     instructions_for(prompt, model, samples, spec), [s.report for s in samples])


def load_images(samples, size: int, cache_dir=None):
    """Every view of each sample, padded to square and resized to size x size, decoded when a batch reads them
    (harness/data/streaming.py: memory flat in the data set's size); with `cache_dir`, decoded once and kept there
    as uint8 pixels for the next epochs (harness/data/pixel_cache.py)."""
    return LazyViews(samples, size, cache_dir=cache_dir)


def plain_instructions(cfg: RunConfig, n: int) -> list[str]:
    return [cfg.prompt.instruction] * n


# How a stage model's prompts were built, as its spec.json records them (written by SFT, carried on by RL). A
# spec from before a key existed was built with the key's old behaviour, this default.
PROMPT_SPEC_DEFAULTS = {"disease_list_format": "comma", "disease_separator": " "}


def prompt_spec(cfg: RunConfig) -> dict:
    """What SFT records in its model's spec about the prompts it trained on (instructions_for rebuilds them)."""
    p = cfg.prompt
    return {"disease_template": p.disease_template, "instruction": p.instruction,
            "disease_list_format": p.disease_list_format, "disease_separator": p.disease_separator}


def _disease_text(instruction: str, names: list[str], template: str, settings: dict) -> str:
    return instruction_text(instruction, names, template, settings["disease_list_format"],
                            settings["disease_separator"])


def fills_empty(list_format: str) -> bool:
    """Whether a prediction of no disease is written as "No Finding" (this project) or as an empty list (the
    official code, with the python_list format)."""
    return list_format != "python_list"


def disease_instructions(cfg: RunConfig, names: list[list[str]]) -> list[str]:
    settings = prompt_spec(cfg)
    return [_disease_text(cfg.prompt.instruction, ns, cfg.prompt.disease_template, settings) for ns in names]


def reference_labels(samples) -> np.ndarray:
    """[N, 14] CheXpert-style labels of the references: stored labels, else categories, else the labeler."""
    out = np.full((len(samples), len(OBSERVATIONS)), np.nan)
    need = []
    for i, s in enumerate(samples):
        if s.labels is not None:
            out[i] = s.labels
        elif s.categories is not None:
            out[i] = [1.0 if o in s.categories else np.nan for o in OBSERVATIONS]
        else:
            need.append(i)
    if need:
        # lazy: tests replace label_reports at its source, read at call time
        from rewards.chexpert import label_reports

        out[need] = label_reports([samples[i].report for i in need])
    return out


def classifier_inputs(samples, img_size: int, normalization: str = "imagenet", cache_dir=None):
    """The classifier's input: the first view of each study, preprocessed when a batch reads it (its decoded
    pixels kept in `cache_dir` for the next epochs when given)."""
    return ClassifierImages(samples, img_size, normalization, cache_dir=cache_dir)


PREDICTIONS_FOLDER = "predicted_diseases"  # inside a classifier folder: predictions already made (one file a call)


def predicted_diseases(classifier_dir: str | Path, samples, device: str | torch.device = "cpu",
                       fill_empty: bool = True) -> list[list[str]]:
    """Names of the observations the frozen classifier predicts positive, per sample, predicted on `device` (the
    stage's model.device); none predicted: ["No Finding"] (`fill_empty`) or [] (harness.models.classifier
    positive_names).

    Every stage run and evaluation from one SFT model asks the same classifier about the same samples (the demo:
    its 10 RL runs each predict the 1,050 train and 60 validation images, 2.3 s on a core). The answer is kept in
    the classifier folder under a key of the classifier's files and of the samples in order with the bytes of the
    image the classifier reads, so a repeated call reads it: the same call, the same batches, the same numbers. A
    folder that cannot be written (a shared, read-only classifier) only means computing it each time."""
    root = Path(classifier_dir)
    h = hashlib.sha256()
    for name in (WEIGHTS_FILE, META_FILE):
        h.update((root / name).read_bytes())
    for s in samples:  # the classifier reads the first view of each study
        h.update(s.id.encode() + b"\0" + Path(s.image_paths[0]).read_bytes())

    def predict() -> list[list[str]]:
        model, ccfg, thresholds = load_classifier(classifier_dir, device=device)
        probs = predict_proba(model, classifier_inputs(samples, ccfg.img_size, ccfg.normalization),
                              amp_bf16=ccfg.amp_bf16)
        return [positive_names(row, fill_empty) for row in predict_labels(probs, thresholds)]

    suffix = "" if fill_empty else "-as-predicted"  # the filled answer keeps the file name it always had
    return kept_result(root / PREDICTIONS_FOLDER / f"{h.hexdigest()[:24]}{suffix}.json", "names", predict)


def instructions_for(prompt, model, samples, spec: dict) -> list[str]:
    """Prompts rebuilt the way a stage model was trained: with the classifier's predicted diseases (on the model
    section's device) when its spec records a classifier (stage 2 onwards), plain otherwise. `prompt`, `model`: the
    run's PromptConfig and ModelConfig."""
    fmt = checkpoint_format(prompt.output_format, spec)
    if not spec.get("classifier_dir"):
        return [format_instruction(prompt.instruction, fmt)] * len(samples)
    settings = {k: spec.get(k, default) for k, default in PROMPT_SPEC_DEFAULTS.items()}
    names = predicted_diseases(spec["classifier_dir"], samples, model_device(model),
                               fill_empty=fills_empty(settings["disease_list_format"]))
    instruction = spec.get("instruction", prompt.instruction)
    template = spec.get("disease_template", prompt.disease_template)
    return [format_instruction(_disease_text(instruction, ns, template, settings), fmt) for ns in names]


def checkpoint_format(output_format: str, spec: dict) -> str:
    """The output format (harness/prompting/output_format.py) a stage model was taught, which must be the config's
    (prompt.output_format, `output_format`): a think_report model scored as plain (or the reverse) would be scored
    on what it was not taught to write. A spec without the key is a plain model (written before the format
    existed)."""
    trained = spec.get("output_format", "plain")
    if spec and trained != output_format:
        raise ConfigError(f"prompt.output_format is '{output_format}' but the model was trained with "
                          f"'{trained}' (its spec.json); set prompt.output_format={trained} for this stage")
    return output_format
