"""harness/stages/paths.py: the stages' keys and paths, the planner's one interface to the stages."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from harness.config import build_config
from harness.stages import paths

ROOT = Path(__file__).resolve().parents[3]


def test_the_planner_asks_the_stages_only_through_paths():
    """harness/experiments/plan.py and study.py may take keys and paths from the stages, nothing else (the runner,
    nodes.py, calls the stage functions)."""
    bad = []
    for name in ("plan.py", "resolve.py", "index.py"):
        tree = ast.parse((ROOT / "harness" / "experiments" / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness.stages"):
                bad += [f"{name}:{node.lineno} {node.module}" for a in node.names
                        if not (node.module == "harness.stages" and a.name == "paths")
                        and node.module != "harness.stages.paths"]
    assert not bad, bad


def test_base_key_and_folder(tmp_path):
    cfg = build_config({"cache_dir": str(tmp_path)})
    assert paths.uses_tiny_base(cfg)
    key = paths.base_key(cfg)
    assert len(key) == 12 and paths.base_dir(cfg) == tmp_path / "tiny-base" / key
    other = build_config({"cache_dir": str(tmp_path), "prompt": {"instruction": "Describe the image."}})
    assert paths.base_key(other) != key  # the instruction is trained into stage 0
    assert not paths.uses_tiny_base(build_config({"model": {"path": str(tmp_path)}}))


def test_the_stage_modules_name_the_same_functions():
    from harness.stages import analyze, common, pretrain

    assert pretrain.base_dir is paths.base_dir and pretrain.pretrain_key is paths.pretrain_key
    assert common.phantom_dir is paths.phantom_dir and common.default_cache_dir is paths.default_cache_dir
    assert analyze.analyses_done is paths.analyses_done


def test_a_test_evaluation_draws_only_the_test_split_and_reads_the_same_samples(tmp_path):
    """issue 27: with no whole set there, the test split is drawn alone (its studies only); its samples equal the
    whole set's test samples, and once the whole set exists an evaluation reads that instead."""
    from harness.stages.common import load_splits

    cfg = build_config({"data": {"synth_n": 20, "synth_image_size": 48, "synth_dir": str(tmp_path / "a")}})
    alone = load_splits(cfg, progress=False, only="test")
    assert list(alone) == ["test"] and len(alone["test"]) == 4
    assert not (paths.phantom_dir(cfg) / "annotation.json").exists()
    assert len(list((paths.phantom_dir(cfg, ("test",)) / "images").iterdir())) == 4
    whole_cfg = build_config({"data": {"synth_n": 20, "synth_image_size": 48, "synth_dir": str(tmp_path / "b")}})
    whole = load_splits(whole_cfg, progress=False)["test"]
    assert paths.test_split_dir(whole_cfg) == paths.phantom_dir(whole_cfg)
    for a, b in zip(alone["test"], whole, strict=True):
        assert (a.id, a.report, a.categories) == (b.id, b.report, b.categories)
        assert np.array_equal(a.labels, b.labels, equal_nan=True)
        assert a.image_paths[0].read_bytes() == b.image_paths[0].read_bytes()


def test_evaluations_keep_a_phantom_splits_decoded_images_beside_it(tmp_path):
    """issue 27: every evaluation of one phantom test split reads one pixel cache beside the split it reads (the
    test-only part or the whole set); a user's data set gets none."""
    cfg = build_config({"data": {"synth_n": 20, "synth_image_size": 48, "synth_dir": str(tmp_path)}})
    assert paths.eval_pixel_dir(cfg, "test") == paths.phantom_dir(cfg, ("test",)) / "pixels"
    assert paths.eval_pixel_dir(cfg, "val") == paths.phantom_dir(cfg) / "pixels"
    (paths.phantom_dir(cfg)).mkdir(parents=True)
    (paths.phantom_dir(cfg) / "annotation.json").write_text("{}")
    assert paths.eval_pixel_dir(cfg, "test") == paths.phantom_dir(cfg) / "pixels"
    user = build_config({"data": {"dataset": "iu_xray", "annotation": str(tmp_path / "ann.json")}})
    assert paths.eval_pixel_dir(user, "test") is None
