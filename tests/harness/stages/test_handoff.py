"""Issue 42: train.handoff = best_val hands on the best-validation epoch (official runner_base.py: checkpoint_best.pth
when agg_metrics beats the best so far, strictly), keeps the last one beside it, and survives a resume."""

from __future__ import annotations

import math

import pytest
import torch

from harness.config import ConfigError, RunConfig, TrainConfig, load_config
from harness.grpo.validation import NLG_KEYS
from harness.models.tiny import build_tiny_model
from harness.models.trainable import set_trainable, trainable_state
from harness.runs.records import RunDir
from harness.stages.handoff import LAST_MODEL, BestEpoch, save_handoff
from harness.stages.lm_train import LMData, train_lm
from tests.killed_runs import KilledAt

REPORTS = ["the heart size is normal .", "mild cardiomegaly .", "the lungs are clear .",
           "small left pleural effusion ."]
SCORES = [0.2, 0.6, 0.4]  # per epoch: the best is epoch 2, the last epoch 3


def _model(tokenizer):
    model = build_tiny_model(tokenizer, seed=0, text_hidden=32, text_layers=1, vision_hidden=16, image_size=56)
    set_trainable(model, "warmup")
    return model


def _cfg() -> RunConfig:
    cfg = RunConfig()
    cfg.rl.val_score, cfg.rl.val_lambda = "official", 0.1
    return cfg


def _validator(run: RunDir, seen: list, scores=SCORES):
    """A stand-in for make_validator: the epoch's NLG scores (all equal to its value) and rg 0, so s_val (official)
    is that value; it records the trainable tensors it validated. The epoch is read from the run's records, so a
    resumed run is scored as the uninterrupted one."""
    def validate(model) -> dict:
        epoch = len([r for r in run.evals() if "val_score" in r])
        seen.append(trainable_state(model))
        return {**{k: scores[epoch] for k in NLG_KEYS}, "rg": 0.0}

    return validate


def _train(tokenizer, processor, images, run, seen, tcfg):
    model = _model(tokenizer)
    hook = BestEpoch(_cfg(), model, _validator(run, seen), run)
    data = LMData([[im] for im in images], ["write"] * 4, REPORTS)
    train_lm(model, processor, data, None, tcfg, run, seed=3, max_report_tokens=10, progress=False,
             on_epoch_end=hook.on_epoch_end, extra_state=hook)
    return model, hook


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_best_val_hands_on_the_best_epoch_not_the_last(tiny_tokenizer, tiny_processor, xray_images, tmp_path):
    tcfg = TrainConfig(epochs=3, batch_size=2, lr=1e-2, scheduler="cosine", checkpoint_every=0)
    run, seen = RunDir(tmp_path / "run"), []
    model, hook = _train(tiny_tokenizer, tiny_processor, xray_images, run, seen, tcfg)
    rows = [r for r in run.evals() if "val_score" in r]
    assert [r["val_score"] for r in rows] == pytest.approx(SCORES)
    assert [r["improved"] for r in rows] == [True, True, False]
    assert rows[-1]["best_epoch"] == 2 and rows[-1]["best_step"] == 4
    last = trainable_state(model)
    assert _equal(last, seen[2]) and not _equal(seen[1], seen[2])  # the last epoch's weights differ from epoch 2's
    saved = {}
    info = save_handoff(hook, lambda name, extra: saved.update({name: (trainable_state(model), extra)}))
    assert _equal(saved[LAST_MODEL][0], seen[2])
    assert _equal(saved["model"][0], seen[1])  # what the next stage loads: the best epoch
    assert info == saved["model"][1] == {"handoff": "best_val", "best_val_score": pytest.approx(0.6),
                                         "best_epoch": 2, "best_step": 4}


def test_best_val_resumes_with_the_best_epoch_it_had(tiny_tokenizer, tiny_processor, xray_images, tmp_path):
    """Killed in epoch 3, after the end-of-epoch-2 checkpoint: the resumed run hands on the uninterrupted run's best
    epoch (the best tensors travel in the checkpoint)."""
    tcfg = TrainConfig(epochs=3, batch_size=2, lr=1e-2, scheduler="cosine", checkpoint_every=2)
    full_run, full_seen = RunDir(tmp_path / "full"), []
    full, full_hook = _train(tiny_tokenizer, tiny_processor, xray_images, full_run, full_seen, tcfg)
    with pytest.raises(KeyboardInterrupt):
        _train(tiny_tokenizer, tiny_processor, xray_images, KilledAt(tmp_path / "part", 5), [], tcfg)
    run = RunDir(tmp_path / "part")
    resumed, hook = _train(tiny_tokenizer, tiny_processor, xray_images, run, [], tcfg)
    assert hook.best == full_hook.best and hook.best["epoch"] == 2
    assert [r["improved"] for r in run.evals() if "val_score" in r] == [True, True, False]
    assert hook.use_best() and full_hook.use_best()
    a, b = trainable_state(resumed), trainable_state(full)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_a_tie_keeps_the_earlier_epoch_and_nan_never_wins(tiny_tokenizer, tmp_path):
    model = _model(tiny_tokenizer)
    run = RunDir(tmp_path / "run")
    values = iter([float("nan"), 0.5, 0.5])

    def validate(m):
        v = next(values)
        return {**{k: v for k in NLG_KEYS}, "rg": 0.0}

    hook = BestEpoch(_cfg(), model, validate, run)
    rows = [hook.on_epoch_end(e, e) for e in (1, 2, 3)]
    assert math.isnan(rows[0]["val_score"]) and [r["improved"] for r in rows] == [False, True, False]
    assert hook.best == {"val_score": 0.5, "epoch": 2, "step": 2}
    none = BestEpoch(_cfg(), model, lambda m: {**{k: float("nan") for k in NLG_KEYS}, "rg": 0.0}, run)
    none.on_epoch_end(1, 1)
    names = []
    assert save_handoff(none, lambda name, extra: names.append(name))["handoff"].startswith("last")
    assert names == [LAST_MODEL, "model"]


def test_last_is_the_default_and_writes_only_model(tmp_path):
    names = []
    assert save_handoff(None, lambda name, extra: names.append((name, extra))) == {}
    assert names == [("model", {})]
    assert RunConfig().train.handoff == "last"
    with pytest.raises(ConfigError, match="'train.handoff' = 'best'"):
        load_config(None, ["train.handoff=best"])


@pytest.mark.slow
def test_paper_recipe_options_through_warmup_and_sft(tmp_path):
    """The tiny pipeline with the paper presets' new options (issue 42): best_val hand-off with the validation score
    in evals.jsonl and metrics.json, model/ and model_last/ in both stages, the official stage-1 trainable set,
    LoRA on the patch embedding, the official prompt layout recorded for RL and evaluation, untruncated targets."""
    from harness.cli import main
    from harness.config import load_config
    from harness.models.checkpoint import stage_tensors
    from harness.runs.records import read_json, read_jsonl
    from harness.stages.prompts import instructions_for
    from tests.tiny_sizes import TINY

    def common(stage):
        return [f"out_dir={tmp_path / stage}", f"data.synth_dir={tmp_path / 'data'}",
                f"cache_dir={tmp_path / 'cache'}", "data.max_train=8", "train.batch_size=4", "train.epochs=2",
                "train.handoff=best_val", "prompt.max_report_tokens=null", "rl.val_rg_metric=entity_f1"]

    warm = TINY + common("warmup") + ["model.warmup_trainable=merger_mlp"]
    assert main(["train", "warmup", *warm, "--no-progress"]) == 0
    run = tmp_path / "warmup"
    rows = [r for r in read_jsonl(run / "evals.jsonl") if "val_score" in r]
    assert [r["epoch"] for r in rows] == [1, 2] and rows[0]["improved"]
    metrics = read_json(run / "metrics.json")
    assert metrics["handoff"] == "best_val" and metrics["best_epoch"] in (1, 2)
    assert (run / "model" / "spec.json").is_file() and (run / "model_last" / "spec.json").is_file()
    assert read_json(run / "model" / "spec.json")["best_epoch"] == metrics["best_epoch"]
    assert all(n.startswith("model.visual.merger.") for n in stage_tensors(run / "model"))

    clf = TINY + [f"out_dir={tmp_path / 'classifier'}", f"data.synth_dir={tmp_path / 'data'}",
                  f"cache_dir={tmp_path / 'cache'}", "classifier.epochs=1", "classifier.batch_size=8",
                  "classifier.img_size=32"]
    assert main(["classifier", "train", *clf, "--no-progress"]) == 0
    official = ["prompt.disease_list_format=python_list", 'prompt.disease_separator="\\n"',
                'prompt.disease_template="The following findings may be present: {diseases}."']
    sft = TINY + common("sft") + official + [
        "model.lora_r=4", "model.lora_alpha=8", "model.lora_patch_embed=true", f"init_from={run / 'model'}",
        f"classifier.dir={tmp_path / 'classifier' / 'classifier'}"]
    assert main(["train", "sft", *sft, "--no-progress"]) == 0
    spec = read_json(tmp_path / "sft" / "model" / "spec.json")
    assert spec["lora"]["patch_embed"] is True and spec["handoff"] == "best_val"
    assert (spec["disease_list_format"], spec["disease_separator"]) == ("python_list", "\n")
    assert any("patch_embed.proj.lora_" in n for n in stage_tensors(tmp_path / "sft" / "model"))
    cfg = load_config(None, TINY + common("rl"))
    from harness.stages.common import load_splits

    val = load_splits(cfg, progress=False)["val"][:3]
    texts = instructions_for(cfg.prompt, cfg.model, val, spec)
    assert all("\nThe following findings may be present: [" in t for t in texts)
