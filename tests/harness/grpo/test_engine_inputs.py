"""Below the RL stage the engine takes sections, never the whole RunConfig (issue 47): harness/stages/rl.py
unpacks the config once and hands each part of harness/grpo/ the section or the fields it reads."""

from __future__ import annotations

import ast
from pathlib import Path

GRPO = Path(__file__).resolve().parents[3] / "harness" / "grpo"


def _whole_config_parameters(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            for a in args:
                annotation = ast.unparse(a.annotation) if a.annotation is not None else ""
                if a.arg == "cfg" or "RunConfig" in annotation:
                    found.append(f"{path.name}:{node.lineno} {node.name}({a.arg})")
    return found


def test_no_engine_function_takes_the_whole_config():
    modules = sorted(GRPO.glob("*.py"))
    assert len(modules) > 10
    found = [hit for path in modules for hit in _whole_config_parameters(path)]
    assert found == []
    assert not [p.name for p in modules if "RunConfig" in p.read_text(encoding="utf-8")]
