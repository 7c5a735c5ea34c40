"""The vision tower's patch embedding as one matrix product (issue 27), for the tiny base that stage 0 builds.

Qwen2.5-VL embeds each 2 x 14 x 14 x 3 patch with a Conv3d whose kernel equals its stride and has no bias: the
same linear map as flattening the patch (the processor already delivers it flattened in the Conv3d's channel,
time, height, width order) and multiplying by the kernel viewed as an [embed_dim, 1176] matrix. On a CPU core
the matrix product is the faster kernel: forward and weight gradient of a stage-0 batch (32 images, 2,048
patches, width 64) in 0.39x the Conv3d's time, a whole stage-0 step in 0.91-0.97x (benchmarks/bench_patch_embed.py;
tests/harness/models/test_patch_embed.py checks the two to float rounding; they sum in another order, so they are
not bitwise equal).

The choice belongs to the base model: stage 0 builds the tiny base with `pretrain.patch_embed`, and the saved
config.json records it (`vision_config.regbench_patch_embed`), so every stage, evaluation and analysis that loads
that base computes its patch embedding the way the base was trained. Plain transformers ignores the field
(and uses the Conv3d, equal to float rounding); a base without it (every real Qwen2.5-VL) is left as it is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionPatchEmbed

from harness.models.trainable import unwrap

PATCH_EMBEDS = ("conv", "matmul")
CONFIG_FIELD = "regbench_patch_embed"  # in vision_config of a saved base model: "matmul", or absent


class MatmulPatchEmbed(Qwen2_5_VisionPatchEmbed):
    """Qwen2_5_VisionPatchEmbed with the Conv3d computed as a matrix product (same parameters, same state dict)."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if type(self.proj) is not torch.nn.Conv3d:  # peft's LoRA Conv3d (model.lora_patch_embed): its own forward
            return super().forward(hidden_states)
        weight = self.proj.weight  # [embed_dim, in_channels, temporal, patch, patch]
        flat = hidden_states.to(weight.dtype).reshape(-1, weight[0].numel())
        return F.linear(flat, weight.reshape(weight.shape[0], -1))


def _patch_embed(model) -> Qwen2_5_VisionPatchEmbed:
    return unwrap(model).model.visual.patch_embed


def use_patch_embed(model, kind: str) -> None:
    """Compute `model`'s patch embedding as `kind` ("conv": transformers' Conv3d; "matmul": MatmulPatchEmbed), and
    record the choice in its vision config (saved with the model), in place."""
    if kind not in PATCH_EMBEDS:
        raise ValueError(f"patch embedding must be one of {', '.join(PATCH_EMBEDS)}, got {kind!r}")
    module = _patch_embed(model)
    module.__class__ = MatmulPatchEmbed if kind == "matmul" else Qwen2_5_VisionPatchEmbed
    vision_config = model.config.vision_config
    if kind == "matmul":
        setattr(vision_config, CONFIG_FIELD, kind)
    elif hasattr(vision_config, CONFIG_FIELD):
        delattr(vision_config, CONFIG_FIELD)


def apply_saved_patch_embed(model) -> None:
    """After loading a base model: the patch embedding its config.json records (nothing recorded: the Conv3d)."""
    kind = getattr(model.config.vision_config, CONFIG_FIELD, None)
    if kind is not None:
        use_patch_embed(model, kind)
