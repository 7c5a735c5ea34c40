"""Smoke run of the whole tiny pipeline through the CLI: data, stage 0-3, classifier, eval.

Small on purpose (a few steps per stage); it checks that every stage runs, writes its run records and
checkpoint, chains into the next one, and that a completed stage is not run twice.
"""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.runs.records import read_json, read_jsonl
from tests.tiny_sizes import TINY


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("pipeline")


def _common(workdir, stage):
    return [f"out_dir={workdir / stage}", f"data.synth_dir={workdir / 'data'}", f"cache_dir={workdir / 'cache'}"]


def test_full_tiny_pipeline(workdir, capsys):
    assert main(["data", "synth", "--n", "12", "--seed", "1", "--out", str(workdir / "synth"),
                 "--image-size", "64"]) == 0
    assert (workdir / "synth" / "annotation.json").is_file()

    base = TINY + _common(workdir, "pretrain")
    assert main(["train", "pretrain", *base, "--no-progress"]) == 0
    bases = list((workdir / "cache" / "tiny-base").iterdir())
    assert len(bases) == 1 and (bases[0] / "config.json").is_file()

    warm = TINY + _common(workdir, "warmup") + ["train.max_steps=2", "train.batch_size=4"]
    assert main(["train", "warmup", *warm, "--no-progress"]) == 0
    run = workdir / "warmup"
    for name in ("manifest.json", "steps.jsonl", "evals.jsonl", "metrics.json"):
        assert (run / name).is_file(), name
    assert len(read_jsonl(run / "steps.jsonl")) == 2
    assert read_json(run / "model" / "spec.json")["stage"] == "warmup"

    clf = TINY + _common(workdir, "classifier") + ["classifier.epochs=1", "classifier.batch_size=8",
                                                   "classifier.img_size=32"]
    assert main(["classifier", "train", *clf, "--no-progress"]) == 0
    assert (workdir / "classifier" / "classifier" / "classifier.json").is_file()

    sft = TINY + _common(workdir, "sft") + [
        "train.max_steps=2", "train.batch_size=4", "model.lora_r=4", "model.lora_alpha=8",
        f"init_from={run / 'model'}", f"classifier.dir={workdir / 'classifier' / 'classifier'}"]
    assert main(["train", "sft", *sft, "--no-progress"]) == 0
    spec = read_json(workdir / "sft" / "model" / "spec.json")
    assert spec["lora"] == {"r": 4, "alpha": 8, "dropout": 0.1} and spec["classifier_dir"]
    assert (spec["image_size"], spec["dtype"], spec["preset"]) == (56, "float32", "tiny")
    assert (workdir / "sft" / "model" / "adapter_config.json").is_file()

    rl = TINY + _common(workdir, "rl") + [
        "train.max_steps=2", f"init_from={workdir / 'sft' / 'model'}", "rl.prompts_per_step=2",
        "rl.group_size=2", "rl.max_new_tokens=8", "rl.min_new_tokens=2", "rl.regularizer=rer",
        "rl.reference=vapr", "train.lr=1e-4", "train.scheduler=constant"]
    assert main(["train", "rl", *rl, "--no-progress"]) == 0
    steps = read_jsonl(workdir / "rl" / "steps.jsonl")
    assert [s["step"] for s in steps] == [1, 2]
    evals = read_jsonl(workdir / "rl" / "evals.jsonl")
    assert evals[0]["step"] == 0 and "val_score" in evals[0]

    capsys.readouterr()
    ev = TINY + _common(workdir, "eval")
    assert main(["eval", *ev, "--model", str(workdir / "rl" / "model"), "--split", "test",
                 "--out", str(workdir / "eval"), "--no-progress"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["n"] == 6 and 0 <= scores["BLEU_4"] <= 1 and 0 <= scores["findings_acc"] <= 1
    preds = list((workdir / "eval").glob("predictions_*_test.jsonl"))
    assert preds and len(read_jsonl(preds[0])) == 6
    # the per-report outputs rescore to the eval's own corpus numbers (what the report bootstrap resamples)
    import numpy as np

    from reports.bootstrap import corpus_scores, report_data_from_rows

    data = report_data_from_rows(read_jsonl(preds[0]))
    metrics = ["BLEU_1", "BLEU_4", "ROUGE_L", "CIDEr", "ce_micro_f1", "ce_macro_f1", "ce_example_f1",
               "findings_acc", "entity_f1", "gold_f1", "gold_exact", "gold_acc"]  # gold: the phantom's gold reader
    assert 0 <= scores["labeler_gold_disagree"] <= 1 and 0 <= scores["gold_report_f1"] <= 1
    full = corpus_scores(data, np.ones((1, 6)), metrics)
    for m in metrics:
        assert full[m][0] == pytest.approx(scores[m], abs=1e-12), m

    # A completed stage is skipped, not rerun (its records stay as they are).
    before = (run / "steps.jsonl").read_text()
    assert main(["train", "warmup", *warm, "--no-progress"]) == 0
    assert (run / "steps.jsonl").read_text() == before


def test_rl_runs_from_one_model_share_the_start_validation(workdir):
    """harness/grpo/start_validation.py: another arm (constant KL, static reference, seed 1) from the same SFT model
    computes the same step-0 validation as the RER + VAPR run; with the shared file present it reads it instead."""
    from harness.grpo.start_validation import FOLDER

    shared = workdir / "sft" / FOLDER
    files = list(shared.glob("*.json"))
    assert len(files) == 1  # written by test_full_tiny_pipeline's RL run
    first = read_jsonl(workdir / "rl" / "evals.jsonl")[0]
    cached = json.loads(files[0].read_text())["scores"]

    def rl(name, *extra):
        args = TINY + _common(workdir, name) + [
            "train.max_steps=1", f"init_from={workdir / 'sft' / 'model'}", "rl.prompts_per_step=2",
            "rl.group_size=2", "rl.max_new_tokens=8", "rl.min_new_tokens=2", "rl.regularizer=constant",
            "rl.reference=static", "seed=1", *extra]
        assert main(["train", "rl", *args, "--no-progress"]) == 0
        return read_jsonl(workdir / name / "evals.jsonl")[0]

    files[0].unlink()
    fresh = rl("rl_other")  # computed again by another arm and seed: the same scores
    assert files[0].is_file()
    for k in cached:
        if k != "completions":
            assert fresh[k] == first[k], k
    # Read, not recomputed: a planted value comes back.
    files[0].write_text(json.dumps({"scores": {**cached, "BLEU_4": 0.123456789}}))
    assert rl("rl_read")["BLEU_4"] == 0.123456789
    # Another decoding budget is another validation: a file of its own.
    rl("rl_other_budget", "generation.max_new_tokens=7")
    assert len(list(shared.glob("*.json"))) == 2


def test_rl_decodes_each_prompt_image_once_per_run(workdir, monkeypatch):
    """issue 27: the RL prompts' images (training epochs, validations, the KL to the start policy) are decoded once
    per run and read back as the same pixels (harness/data/pixel_cache.py); the folder goes when the run ends."""
    import traceback

    import harness.data.streaming as streaming

    decoded = []
    real = streaming.load_image

    def counting(path, size):  # the prompts' decodes (the classifier's own inputs, read once for its hints, apart)
        if not any(f.name == "predicted_diseases" for f in traceback.extract_stack()):
            decoded.append(str(path))
        return real(path, size)

    monkeypatch.setattr(streaming, "load_image", counting)
    args = TINY + _common(workdir, "rl_pixels") + [
        "train.max_steps=3", "train.epochs=3", f"init_from={workdir / 'sft' / 'model'}", "rl.prompts_per_step=2",
        "rl.group_size=2", "rl.max_new_tokens=4", "rl.min_new_tokens=2", "data.max_train=2", "rl.val_every_steps=1"]
    assert main(["train", "rl", *args, "--no-progress"]) == 0
    assert len(read_jsonl(workdir / "rl_pixels" / "steps.jsonl")) == 3  # three epochs of the 2 prompts
    assert len(read_jsonl(workdir / "rl_pixels" / "evals.jsonl")) == 4  # validations at steps 0-3
    from collections import Counter

    assert decoded and max(Counter(decoded).values()) == 1, Counter(decoded).most_common(3)  # each view once
    for stage in ("rl_pixels", "warmup", "sft", "rl"):
        assert not list((workdir / stage).glob("pixels-*")), stage


def test_think_report_model_through_sft_rl_and_eval(workdir, capsys):
    """MRG-R1's layout (prompt.output_format=think_report, issue 24): the SFT stage records the format, RL and
    eval follow it (and refuse a config that says otherwise), and they log the well-formatted share. With
    model.train_format_tokens the SFT adapter holds the tags' token rows and RL trains them too."""
    warm, clf = workdir / "warmup" / "model", workdir / "classifier" / "classifier"
    if not (warm / "spec.json").is_file():
        pytest.skip("needs test_full_tiny_pipeline's warm-up and classifier")
    fmt = ["prompt.output_format=think_report"]
    sft = TINY + _common(workdir, "sft_tagged") + fmt + [
        "train.max_steps=2", "train.batch_size=4", "model.lora_r=4", "model.lora_alpha=8", f"init_from={warm}",
        f"classifier.dir={clf}", "model.train_format_tokens=true"]
    assert main(["train", "sft", *sft, "--no-progress"]) == 0
    spec = read_json(workdir / "sft_tagged" / "model" / "spec.json")
    assert spec["output_format"] == "think_report"
    rows = spec["lora"]["token_indices"]
    assert rows and read_json(workdir / "sft_tagged" / "model" / "adapter_config.json")[
        "trainable_token_indices"] == rows
    sft_params = read_json(workdir / "sft_tagged" / "metrics.json")["trainable_params"]
    rl_args = ["train.max_steps=1", f"init_from={workdir / 'sft_tagged' / 'model'}", "rl.prompts_per_step=2",
               "rl.group_size=2", "rl.max_new_tokens=8", "rl.min_new_tokens=2", "rl.reward=mrg_r1",
               "train.lr=1e-4", "train.scheduler=constant"]
    assert main(["train", "rl", *TINY, *_common(workdir, "rl_plain"), *rl_args, "--no-progress"]) == 2
    assert "trained with 'think_report'" in capsys.readouterr().err
    assert main(["train", "rl", *TINY, *_common(workdir, "rl_tagged"), *fmt, *rl_args, "--no-progress"]) == 0
    steps = read_jsonl(workdir / "rl_tagged" / "steps.jsonl")
    assert 0 <= steps[0]["well_formatted"] <= 1
    # RL trained what the SFT adapter holds, token rows included, and wrote the same layout.
    assert read_json(workdir / "rl_tagged" / "metrics.json")["trainable_params"] == sft_params
    assert read_json(workdir / "rl_tagged" / "model" / "spec.json")["lora"]["token_indices"] == rows
    assert all("well_formatted" in e for e in read_jsonl(workdir / "rl_tagged" / "evals.jsonl"))
    capsys.readouterr()
    ev = TINY + _common(workdir, "eval_tagged") + fmt
    assert main(["eval", *ev, "--model", str(workdir / "rl_tagged" / "model"), "--split", "test",
                 "--out", str(workdir / "eval_tagged"), "--no-progress"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert 0 <= scores["well_formatted"] <= 1
    rows = read_jsonl(next((workdir / "eval_tagged").glob("predictions_*_test.jsonl")))
    assert all("output" in r and r["generated"] == r["generated"].strip() for r in rows)


def test_stage0_findings_answers():
    import numpy as np

    from harness.stages.pretrain import findings_answer

    labels = np.full(14, np.nan)
    assert findings_answer(labels) == "no finding"
    labels[2], labels[10], labels[7] = 1, 1, -1
    assert findings_answer(labels) == "cardiomegaly, pleural effusion, possible pneumonia"
