"""Stage 0 is one pretrained base for every run seed (as one Qwen checkpoint is), keyed on `STAGE0_SEED`."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from safetensors.torch import load_file

from harness.config import load_config
from harness.data.phantom import GENERATOR_VERSION
from harness.stages import paths
from harness.stages.paths import RECIPE_VERSION
from harness.stages.pretrain import base_dir, pretrain_key, pretrain_tiny_base
from tests.tiny_sizes import TINY


def _cfg(tmp_path, *extra):
    return load_config(None, [*TINY, f"cache_dir={tmp_path / 'cache'}", f"data.synth_dir={tmp_path / 'data'}",
                              *extra])


def _old_key(cfg, seed: int) -> str:
    """The key as it was computed when the run seed was part of it (before `STAGE0_SEED`)."""
    m = cfg.model
    # these fields came later; a conv base trained on random batches keeps the key it had without them
    assert cfg.pretrain.patch_embed == "conv" and not cfg.pretrain.group_by_length
    pretrain = {k: v for k, v in dataclasses.asdict(cfg.pretrain).items()
                if k not in ("patch_embed", "group_by_length")}
    payload = {"recipe": RECIPE_VERSION, "pretrain": pretrain,
               "sizes": [m.tiny_text_hidden, m.tiny_text_layers, m.tiny_vision_hidden, m.tiny_vision_depth,
                         m.tiny_vocab_size, m.image_size],
               "image_px": cfg.data.synth_image_size, "phantom": GENERATOR_VERSION,
               "instruction": cfg.prompt.instruction,
               "disease_template": cfg.prompt.disease_template, "max_report_tokens": cfg.prompt.max_report_tokens,
               "seed": seed}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def test_key_ignores_the_run_seed_and_follows_the_stage0_seed(tmp_path, monkeypatch):
    keys = {pretrain_key(_cfg(tmp_path, f"seed={s}")) for s in (0, 1, 2, 17)}
    assert len(keys) == 1
    # Seed-0 bases already cached keep their folder: the key equals the old one for run seed 0.
    assert keys == {_old_key(_cfg(tmp_path), 0)}
    monkeypatch.setattr(paths, "STAGE0_SEED", 3)
    assert pretrain_key(_cfg(tmp_path)) not in keys
    assert pretrain_key(_cfg(tmp_path)) == _old_key(_cfg(tmp_path), 3)


def test_every_run_seed_gets_the_same_base_weights(tmp_path):
    one = pretrain_tiny_base(_cfg(tmp_path / "a", "seed=0"), progress=False)
    other = pretrain_tiny_base(_cfg(tmp_path / "b", "seed=5"), progress=False)
    assert one.name == other.name == base_dir(_cfg(tmp_path / "a", "seed=3")).name
    w1, w2 = load_file(str(one / "model.safetensors")), load_file(str(other / "model.safetensors"))
    assert w1.keys() == w2.keys()
    assert all((w1[k] == w2[k]).all() for k in w1)


def test_a_new_phantom_generator_means_a_new_data_folder_and_a_new_base(tmp_path, monkeypatch):
    """A set or a base drawn by an older generator is never reused: both are keyed on `GENERATOR_VERSION`
    (before, the data folder was named by n / seed / size only and kept serving the old images)."""
    from harness.data import phantom
    from harness.stages.common import phantom_dir

    cfg = _cfg(tmp_path)
    folder, key = phantom_dir(cfg), pretrain_key(cfg)
    assert folder.name.endswith(f"-g{phantom.GENERATOR_VERSION}")
    monkeypatch.setattr(phantom, "GENERATOR_VERSION", phantom.GENERATOR_VERSION + 1)
    assert phantom_dir(cfg) != folder
    assert pretrain_key(cfg) != key
