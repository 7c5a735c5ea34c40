"""The dependencies pyproject.toml declares are exactly the third-party modules the package imports (issue 46):
nothing imported that an install could miss, nothing declared that no code needs, except the few listed here with
the reason they are declared anyway."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml with the standard library")

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "rewards", "regularizers", "reports")
# Declared although no module of the package imports them by name.
DECLARED_FOR = {
    "torchvision": "transformers' Qwen2.5-VL image processor uses it; pinned as the pair of the torch pin",
    "tensorboard": "torch.utils.tensorboard (harness/runs/trackers.py) needs the tensorboard package",
}
# Imported only where an optional extra is installed (each behind a check that names the extra).
OPTIONAL = {"vllm"}


def _requirement_name(spec: str) -> str:
    return re.split(r"[<>=!~ \[;]", spec.strip(), maxsplit=1)[0].lower().replace("_", "-")


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_requirement_name(s) for s in project["dependencies"]}


def imported_modules() -> set[str]:
    names = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in PACKAGES}


def test_every_imported_module_is_declared_and_every_declared_one_imported():
    by_module = md.packages_distributions()
    modules = imported_modules() - OPTIONAL
    unknown = sorted(m for m in modules if m not in by_module)
    assert not unknown, f"imported but not installed by any distribution: {unknown}"
    needed = {by_module[m][0].lower().replace("_", "-") for m in modules}
    assert sorted(needed - declared()) == [], "imported but not declared in pyproject.toml"
    assert sorted(declared() - needed - set(DECLARED_FOR)) == [], "declared but never imported (say why, or drop)"


def test_optional_modules_belong_to_an_extra():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"].get("optional-dependencies", {})
    in_extras = {_requirement_name(s) for specs in extras.values() for s in specs}
    missing = sorted((OPTIONAL & imported_modules()) - in_extras)
    assert not missing, f"imported behind a check, but no install extra provides them: {missing}"
