from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import ConfigError, RunConfig, load_config


def test_defaults_yaml_and_overrides(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("seed: 3\ntrain:\n  lr: 0.01\n  epochs: 2\n")
    child = tmp_path / "child.yaml"
    child.write_text("base: base.yaml\ntrain:\n  epochs: 5\n")
    cfg = load_config(child, ["train.batch_size=4", "model.lora_dropout=0.2", "init_from=null"])
    assert isinstance(cfg, RunConfig)
    assert (cfg.seed, cfg.train.lr, cfg.train.epochs, cfg.train.batch_size) == (3, 0.01, 5.0, 4)
    assert cfg.model.lora_dropout == 0.2 and cfg.init_from is None


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.lrr=1", "unknown key 'train.lrr'"),
        ("train.batch_size=abc", "'train.batch_size' must be an integer"),
        ("train.lr=-1", "'train.lr' = -1.0 must be > 0"),
        ("model.preset=gpt", "'model.preset' = 'gpt'"),
        ("model.image_size=100", "multiple of 28"),
        ("data.views=0", "'data.views' = 0 must be >= 1 or null"),
        ("train.micro_batch_size=0", "'train.micro_batch_size' = 0 must be > 0 or null"),
        ("data.dataset=mimic_cxr", "'data.annotation'"),
        ("nosection", "must look like key.sub=value"),
        ("train=3", "'train' must be a mapping"),
        ("rl.select=best", "'rl.select' = 'best' must be best_val or final"),
        ("rl.old_sync=sometimes", "'rl.old_sync' = 'sometimes'"),
        ("rl.aggregation=dr_grpo", "'rl.advantage_scale' = 'std' must be none with rl.aggregation=dr_grpo"),
        ("rl.advantage_scale=max", "'rl.advantage_scale' = 'max'"),
        ("rl.kl_target=0", "'rl.kl_target' = 0.0 must be > 0"),
        ("model.train_format_tokens=true", "'model.train_format_tokens' = True needs prompt.output_format"),
        ("model.attn_implementation=flash", "'model.attn_implementation' = 'flash' must be \"eager\", \"sdpa\""),
    ],
)
def test_bad_values_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, [override])


def test_missing_and_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [1, 2\n")
    with pytest.raises(ConfigError, match="bad.yaml"):
        load_config(bad)


def test_experiment_presets_are_read_per_stage(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("preset: p\ncommon:\n  seed: 4\n  train: {lr: 0.5}\nstages:\n  rl:\n    train: {lr: 0.25}\n")
    assert load_config(preset, [], stage="rl").train.lr == 0.25
    assert load_config(preset, [], stage="sft").train.lr == 0.5
    assert load_config(preset, ["train.lr=0.1"], stage="rl").train.lr == 0.1
    assert load_config(preset, [], stage="rl").seed == 4
    with pytest.raises(ConfigError, match="experiments preset"):
        load_config(preset, [])


def test_shipped_tiny_preset_resolves_for_every_stage():
    from pathlib import Path

    tiny = Path(__file__).resolve().parents[2] / "experiments" / "presets" / "tiny.yaml"
    assert load_config(tiny, [], stage="sft").model.lora_r == 64
    assert load_config(tiny, [], stage="classifier").classifier.arch == "tiny_cnn"
    assert load_config(tiny, [], stage="rl").rl.regularizer == "constant"


def test_adaptive_horizon_that_could_flip_beta_is_refused():
    # 8 prompts x G 4 = 32 samples per step: a horizon of 6 would let one update multiply beta by 1 - 0.2*32/6 < 0.
    with pytest.raises(ConfigError, match="'rl.kl_horizon' = 6 must exceed 0.2 x prompts_per_step x group_size"):
        load_config(None, ["rl.regularizer=adaptive", "rl.kl_horizon=6"])
    load_config(None, ["rl.regularizer=constant", "rl.kl_horizon=6"])  # unused by other regularizers
    cfg = load_config(None, ["rl.aggregation=dr_grpo", "rl.advantage_scale=none"])
    assert cfg.rl.aggregation == "dr_grpo"


@pytest.mark.parametrize(
    "preset, size, dtype", [("tiny", 112, "float32"), ("qwen2.5-vl-3b", 336, "bfloat16"),
                            ("qwen2.5-vl-7b", 336, "bfloat16")],
)
def test_preset_owns_image_size_and_dtype(preset, size, dtype):
    cfg = load_config(None, [f"model.preset={preset}"])
    assert (cfg.model.image_size, cfg.model.dtype) == (size, dtype)
    # Set explicitly, a value wins over the preset's, in either order of keys.
    cfg = load_config(None, ["model.image_size=224", "model.dtype=float16", f"model.preset={preset}"])
    assert (cfg.model.image_size, cfg.model.dtype) == (224, "float16")
    assert RunConfig().model.image_size == 112 and RunConfig().model.dtype == "float32"


@pytest.mark.parametrize("preset, attn", [("tiny", "eager"), ("qwen2.5-vl-7b", "sdpa")])
def test_preset_owns_the_attention_kernels_and_the_tiny_preset_files_pick_sdpa(preset, attn):
    assert load_config(None, [f"model.preset={preset}"]).model.attn_implementation == attn
    assert load_config(None, ["model.attn_implementation=sdpa", f"model.preset={preset}"]).model.attn_implementation \
        == "sdpa"
    # The studies and the demo read the tiny preset file, which sets sdpa for every stage (issue 27).
    presets = Path(__file__).resolve().parents[2] / "experiments" / "presets"
    for stage in ("warmup", "sft", "rl", "eval"):
        assert load_config(presets / "tiny-bench.yaml", stage=stage).model.attn_implementation == "sdpa"


def test_preset_values_survive_a_round_trip(tmp_path):
    from harness.config import from_dict, to_dict

    cfg = load_config(None, ["model.preset=qwen2.5-vl-7b"])
    again = from_dict(RunConfig, to_dict(cfg))
    assert (again.model.image_size, again.model.dtype) == (336, "bfloat16")
    with pytest.raises(ConfigError, match="'model.preset' = 'gpt'"):
        load_config(None, ["model.preset=gpt"])


@pytest.mark.parametrize("preset, expected", [("mimic-qwen2.5vl-7b", "cxr"), ("iuxray-qwen2.5vl-3b", "cxr"),
                                              ("tiny", "imagenet")])
def test_classifier_normalisation_of_the_presets(preset, expected):
    """The real presets normalise the classifier's input with CXR statistics as the official code does; the tiny
    preset keeps ImageNet's (the default)."""
    path = Path(__file__).resolve().parents[2] / "experiments" / "presets" / f"{preset}.yaml"
    cfg = load_config(path, ["data.annotation=ann.json"], stage="classifier")
    assert cfg.classifier.normalization == expected
    assert RunConfig().classifier.normalization == "imagenet"


def test_classifier_normalisation_typo_fails_at_load():
    with pytest.raises(ConfigError, match="classifier.normalization.*must be cxr or imagenet"):
        load_config(None, ["classifier.normalization=chexpert"])


_PAPER_PRESETS = ("mimic-qwen2.5vl-7b", "mimic-qwen2.5vl-3b", "iuxray-qwen2.5vl-7b", "iuxray-qwen2.5vl-3b")


@pytest.mark.parametrize("preset", [*_PAPER_PRESETS, "tiny", "tiny-bench", "tiny-power"])
def test_paper_presets_follow_the_official_code_where_it_differs_from_the_text(preset):
    """Issue 24 (docs/paper_vs_code.md): the paper presets take the official code's loss normaliser (1 prompt per
    GPU: group_token_mean), current-policy dropout, validation score and MIMIC-CXR cleaning; the tiny presets keep
    the project's defaults, so the demo's numbers do not move."""
    path = Path(__file__).resolve().parents[2] / "experiments" / "presets" / f"{preset}.yaml"
    cfg = load_config(path, ["data.annotation=ann.json"], stage="rl")
    paper = preset in _PAPER_PRESETS
    official = ("group_token_mean", True, "official") if paper else ("token_mean", False, "paper")
    assert (cfg.rl.aggregation, cfg.rl.policy_dropout, cfg.rl.val_score) == official
    assert cfg.model.lora_dropout == 0.1 or not paper
    cleaning = "reva_po" if preset.startswith("mimic") else "r2gen"
    for stage in ("warmup", "sft", "rl", "eval"):  # every stage reads the same references
        assert load_config(path, ["data.annotation=ann.json"], stage=stage).data.report_cleaning == cleaning


@pytest.mark.parametrize("name, changed", [
    ("tiny-power-fast", {"classifier": {"classifier.amp_bf16": True},
                         "rl": {"generation.backend": "fused", "rl.lora_pass": "merged"}}),
    ("tiny-power-rl-fast", {"rl": {"generation.backend": "fused", "rl.lora_pass": "merged",
                                   "rl.prompt_pass": "shared"}}),
])
def test_the_fast_presets_change_only_their_speed_options(name, changed):
    """issue 27: experiments/presets/tiny-power-fast.yaml changes only the classifier's precision and the RL
    sampler and LoRA pass, tiny-power-rl-fast.yaml only the three RL options; every other field of every stage is
    tiny-power's."""
    from harness.config import to_dict

    presets = Path(__file__).resolve().parents[2] / "experiments" / "presets"
    for stage in ("warmup", "classifier", "sft", "rl", "eval"):
        fast, power = (to_dict(load_config(presets / f"{preset}.yaml", stage=stage))
                       for preset in (name, "tiny-power"))
        differences = {f"{section}.{k}": v for section, values in fast.items() if isinstance(values, dict)
                       for k, v in values.items() if power[section][k] != v}
        assert differences == changed.get(stage, {}), stage
