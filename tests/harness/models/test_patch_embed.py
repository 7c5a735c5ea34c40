"""harness/models/patch_embed.py: the patch embedding as a matrix product equals transformers' Conv3d to float
rounding (forward and weight gradient), and a base saved with it loads with it (and plain transformers ignores it)."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import Qwen2_5_VLForConditionalGeneration
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionPatchEmbed

from harness.models.checkpoint import load_base
from harness.models.patch_embed import CONFIG_FIELD, MatmulPatchEmbed, use_patch_embed
from harness.models.tiny import save_base


def _patches(model, n_images: int = 3, seed: int = 0) -> torch.Tensor:
    """Flattened patches as the processor delivers them: [images x 4 x 4 patches, 3 x 2 x 14 x 14]."""
    v = model.config.vision_config
    width = v.in_channels * v.temporal_patch_size * v.patch_size ** 2
    return torch.randn(n_images * 16, width, generator=torch.Generator().manual_seed(seed)) * 0.7 + 0.1


def _embed_and_grad(module, patches, seed: int = 1):
    out = module(patches)
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    (grad,) = torch.autograd.grad((out * upstream).sum(), module.proj.weight)
    return out.detach(), grad


def test_matmul_equals_the_conv3d_to_float_rounding(tiny_model):
    conv = tiny_model.model.visual.patch_embed
    matmul = copy.deepcopy(conv)
    matmul.__class__ = MatmulPatchEmbed
    patches = _patches(tiny_model)
    want, want_grad = _embed_and_grad(conv, patches)
    got, got_grad = _embed_and_grad(matmul, patches)
    assert got.shape == want.shape == (patches.shape[0], conv.embed_dim)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-5, atol=1e-5)
    assert want.abs().max() > 0.1  # not a trivial map


def test_a_base_built_with_matmul_loads_with_it_and_transformers_ignores_it(tiny_model, tiny_processor, tmp_path):
    use_patch_embed(tiny_model, "matmul")
    assert type(tiny_model.model.visual.patch_embed) is MatmulPatchEmbed
    assert type(copy.deepcopy(tiny_model).model.visual.patch_embed) is MatmulPatchEmbed  # snapshots, clones
    save_base(tiny_model, tiny_processor, tmp_path / "base")
    loaded, _ = load_base(tmp_path / "base")
    assert type(loaded.model.visual.patch_embed) is MatmulPatchEmbed
    assert getattr(loaded.config.vision_config, CONFIG_FIELD) == "matmul"
    plain = Qwen2_5_VLForConditionalGeneration.from_pretrained(tmp_path / "base", local_files_only=True)
    assert type(plain.model.visual.patch_embed) is Qwen2_5_VisionPatchEmbed
    patches = _patches(loaded, seed=3)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model.visual.patch_embed(patches), plain.model.visual.patch_embed(patches),
                                   rtol=1e-5, atol=1e-6)
    assert loaded.state_dict().keys() == plain.state_dict().keys()


def test_a_conv_base_loads_with_the_conv_and_records_nothing(tiny_model, tiny_processor, tmp_path):
    use_patch_embed(tiny_model, "matmul")
    use_patch_embed(tiny_model, "conv")  # back: the field goes too
    assert not hasattr(tiny_model.config.vision_config, CONFIG_FIELD)
    save_base(tiny_model, tiny_processor, tmp_path / "base")
    assert CONFIG_FIELD not in (tmp_path / "base" / "config.json").read_text()
    loaded, _ = load_base(tmp_path / "base")
    assert type(loaded.model.visual.patch_embed) is Qwen2_5_VisionPatchEmbed
    with pytest.raises(ValueError, match="patch embedding must be one of conv, matmul, got 'linear'"):
        use_patch_embed(tiny_model, "linear")


def test_the_config_names_a_bad_value():
    from harness.config import ConfigError, RunConfig, validate

    cfg = RunConfig()
    cfg.pretrain.patch_embed = "linear"
    with pytest.raises(ConfigError, match="pretrain.patch_embed"):
        validate(cfg)
