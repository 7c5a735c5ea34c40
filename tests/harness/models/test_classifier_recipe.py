"""The official REVA-PO classifier recipe (issue 42): Medical-MAE checkpoint loading, layer-wise LR decay, the
DeepSpeed warm-up cosine, and keeping the epoch with the best mean AUC."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from harness.constants import NUM_OBSERVATIONS
from harness.models.classifier import ClassifierConfig, build_classifier, train_classifier
from harness.models.classifier.medical_mae import load_medical_mae, medical_mae_state
from harness.models.classifier.optim import build_optimizer, layer_decay_param_groups, warmup_cosine_factor
from harness.models.classifier.selection import mean_auc, scorable_labels

IMG = 64
SMALL_VIT = {"patch_size": 16, "embed_dim": 32, "depth": 4, "num_heads": 2, "mlp_ratio": 2.0}


def small_vit(num_classes: int = NUM_OBSERVATIONS, img_size: int = IMG, global_pool: str = "avg", seed: int = 0):
    """timm's VisionTransformer (the class of vit_base_patch16_224) at small sizes."""
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(seed)
    return VisionTransformer(img_size=img_size, num_classes=num_classes, global_pool=global_pool, **SMALL_VIT)


def tiny_cfg(**overrides) -> ClassifierConfig:
    return ClassifierConfig.preset("tiny", **{"img_size": IMG, "global_pool": "avg", "seed": 3, **overrides})


def finetuned_checkpoint(path: Path, source: nn.Module) -> Path:
    """A checkpoint as Medical-MAE's fine-tuning saves it (util/misc.py save_model: model, optimizer, epoch,
    scaler, args as an argparse.Namespace); the head has CheXpert's 5 classes here, not 14."""
    torch.save({"model": source.state_dict(), "optimizer": {"state": {}, "param_groups": []}, "epoch": 74,
                "scaler": {"scale": 1024.0}, "args": argparse.Namespace(model="vit_base_patch16", blr=2.5e-4,
                                                                        layer_decay=0.55, nb_classes=5)}, path)
    return path


def pretraining_checkpoint(path: Path, source: nn.Module) -> Path:
    """An MAE pre-training checkpoint: the encoder with its final norm, plus mask_token and the decoder."""
    state = {k: v for k, v in source.state_dict().items() if not k.startswith(("head.", "fc_norm."))}
    dim = SMALL_VIT["embed_dim"]
    state.update({"norm.weight": torch.randn(dim), "norm.bias": torch.randn(dim), "mask_token": torch.zeros(1, 1, 16),
                  "decoder_embed.weight": torch.randn(16, dim), "decoder_pos_embed": torch.zeros(1, 17, 16),
                  "decoder_blocks.0.norm1.weight": torch.ones(16), "decoder_norm.weight": torch.ones(16),
                  "decoder_pred.weight": torch.randn(768, 16)})
    torch.save({"model": state, "args": argparse.Namespace(mask_ratio=0.75)}, path)
    return path


# --------------------------------------------------------------------------------------- Medical-MAE loading


def test_medical_mae_finetuned_checkpoint_maps_every_tensor_but_the_head(tmp_path):
    source = small_vit(num_classes=5, seed=1)
    path = finetuned_checkpoint(tmp_path / "vit-b_CXR_0.5M_mae_CheXpert.pth", source)
    model = small_vit(seed=2)
    fresh_head = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("head.")}
    report = load_medical_mae(model, path)
    own = model.state_dict()
    assert report["initialised"] == ["head.bias", "head.weight"]  # none missing but the head
    assert report["dropped"] == ["head.bias", "head.weight"]  # CheXpert's 5-class head
    assert sorted(report["loaded"]) == sorted(k for k in own if not k.startswith("head."))
    assert "fc_norm.weight" in report["loaded"] and "blocks.3.mlp.fc2.weight" in report["loaded"]
    for key in report["loaded"]:
        assert torch.equal(own[key], source.state_dict()[key]), key
    for key, value in fresh_head.items():  # the 14-label head keeps its seeded initialisation
        assert torch.equal(own[key], value)


def test_medical_mae_pretraining_checkpoint_drops_the_decoder(tmp_path):
    source = small_vit(seed=1)
    model = small_vit(seed=2)
    report = load_medical_mae(model, pretraining_checkpoint(tmp_path / "vit-b_CXR_0.5M_mae.pth", source))
    assert report["initialised"] == ["fc_norm.bias", "fc_norm.weight", "head.bias", "head.weight"]
    assert {"mask_token", "decoder_pos_embed", "decoder_pred.weight", "norm.weight"} <= set(report["dropped"])
    assert torch.equal(model.state_dict()["blocks.2.attn.qkv.weight"], source.state_dict()["blocks.2.attn.qkv.weight"])


def test_medical_mae_through_the_config_builds_the_same_weights(tmp_path):
    """classifier.pretrained_format = medical_mae in build_classifier, with a timm ViT name (ViT-Ti/16 here: the
    same class and names as the presets' ViT-B/16, 5.7M parameters)."""
    import timm

    source = timm.create_model("vit_tiny_patch16_224", num_classes=5, global_pool="avg", img_size=IMG)
    path = finetuned_checkpoint(tmp_path / "ckpt.pth", source)
    cfg = ClassifierConfig.preset("tiny", arch="vit_tiny_patch16_224", img_size=IMG, global_pool="avg",
                                  pretrained_path=str(path), pretrained_format="medical_mae", drop_path=0.2)
    model = build_classifier(cfg)
    own, theirs = model.state_dict(), source.state_dict()
    assert all(torch.equal(own[k], theirs[k]) for k in own if not k.startswith("head."))
    assert own["head.weight"].shape == (NUM_OBSERVATIONS, 192)
    assert model.blocks[-1].drop_path1.drop_prob == pytest.approx(0.2)  # timm's stochastic depth, as official
    # The tiny preset's ViT is another size: the layout check refuses the file, naming it.
    with pytest.raises(ValueError, match=r"ckpt\.pth.*medical_mae"):
        build_classifier(ClassifierConfig.preset("tiny", img_size=IMG, pretrained_path=str(path),
                                                 pretrained_format="medical_mae"))


def test_vit_b16_keys_of_a_medical_mae_checkpoint_all_map():
    """Real ViT-B/16 names and shapes (on the meta device: no memory, no time): every tensor of the preset's
    `vit_base_patch16_224` comes from the checkpoint except the 14-label head."""
    import timm

    with torch.device("meta"):
        model = timm.create_model("vit_base_patch16_224", num_classes=NUM_OBSERVATIONS, global_pool="avg")
        source = timm.create_model("vit_base_patch16_224", num_classes=5, global_pool="avg")
    kept, report = medical_mae_state(model, dict(source.state_dict()), "vit-b_CXR_0.5M_mae_CheXpert.pth")
    assert report["initialised"] == ["head.bias", "head.weight"]
    assert len(report["loaded"]) == len(model.state_dict()) - 2 == 150
    assert {k: tuple(v.shape) for k, v in kept.items()} == {
        k: tuple(v.shape) for k, v in model.state_dict().items() if not k.startswith("head.")}


def test_medical_mae_position_embedding_resampled_with_timm(tmp_path):
    from timm.layers import resample_abs_pos_embed

    source = small_vit(img_size=2 * IMG, seed=1)  # an 8x8 grid into the model's 4x4
    model = small_vit(seed=2)
    load_medical_mae(model, finetuned_checkpoint(tmp_path / "big.pth", source))
    expected = resample_abs_pos_embed(source.pos_embed.detach(), new_size=[4, 4], old_size=[8, 8],
                                      num_prefix_tokens=1, antialias=False)
    assert torch.allclose(model.pos_embed.detach(), expected)


def test_medical_mae_refuses_other_layouts_naming_file_and_keys(tmp_path):
    source = small_vit(num_classes=5, seed=1)
    state = source.state_dict()
    lacking = {k: v for k, v in state.items() if k != "blocks.1.attn.proj.weight"}
    torch.save({"model": lacking}, tmp_path / "lacking.pth")
    with pytest.raises(ValueError, match=r"lacking\.pth.*lacks 1 tensors.*blocks\.1\.attn\.proj\.weight"):
        load_medical_mae(small_vit(), tmp_path / "lacking.pth")
    torch.save({"model": {f"encoder.{k}": v for k, v in state.items()}}, tmp_path / "other.pth")
    with pytest.raises(ValueError, match=r"other\.pth.*not in the VisionTransformer.*encoder\.blocks"):
        load_medical_mae(small_vit(), tmp_path / "other.pth")
    deeper = small_vit(seed=1)
    torch.save({"model": {**state, "blocks.4.norm1.weight": torch.ones(32)}}, tmp_path / "deeper.pth")
    with pytest.raises(ValueError, match=r"deeper\.pth.*blocks\.4\.norm1\.weight"):
        load_medical_mae(deeper, tmp_path / "deeper.pth")


def test_medical_mae_still_refuses_other_pickled_objects(tmp_path):
    torch.save({"model": small_vit().state_dict(), "note": nn.Linear(2, 2)}, tmp_path / "objects.pth")
    with pytest.raises(ValueError, match="objects.pth.*pickled Python objects"):
        load_medical_mae(small_vit(), tmp_path / "objects.pth")


# ------------------------------------------------------------------------------------------- layer decay


def test_layer_decay_groups_decay_by_0_55_per_block():
    model = small_vit()
    depth = SMALL_VIT["depth"]
    groups = layer_decay_param_groups(model, lr=1.5e-3, weight_decay=0.05, layer_decay=0.55)
    scale_of = {id(p): g["lr_scale"] for g in groups for p in g["params"]}
    wd_of = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    named = dict(model.named_parameters())
    assert set(scale_of) == {id(p) for p in named.values()}  # every parameter once
    blocks = [scale_of[id(named[f"blocks.{i}.attn.qkv.weight"])] for i in range(depth)]
    for i in range(1, depth):
        assert blocks[i - 1] / blocks[i] == pytest.approx(0.55)
    assert blocks[-1] == pytest.approx(0.55)  # the official counts depth + 1 layers: the last block at 0.55
    for name in ("patch_embed.proj.weight", "cls_token", "pos_embed"):
        assert scale_of[id(named[name])] == pytest.approx(0.55 ** (depth + 1))
    for name in ("fc_norm.weight", "head.weight", "head.bias"):
        assert scale_of[id(named[name])] == pytest.approx(0.55)  # with the last block (official lr_decay.py)
    for g in groups:
        assert g["lr"] == pytest.approx(1.5e-3 * g["lr_scale"])
    no_decay = {n for n, p in named.items() if wd_of[id(p)] == 0.0}
    assert no_decay == {n for n, p in named.items() if p.ndim == 1} | {"cls_token", "pos_embed"}


@pytest.mark.parametrize("global_pool", ["avg", "token"])
def test_layer_decay_is_timms_grouping_but_for_the_head(global_pool):
    """timm's param_groups_layer_decay puts the same parameters together, with the same weight decay and the same
    scales, except the parameters after the blocks that are not the final norm (fc_norm, head): timm gives them a
    layer of their own (scale 1), the official lr_decay.py places them with the last block (scale = decay)."""
    from timm.optim._param_groups import param_groups_layer_decay

    model = small_vit(global_pool=global_pool)
    names = {id(p): n for n, p in model.named_parameters()}
    ours = layer_decay_param_groups(model, lr=1.0, weight_decay=0.05, layer_decay=0.55)
    theirs = param_groups_layer_decay(model, weight_decay=0.05, no_weight_decay_list=model.no_weight_decay(),
                                      layer_decay=0.55)

    def table(groups):
        return {names[id(p)]: (g["lr_scale"], g["weight_decay"]) for g in groups for p in g["params"]}

    a, b = table(ours), table(theirs)
    assert a.keys() == b.keys() == set(names.values())
    for name in a:
        assert a[name][1] == b[name][1], name
        top = name.startswith(("head.", "fc_norm."))
        assert a[name][0] == pytest.approx(b[name][0] * (0.55 if top else 1.0)), name


def test_default_optimizer_is_one_group_with_weight_decay_everywhere():
    model = small_vit()
    opt = build_optimizer(model, tiny_cfg(weight_decay=0.05))
    assert len(opt.param_groups) == 1 and opt.param_groups[0]["weight_decay"] == 0.05
    assert len(opt.param_groups[0]["params"]) == len(list(model.parameters()))


# ---------------------------------------------------------------------------------------------- schedule


def test_warmup_cosine_is_deepspeeds_warmup_cosine_lr_as_the_engine_steps_it():
    """The official numbers (zero_mimic_stage2_cls.json): warm-up 169, total 3,380, cos_min_ratio 0.01; the
    engine runs update k at the learning rate the scheduler set after update k - 1 (0 before the first)."""
    lr_schedules = pytest.importorskip("deepspeed.runtime.lr_schedules")
    for warmup, total, floor in ((169, 3380, 0.01), (32, 640, 0.1), (1, 10, 0.0)):
        opt = torch.optim.AdamW([nn.Parameter(torch.zeros(1))], lr=1.5e-3)
        sched = lr_schedules.WarmupCosineLR(opt, total_num_steps=total, warmup_min_ratio=0.0,
                                            warmup_num_steps=warmup, cos_min_ratio=floor, warmup_type="linear")
        for update in range(total + 20):  # past the end: held at the floor
            assert opt.param_groups[0]["lr"] == pytest.approx(1.5e-3 * warmup_cosine_factor(update, warmup, total,
                                                                                              floor), abs=1e-15)
            sched.step()
    assert warmup_cosine_factor(3379 + 1, 169, 3380, 0.01) == pytest.approx(0.01)  # the floor: 0.01 x lr
    assert warmup_cosine_factor(170, 169, 3380, 0.01) == pytest.approx(1.0, abs=1e-5)


def test_training_applies_schedule_decay_and_clipping(monkeypatch):
    """What the training loop hands to AdamW: each group's lr x the schedule at every update, grads clipped."""
    seen: list[tuple[list[float], float]] = []
    original = torch.optim.AdamW.step

    def spy(self, *a, **k):
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
        seen.append(([g["lr"] for g in self.param_groups], norm))
        return original(self, *a, **k)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(12, 3, 112, 112, generator=gen), (torch.rand(12, NUM_OBSERVATIONS, generator=gen) > 0.5)
    cfg = ClassifierConfig.preset("tiny", epochs=3, batch_size=4, lr=1e-2, layer_decay=0.5, scheduler="warmup_cosine",
                                  warmup_steps=3, min_lr_ratio=0.1, max_grad_norm=1e-3)
    model = build_classifier(cfg)
    train_classifier(model, x, y.float(), None, None, cfg, progress=False)
    bases = [g["lr"] for g in layer_decay_param_groups(model, 1e-2, cfg.weight_decay, 0.5)]
    assert len(seen) == 9
    for update, (lrs, norm) in enumerate(seen):
        factor = warmup_cosine_factor(update, 3, 9, 0.1)
        assert lrs == pytest.approx([b * factor for b in bases])
        assert norm <= 1e-3 * (1 + 1e-4)
    assert seen[0][0] == [0.0] * len(bases)  # DeepSpeed's first update runs at lr 0


# --------------------------------------------------------------------------------------------- selection


class _Scripted(nn.Module):
    """Validation logits fixed per epoch (counted by model.train() calls); a `marker` buffer holds the epoch, so
    the restored weights say which epoch was kept."""

    def __init__(self, val_logits: list[torch.Tensor]):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(NUM_OBSERVATIONS))
        self.register_buffer("marker", torch.zeros(()))
        self.val_logits = val_logits

    def train(self, mode: bool = True):
        if mode:
            self.marker += 1
        return super().train(mode)

    def forward(self, x):
        if self.training:
            return self.w.expand(len(x), -1)
        return self.val_logits[int(self.marker) - 1][: len(x)]


def _constructed_case():
    """Epoch 1 ranks every positive above every negative (AUC 1) but too low (high BCE); epoch 2 is closer in
    probability (lower BCE) but ranks one positive below a negative (AUC 0.75)."""
    y = torch.tensor([1.0, 1.0, 0.0, 0.0]).unsqueeze(1).repeat(1, NUM_OBSERVATIONS)
    epoch1 = torch.tensor([-3.0, -4.0, -5.0, -6.0]).unsqueeze(1).repeat(1, NUM_OBSERVATIONS)
    epoch2 = torch.tensor([2.0, -1.0, -0.5, -3.0]).unsqueeze(1).repeat(1, NUM_OBSERVATIONS)
    return y, [epoch1, epoch2]


@pytest.mark.parametrize("select, kept", [("val_loss", 2), ("mean_auc", 1)])
def test_auc_selection_keeps_another_epoch_than_loss_selection(select, kept):
    y, logits = _constructed_case()
    model = _Scripted(logits)
    cfg = ClassifierConfig.preset("tiny", epochs=2, batch_size=4, select=select)
    history = train_classifier(model, torch.zeros(4, 3, 8, 8), y, torch.zeros(4, 3, 8, 8), y, cfg, progress=False)
    assert history["val_loss"][0] > history["val_loss"][1]
    assert history["best_epoch"] == kept and int(model.marker) == kept  # the kept epoch's weights restored
    if select == "mean_auc":
        assert history["val_mean_auc"] == pytest.approx([1.0, 0.75])
        assert history["best_val_mean_auc"] == pytest.approx(1.0)
    else:
        assert "val_mean_auc" not in history  # the default's history as before


def test_mean_auc_is_sklearns_over_labels_with_both_classes():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    targets = rng.choice([1.0, 0.0, -1.0], size=(30, NUM_OBSERVATIONS))
    targets[:, 3] = 0.0  # no positive
    targets[:, 7] = 1.0  # no negative
    probs = rng.random((30, NUM_OBSERVATIONS))
    labels = scorable_labels(targets)
    assert 3 not in labels and 7 not in labels and len(labels) == NUM_OBSERVATIONS - 2
    expected = np.mean([roc_auc_score(targets[:, c] == 1, probs[:, c]) for c in labels])
    assert mean_auc(probs, targets) == pytest.approx(expected)
    assert mean_auc(probs, np.zeros_like(targets)) is None


def test_auc_selection_needs_a_scorable_validation_split():
    cfg = ClassifierConfig.preset("tiny", epochs=1, batch_size=4, select="mean_auc")
    x = torch.zeros(4, 3, 8, 8)
    with pytest.raises(ValueError, match="select = mean_auc"):
        train_classifier(_Scripted([]), x, torch.zeros(4, NUM_OBSERVATIONS), None, None, cfg, progress=False)
    with pytest.raises(ValueError, match="select = mean_auc"):
        train_classifier(_Scripted([]), x, torch.zeros(4, NUM_OBSERVATIONS), x, torch.zeros(4, NUM_OBSERVATIONS),
                         cfg, progress=False)


# ------------------------------------------------------------------------------- config, presets, keys


def test_new_fields_at_their_defaults_keep_classifier_json_and_run_keys():
    from harness.config import load_config
    from harness.experiments.resolve import _KEYED_WHEN_SET

    cfg = ClassifierConfig.preset("tiny")
    assert not {"layer_decay", "scheduler", "select", "pretrained_format"} & set(cfg.to_dict())
    assert ClassifierConfig.from_dict(cfg.to_dict()) == cfg
    assert "layer_decay" in ClassifierConfig.preset("tiny", layer_decay=0.55).to_dict()
    defaults = load_config(None, []).classifier
    for field in ("pretrained_format", "drop_path", "layer_decay", "scheduler", "warmup_steps", "schedule_steps",
                  "min_lr_ratio", "max_grad_norm", "select"):
        assert _KEYED_WHEN_SET[f"classifier.{field}"] == getattr(defaults, field)


PRESETS = Path(__file__).resolve().parents[3] / "experiments" / "presets"


@pytest.mark.parametrize("preset", ["mimic-qwen2.5vl-7b", "mimic-qwen2.5vl-3b", "iuxray-qwen2.5vl-7b",
                                    "iuxray-qwen2.5vl-3b", "tiny", "tiny-bench"])
def test_presets_take_the_official_classifier_recipe(preset):
    from harness.config import load_config

    c = load_config(PRESETS / f"{preset}.yaml", ["data.annotation=ann.json"], stage="classifier").classifier
    recipe = (c.pretrained_format, c.drop_path, c.layer_decay, c.scheduler, c.warmup_steps, c.schedule_steps,
              c.min_lr_ratio, c.max_grad_norm, c.select)
    if preset.startswith("mimic"):
        assert c.pretrained_path == "weights/vit-b_CXR_0.5M_mae_CheXpert.pth"
        assert recipe == ("medical_mae", 0.2, 0.55, "warmup_cosine", 169, 3380, 0.01, 1.0, "mean_auc")
    elif preset.startswith("iuxray"):
        assert recipe == ("regbench", 0.2, 0.55, "warmup_cosine", 32, 640, 0.1, 1.0, "mean_auc")
    else:  # the tiny presets train as before
        assert recipe == ("regbench", 0.0, None, "constant", 0, None, 0.0, None, "val_loss")


@pytest.mark.parametrize("override, message", [
    ("classifier.select=best_auc", "classifier.select.*must be one of val_loss, mean_auc"),
    ("classifier.scheduler=cosine", "classifier.scheduler.*must be one of constant, warmup_cosine"),
    ("classifier.layer_decay=1.5", "classifier.layer_decay.*1.5.*must be in"),
    ("classifier.pretrained_format=mae", "classifier.pretrained_format.*must be one of"),
    ("classifier.max_grad_norm=0", "classifier.max_grad_norm.*must be > 0"),
])
def test_bad_recipe_values_are_refused_naming_the_key(override, message):
    from harness.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_warmup_cosine_needs_warmup_steps():
    from harness.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="classifier.warmup_steps.*>= 1"):
        load_config(None, ["classifier.scheduler=warmup_cosine"])
    assert math.isclose(load_config(None, ["classifier.scheduler=warmup_cosine", "classifier.warmup_steps=2"])
                        .classifier.warmup_steps, 2)


def test_the_stage_passes_the_recipe_to_the_classifier():
    from harness.config import load_config
    from harness.stages.classifier import classifier_config

    cfg = load_config(PRESETS / "mimic-qwen2.5vl-7b.yaml", ["data.annotation=ann.json"], stage="classifier")
    ccfg = classifier_config(cfg)
    for field in ("pretrained_path", "pretrained_format", "drop_path", "layer_decay", "scheduler", "warmup_steps",
                  "schedule_steps", "min_lr_ratio", "max_grad_norm", "select"):
        assert getattr(ccfg, field) == getattr(cfg.classifier, field), field
    assert (ccfg.layer_decay, ccfg.select) == (0.55, "mean_auc")


@pytest.mark.parametrize("stop_after", [2, 5])  # mid-epoch 1, mid-epoch 2 (3 updates per epoch)
def test_preempted_recipe_run_resumes_to_the_uninterrupted_run(stop_after, tmp_path):
    """The schedule's position, the layer-decay groups, drop path's RNG and the AUC-best state survive a stop."""
    from harness.runs import preemption

    cfg = ClassifierConfig.preset("tiny", img_size=32, epochs=3, batch_size=6, seed=5, drop_path=0.1,
                                  layer_decay=0.55, scheduler="warmup_cosine", warmup_steps=2, min_lr_ratio=0.01,
                                  max_grad_norm=1.0, select="mean_auc")
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(22, 3, 32, 32, generator=g), (torch.rand(22, NUM_OBSERVATIONS, generator=g) > 0.6).float()
    data = (x[:16], y[:16], x[16:], y[16:])
    torch.manual_seed(1)
    whole = build_classifier(cfg)
    want = train_classifier(whole, *data, cfg, progress=False)
    calls = {"n": 0}

    def stop() -> bool:
        calls["n"] += 1
        return calls["n"] >= stop_after

    torch.manual_seed(1)
    with pytest.raises(preemption.Preempted):
        train_classifier(build_classifier(cfg), *data, cfg, progress=False, checkpoint_dir=tmp_path, should_stop=stop)
    torch.manual_seed(123)
    resumed = build_classifier(cfg)
    got = train_classifier(resumed, *data, cfg, progress=False, checkpoint_dir=tmp_path)
    assert got == want and len(got["val_mean_auc"]) == 3
    for k, v in whole.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k]), k


@pytest.mark.slow
def test_real_vit_b16_from_a_medical_mae_file(tmp_path):
    """The MIMIC-CXR preset's classifier at full size from a file in Medical-MAE's fine-tuned layout."""
    import timm

    source = timm.create_model("vit_base_patch16_224", num_classes=5, global_pool="avg")
    path = finetuned_checkpoint(tmp_path / "vit-b_CXR_0.5M_mae_CheXpert.pth", source)
    cfg = ClassifierConfig.preset("mimic_cxr", global_pool="avg", pretrained_path=str(path),
                                  pretrained_format="medical_mae", drop_path=0.2)
    model = build_classifier(cfg)
    report = load_medical_mae(model, path)  # again, for its report
    assert report["initialised"] == ["head.bias", "head.weight"] and len(report["loaded"]) == 150
    theirs = source.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in model.state_dict().items() if not k.startswith("head."))
