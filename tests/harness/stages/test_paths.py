"""harness/stages/paths.py: the stages' keys and paths, the planner's one interface to the stages."""

from __future__ import annotations

import ast
from pathlib import Path

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
