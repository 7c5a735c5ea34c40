"""The bad-input corpus: every case is one command line (or one loader call) on a bad input. Each must fail
with exit code 2 and ONE line that names the offending file / key / value, and leave no folder that looks
finished (no metrics.json, no model). All fail before any model is loaded or built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from harness.cli import main

REPORT = "The heart size is normal. The lungs are clear. No pleural effusion or pneumothorax is seen."


def _item(i: int, split: str, path: str | None = None) -> dict:
    return {"id": f"{split}{i}", "report": REPORT, "image_path": [path or f"{split}{i}.png"]}


def _write_data(root: Path, splits: dict | None = None) -> Path:
    """A valid MIMIC-CXR-style annotation.json with images/ (2 studies per split), or `splits` as given."""
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    data = splits if splits is not None else {s: [_item(i, s) for i in range(2)] for s in ("train", "val", "test")}
    shade = iter(range(40, 256, 3))  # distinct bytes per image: identical ones across splits are a leak
    for items in data.values():
        for item in items if isinstance(items, list) else []:
            views = item.get("image_path")
            for v in views if isinstance(views, list) else []:
                if ".." not in v and not v.startswith("/"):
                    Image.new("L", (32, 32), next(shade)).save(images / v)
    ann = root / "annotation.json"
    ann.write_text(json.dumps(data))
    return ann


def _setup(tmp: Path, kind: str) -> dict[str, str]:
    """Files a case refers to, by name; every case gets {tmp}, {out} and {data} (valid data)."""
    names = {"tmp": str(tmp), "out": str(tmp / "out")}
    names["ann"] = str(_write_data(tmp / "data"))
    if kind == "yaml_latin1":
        (tmp / "c.yaml").write_bytes("train:\n  lr: 0.1  # d\xe9j\xe0\n".encode("latin-1"))
    elif kind == "yaml_invalid":
        (tmp / "c.yaml").write_text("train: [lr: 1\n")
    elif kind == "yaml_list":
        (tmp / "c.yaml").write_text("- 1\n- 2\n")
    elif kind == "yaml_cycle":
        (tmp / "c.yaml").write_text("base: d.yaml\nseed: 1\n")
        (tmp / "d.yaml").write_text("base: c.yaml\nseed: 2\n")
    elif kind == "yaml_self":
        (tmp / "c.yaml").write_text("base: c.yaml\n")
    elif kind == "yaml_base_missing":
        (tmp / "c.yaml").write_text("base: gone.yaml\n")
    elif kind == "yaml_base_not_str":
        (tmp / "c.yaml").write_text("base: [a, b]\n")
    elif kind == "yaml_bad_key":
        (tmp / "c.yaml").write_text("train:\n  lrr: 0.1\n")
    elif kind == "yaml_bad_value":
        (tmp / "c.yaml").write_text("rl:\n  eps_low: -5\n")
    elif kind == "yaml_good":
        (tmp / "c.yaml").write_text("train:\n  lr: 0.1\n")
    elif kind == "preset_bad":
        (tmp / "c.yaml").write_text("common:\n  seed: 1\nstages: {}\nextra: 1\n")
    elif kind == "out_file":
        (tmp / "out").write_text("not a folder")
    elif kind.startswith("ann_"):
        splits = {s: [_item(i, s) for i in range(2)] for s in ("train", "val", "test")}
        if kind == "ann_escape":
            splits["train"][1] = _item(1, "train", "../../secret.png")
        elif kind == "ann_absolute":
            splits["val"][0] = _item(0, "val", "/etc/passwd")
        elif kind == "ann_empty_train":
            splits["train"] = []
        elif kind == "ann_empty_val":
            splits["val"] = []
        elif kind == "ann_no_val":
            del splits["val"]
        elif kind == "ann_no_report":
            del splits["train"][0]["report"]
        elif kind == "ann_no_id":
            del splits["test"][1]["id"]
        elif kind == "ann_report_number":
            splits["train"][0]["report"] = 42
        elif kind == "ann_blank_report":
            splits["train"][0]["report"] = "   "
        elif kind == "ann_paths_not_list":
            splits["train"][0]["image_path"] = {"a": 1}
        elif kind == "ann_bad_labels":
            splits["train"][0]["labels"] = [1, 2]
        elif kind == "ann_bad_category":
            splits["train"][0]["categories"] = ["Dragon"]
        elif kind == "ann_split_not_list":
            splits["test"] = {"x": 1}
        names["ann"] = str(_write_data(tmp / "bad", splits))
        if kind == "ann_missing_image":
            (tmp / "bad" / "images" / "val1.png").unlink()
    elif kind == "annfile_not_json":
        (tmp / "bad").mkdir()
        (tmp / "bad" / "annotation.json").write_text("{not json")
        names["ann"] = str(tmp / "bad" / "annotation.json")
    elif kind == "annfile_not_object":
        (tmp / "bad").mkdir()
        (tmp / "bad" / "annotation.json").write_text("[1, 2]")
        names["ann"] = str(tmp / "bad" / "annotation.json")
    elif kind == "model_no_weights":
        (tmp / "m").mkdir()
        (tmp / "m" / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
    elif kind == "model_no_config":
        (tmp / "m").mkdir()
        (tmp / "m" / "model.safetensors").write_bytes(b"\0" * 16)
    elif kind == "model_corrupt_weights":
        (tmp / "m").mkdir()
        (tmp / "m" / "config.json").write_text('{"model_type": "qwen2_5_vl"}')
        (tmp / "m" / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    elif kind.startswith("stage_"):
        m = tmp / "stage" / "model"
        m.mkdir(parents=True)
        if kind != "stage_no_spec":
            (m / "spec.json").write_text("{broken" if kind == "stage_bad_spec" else
                                         json.dumps({"stage": "sft"} if kind == "stage_spec_no_base" else
                                                    {"base": str(tmp / "nobase"), "stage": "sft"}))
        if kind not in ("stage_no_weights",):
            (m / "trainable.safetensors").write_bytes(b"x")
    elif kind in ("other_stage", "other_config", "bad_manifest"):
        out = tmp / "out"
        out.mkdir()
        cfg = {"seed": 0, "rl": {"reward": "bleu4"}}
        manifest = {"stage": "warmup" if kind == "other_stage" else "rl", "config": cfg}
        (out / "manifest.json").write_text("{oops" if kind == "bad_manifest" else json.dumps(manifest))
    return names


REAL = ["data.dataset=mimic_cxr", "data.annotation={ann}", "data.synth_dir={tmp}/phantom", "out_dir={out}",
        "cache_dir={tmp}/cache", "model.path={tmp}/m"]

# (case id, setup kind, argv, substrings the one-line message must contain)
CASES = [
    # -- numeric ranges: every kind of knob --
    ("lr_inf", "", ["train", "rl", "train.lr=.inf"], ["'train.lr'", "finite"]),
    ("lr_negative", "", ["train", "rl", "train.lr=-1"], ["'train.lr'", "> 0"]),
    ("lr_zero", "", ["train", "warmup", "train.lr=0"], ["'train.lr'"]),
    ("epochs_zero", "", ["train", "warmup", "train.epochs=0"], ["'train.epochs'"]),
    ("epochs_nan", "", ["train", "warmup", "train.epochs=.nan"], ["'train.epochs'", "finite"]),
    ("batch_zero", "", ["train", "sft", "train.batch_size=0"], ["'train.batch_size'"]),
    ("wd_negative", "", ["train", "sft", "train.weight_decay=-0.1"], ["'train.weight_decay'"]),
    ("warmup_negative", "", ["train", "rl", "train.warmup_steps=-1"], ["'train.warmup_steps'"]),
    ("clip_negative", "", ["train", "rl", "train.grad_clip=-1"], ["'train.grad_clip'"]),
    ("clip_inf", "", ["train", "rl", "train.grad_clip=.inf"], ["'train.grad_clip'", "finite"]),
    ("max_steps_zero", "", ["train", "rl", "train.max_steps=0"], ["'train.max_steps'"]),
    ("ckpt_negative", "", ["train", "rl", "train.checkpoint_every=-5"], ["'train.checkpoint_every'"]),
    ("log_every_zero", "", ["train", "rl", "train.log_every=0"], ["'train.log_every' = 0", "removed"]),
    ("scheduler_name", "", ["train", "rl", "train.scheduler=linear"], ["'train.scheduler'", "linear"]),
    ("vision_mult_negative", "", ["train", "warmup", "train.vision_lr_mult=-1"], ["'train.vision_lr_mult'"]),
    ("eps_low_negative", "", ["train", "rl", "rl.eps_low=-5"], ["'rl.eps_low'", "-5"]),
    ("eps_low_one", "", ["train", "rl", "rl.eps_low=1"], ["'rl.eps_low'"]),
    ("eps_high_negative", "", ["train", "rl", "rl.eps_high=-0.1"], ["'rl.eps_high'"]),
    ("top_k_negative", "", ["train", "rl", "rl.top_k=-3"], ["'rl.top_k'", "-3"]),
    ("top_p_zero", "", ["train", "rl", "rl.top_p=0"], ["'rl.top_p'"]),
    ("top_p_big", "", ["train", "rl", "rl.top_p=1.5"], ["'rl.top_p'"]),
    ("temperature_zero", "", ["train", "rl", "rl.temperature=0"], ["'rl.temperature'"]),
    ("group_size_one", "", ["train", "rl", "rl.group_size=1"], ["'rl.group_size'"]),
    ("prompts_zero", "", ["train", "rl", "rl.prompts_per_step=0"], ["'rl.prompts_per_step'"]),
    ("beta_order", "", ["train", "rl", "rl.beta_min=0.2"], ["beta_min", "override 'rl.beta_min=0.2'"]),
    ("beta_max_inf", "", ["train", "rl", "rl.beta_max=.inf"], ["'rl.beta_max'", "finite"]),
    ("kl_target_zero", "", ["train", "rl", "rl.kl_target=0"], ["'rl.kl_target'"]),
    ("kl_horizon_zero", "", ["train", "rl", "rl.kl_horizon=0"], ["'rl.kl_horizon'"]),
    ("ema_rate_two", "", ["train", "rl", "rl.ema_rate=2"], ["'rl.ema_rate'"]),
    ("old_sync_zero", "", ["train", "rl", "rl.old_sync_every=0"], ["'rl.old_sync_every'"]),
    ("reset_zero", "", ["train", "rl", "rl.reset_every_epochs=0"], ["'rl.reset_every_epochs'"]),
    ("val_every_zero", "", ["train", "rl", "rl.val_every_steps=0"], ["'rl.val_every_steps'"]),
    ("max_new_zero", "", ["train", "rl", "rl.max_new_tokens=0"], ["'rl.max_new_tokens'"]),
    ("min_over_max", "", ["train", "rl", "rl.min_new_tokens=500"], ["'rl.min_new_tokens'"]),
    ("rep_penalty_zero", "", ["train", "rl", "rl.repetition_penalty=0"], ["'rl.repetition_penalty'"]),
    ("dual_clip_small", "", ["train", "rl", "rl.dual_clip=0.5"], ["'rl.dual_clip'"]),
    ("entropy_negative", "", ["train", "rl", "rl.entropy_coef=-1"], ["'rl.entropy_coef'"]),
    ("lp_temp_zero", "", ["train", "rl", "rl.logprob_temperature=0"], ["'rl.logprob_temperature'"]),
    ("val_lambda_negative", "", ["train", "rl", "rl.val_lambda=-1"], ["'rl.val_lambda'"]),
    ("samples_negative", "", ["train", "rl", "rl.samples_every=-1"], ["'rl.samples_every'"]),
    ("seed_negative", "", ["train", "warmup", "seed=-1"], ["'seed'", "-1"]),
    ("seed_text", "", ["train", "warmup", "seed=abc"], ["'seed'", "integer"]),
    ("image_size", "", ["train", "warmup", "model.image_size=100"], ["'model.image_size'"]),
    ("lora_r_zero", "", ["train", "sft", "model.lora_r=0"], ["'model.lora_r'"]),
    ("lora_dropout_one", "", ["train", "sft", "model.lora_dropout=1"], ["'model.lora_dropout'"]),
    ("synth_n_small", "", ["train", "warmup", "data.synth_n=5"], ["'data.synth_n'"]),
    ("max_train_zero", "", ["train", "warmup", "data.max_train=0"], ["'data.max_train'"]),
    ("classifier_lr_zero", "", ["classifier", "train", "classifier.lr=0"], ["'classifier.lr'"]),
    ("classifier_beta2", "", ["classifier", "train", "classifier.adam_beta2=1"], ["'classifier.adam_beta2'"]),
    ("pretrain_lr", "", ["train", "pretrain", "pretrain.lr=-1"], ["'pretrain.lr'"]),
    ("gen_batch_zero", "", ["train", "rl", "generation.batch_size=0"], ["'generation.batch_size'"]),
    # -- names: checked before anything loads --
    ("regularizer_name", "", ["train", "rl", "rl.regularizer=kl"], ["'rl.regularizer'", "kl"]),
    ("reference_name", "", ["train", "rl", "rl.reference=moving"], ["'rl.reference'"]),
    ("estimator_name", "", ["train", "rl", "rl.kl_estimator=k4"], ["'rl.kl_estimator'"]),
    ("aggregation_name", "", ["train", "rl", "rl.aggregation=sum"], ["'rl.aggregation'"]),
    ("val_score_name", "", ["train", "rl", "rl.val_score=x"], ["'rl.val_score'"]),
    ("rg_metric_name", "", ["train", "rl", "rl.val_rg_metric=bleu"], ["'rl.val_rg_metric'"]),
    ("weighting_name", "", ["train", "rl", "rl.token_weighting=x"], ["'rl.token_weighting'"]),
    ("reward_name", "", ["train", "rl", "rl.reward=nope"], ["'rl.reward'", "nope", "bleu4"]),
    ("dtype_name", "", ["train", "warmup", "model.dtype=int8"], ["'model.dtype'"]),
    ("device_name", "", ["train", "warmup", "model.device=tpu"], ["'model.device'"]),
    ("preset_name", "", ["train", "warmup", "model.preset=gpt"], ["'model.preset'"]),
    ("dataset_name", "", ["train", "warmup", "data.dataset=chexpert"], ["'data.dataset'"]),
    ("subset_name", "", ["train", "warmup", "data.train_subset=all"], ["'data.train_subset'"]),
    ("ce_backend_name", "", ["eval", "--model", "{tmp}/m", "eval.ce_backend=x"], ["'eval.ce_backend'"]),
    ("split_name", "", ["eval", "--model", "{tmp}/m", "--split", "dev"], ["--split", "dev"]),
    ("unknown_key", "", ["train", "rl", "rl.bogus=1"], ["unknown key 'rl.bogus'"]),
    ("section_scalar", "", ["train", "rl", "train=3"], ["'train'", "mapping"]),
    ("annotation_required", "", ["train", "warmup", "data.dataset=mimic_cxr"], ["'data.annotation'"]),
    # -- config files --
    ("config_missing", "", ["train", "rl", "{tmp}/nope.yaml"], ["nope.yaml"]),
    ("yaml_latin1", "yaml_latin1", ["train", "rl", "{tmp}/c.yaml"], ["c.yaml", "UTF-8"]),
    ("yaml_invalid", "yaml_invalid", ["train", "rl", "{tmp}/c.yaml"], ["c.yaml", "YAML"]),
    ("yaml_list", "yaml_list", ["train", "rl", "{tmp}/c.yaml"], ["c.yaml", "mapping"]),
    ("yaml_cycle", "yaml_cycle", ["train", "rl", "{tmp}/c.yaml"], ["c.yaml", "d.yaml", "cycle"]),
    ("yaml_self_base", "yaml_self", ["train", "rl", "{tmp}/c.yaml"], ["c.yaml", "cycle"]),
    ("yaml_base_missing", "yaml_base_missing", ["train", "rl", "{tmp}/c.yaml"], ["gone.yaml"]),
    ("yaml_base_not_str", "yaml_base_not_str", ["train", "rl", "{tmp}/c.yaml"], ["c.yaml", "'base'"]),
    ("yaml_bad_key", "yaml_bad_key", ["train", "rl", "{tmp}/c.yaml", "seed=1"], ["c.yaml", "'train.lrr'"]),
    ("yaml_bad_value", "yaml_bad_value", ["train", "rl", "{tmp}/c.yaml"], ["c.yaml", "'rl.eps_low'"]),
    ("override_blamed", "yaml_good", ["train", "rl", "{tmp}/c.yaml", "train.lr=-1"],
     ["override 'train.lr=-1'"]),
    ("override_type_blamed", "yaml_good", ["train", "rl", "{tmp}/c.yaml", "rl.top_k=x"],
     ["override 'rl.top_k=x'", "'rl.top_k'"]),
    ("preset_extra_key", "preset_bad", ["train", "rl", "{tmp}/c.yaml"], ["c.yaml", "'extra'"]),
    ("two_configs", "yaml_good", ["train", "rl", "{tmp}/c.yaml", "{tmp}/c.yaml"], ["c.yaml", "one CONFIG"]),
    # -- folders and run state --
    ("out_dir_file", "out_file", ["train", "warmup", "out_dir={out}/sub"], ["out_dir", "is a file"]),
    ("other_stage", "other_stage", ["train", "rl", "out_dir={out}"], ["manifest.json", "'warmup'", "--restart"]),
    ("other_config", "other_config", ["train", "rl", "out_dir={out}", "rl.reward=chexpert_f1"],
     ["manifest.json", "rl.reward", "chexpert_f1"]),
    ("bad_manifest", "bad_manifest", ["train", "rl", "out_dir={out}"], ["manifest.json", "unreadable"]),
    ("annotation_missing", "", ["train", "warmup", "data.dataset=mimic_cxr", "data.annotation={tmp}/no.json"],
     ["'data.annotation'", "no.json"]),
    ("image_dir_missing", "", ["train", "warmup", "data.dataset=mimic_cxr", "data.annotation={ann}",
                               "data.image_dir={tmp}/noimg"], ["'data.image_dir'", "noimg"]),
    ("model_no_weights", "model_no_weights", ["train", "warmup", *REAL], ["'model.path'", "no weights"]),
    ("model_no_config", "model_no_config", ["train", "warmup", *REAL], ["'model.path'", "config.json"]),
    ("model_corrupt", "model_corrupt_weights", ["train", "warmup", *REAL], ["/m", "cannot load"]),
    ("init_missing", "", ["train", "rl", "init_from={tmp}/none/model"], ["'init_from'", "not found"]),
    ("init_no_spec", "stage_no_spec", ["train", "rl", "init_from={tmp}/stage/model"], ["'init_from'", "spec.json"]),
    ("init_bad_spec", "stage_bad_spec", ["train", "rl", "init_from={tmp}/stage/model"], ["spec.json", "JSON"]),
    ("init_spec_no_base", "stage_spec_no_base", ["train", "rl", "init_from={tmp}/stage/model"],
     ["spec.json", "'base'"]),
    ("init_no_weights", "stage_no_weights", ["train", "rl", "init_from={tmp}/stage/model"],
     ["trainable.safetensors"]),
    ("sft_classifier_missing", "", ["train", "sft", "classifier.dir={tmp}/noclf"], ["'classifier.dir'", "noclf"]),
    ("sft_no_classifier", "", ["train", "sft"], ["classifier.dir"]),
    ("eval_model_missing", "", ["eval", "--model", "{tmp}/nomodel"], ["nomodel"]),
    ("experiment_missing", "", ["experiment", "run", "{tmp}/nostudy.yaml"], ["nostudy.yaml"]),
    ("search_missing", "", ["search", "run", "{tmp}/nosearch.yaml"], ["nosearch.yaml"]),
    ("seeds_list", "", ["experiment", "list", "experiments/demo_rl_ablation.yaml", "--seeds", "a,b"], ["--seeds"]),
    # -- data: checked before the model loads --
    ("image_escape", "ann_escape", ["train", "warmup", *REAL], ["annotation.json", "train1", "leaves the image"]),
    ("image_absolute", "ann_absolute", ["train", "warmup", *REAL], ["annotation.json", "/etc/passwd"]),
    ("image_missing", "ann_missing_image", ["train", "warmup", *REAL], ["val1.png", "not found"]),
    ("empty_train", "ann_empty_train", ["train", "rl", *REAL], ["annotation.json", "train split is empty"]),
    ("empty_val", "ann_empty_val", ["train", "warmup", *REAL], ["annotation.json", "val split is empty"]),
    ("no_val_split", "ann_no_val", ["train", "warmup", *REAL], ["annotation.json", "'val'"]),
    ("no_report", "ann_no_report", ["train", "warmup", *REAL], ["annotation.json", "train0", "'report'"]),
    ("no_id", "ann_no_id", ["train", "warmup", *REAL], ["annotation.json", "'id'"]),
    ("report_number", "ann_report_number", ["train", "warmup", *REAL], ["annotation.json", "train0", "string"]),
    ("report_blank", "ann_blank_report", ["train", "warmup", *REAL], ["annotation.json", "train0", "empty"]),
    ("paths_not_list", "ann_paths_not_list", ["train", "warmup", *REAL], ["annotation.json", "'image_path'"]),
    ("bad_labels", "ann_bad_labels", ["train", "warmup", *REAL], ["annotation.json", "'labels'"]),
    ("bad_category", "ann_bad_category", ["train", "warmup", *REAL], ["annotation.json", "Dragon"]),
    ("split_not_list", "ann_split_not_list", ["train", "warmup", *REAL], ["annotation.json", "'test'"]),
    ("annotation_not_json", "annfile_not_json", ["train", "warmup", *REAL], ["annotation.json", "JSON"]),
    ("annotation_not_object", "annfile_not_object", ["train", "warmup", *REAL], ["annotation.json", "object"]),
    ("synth_n_zero", "", ["data", "synth", "--n", "0", "--out", "{tmp}/d"], ["n"]),
]


def _looks_finished(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name == "metrics.json" or (p.name == "spec.json" and
                                                                      p.parent.name == "model" and
                                                                      p.parent.parent.name != "stage")]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_one_clear_line(case, tmp_path, capsys, monkeypatch):
    _, kind, argv, expected = case
    monkeypatch.chdir(tmp_path)  # default folders (runs/...) land here, never in the repository
    names = _setup(tmp_path, kind)
    args = [a.format(**names) for a in argv]
    if args[0] in ("train", "classifier", "eval"):
        args.append("--no-progress")
        if not any(a.startswith("data.synth_dir=") for a in args):
            args.append(f"data.synth_dir={tmp_path}/phantom")
    if args[:2] == ["experiment", "list"]:
        args[2] = str(Path(__file__).resolve().parents[2] / args[2])
    before = {p.relative_to(tmp_path) for p in tmp_path.rglob("*")}
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    after = {p.relative_to(tmp_path) for p in tmp_path.rglob("*")}
    assert not (after - before), sorted(map(str, after - before))
    assert len(err.splitlines()) == 1, err
    for text in expected:
        assert text in err, f"{text!r} not in: {err}"
    assert "Traceback" not in err
    assert not _looks_finished(tmp_path)
    assert not (tmp_path / "phantom").exists()  # nothing was built before the check


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 60


def _png(path: Path) -> Path:
    Image.new("L", (40, 40), 100).save(path)
    return path


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_corrupt_images_name_the_file(tmp_path, damage):
    from harness.data.datasets import load_image

    p = _png(tmp_path / "x.png")
    data = p.read_bytes()
    p.write_bytes({"garbage": b"\x89PNG not really", "truncated": data[: len(data) // 2], "empty": b""}[damage])
    with pytest.raises(ValueError, match=r"x\.png: not a readable image"):
        load_image(p, 28)


def test_debug_shows_the_traceback(tmp_path, capsys):
    assert main(["--debug", "train", "rl", "rl.top_k=-3", f"out_dir={tmp_path}/o"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "'rl.top_k'" in err
    assert main(["train", "rl", "rl.top_k=-3", "--debug", f"out_dir={tmp_path}/o"]) == 2  # anywhere on the line
    assert "Traceback" in capsys.readouterr().err


def test_sft_without_a_classifier_is_refused_before_stage_0(tmp_path, capsys, monkeypatch):
    # `train sft` builds the tiny base first (prepare_base); the missing classifier.dir is one of the cheap checks
    # that come before it, not minutes of stage 0 later.
    import harness.stages.pretrain

    def no_stage0(cfg, progress=False):
        raise AssertionError("stage 0 was built before the check")

    monkeypatch.setattr(harness.stages.pretrain, "build_base", no_stage0)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "sft", "--no-progress", f"data.synth_dir={tmp_path}/phantom"]) == 2
    assert "needs 'classifier.dir'" in capsys.readouterr().err
