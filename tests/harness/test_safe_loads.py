"""No unsafe deserialisation in the packages (issue 26): every torch.load passes weights_only=True, and nothing
calls pickle.load(s), torch.load(weights_only=False) or numpy's allow_pickle=True. A run folder or a checkpoint
may come from someone else's disk; unpickling it would run its code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("harness", "regularizers", "rewards", "reports", "benchmarks")


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES if (ROOT / pkg).is_dir() for p in (ROOT / pkg).rglob("*.py"))


def _name(node: ast.AST) -> str:
    """'torch.load' for torch.load, 'pickle.loads' for pickle.loads, ... ('' for anything else)."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def unsafe_loads(source: str) -> list[tuple[int, str]]:
    """(line, what) for every unsafe load call in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        kw = {k.arg: k.value for k in node.keywords}
        if name == "torch.load":
            wo = kw.get("weights_only")
            if not (isinstance(wo, ast.Constant) and wo.value is True):
                found.append((node.lineno, "torch.load without weights_only=True"))
        elif name in ("pickle.load", "pickle.loads", "cloudpickle.load", "cloudpickle.loads", "dill.load",
                      "joblib.load"):
            found.append((node.lineno, name))
        elif name in ("np.load", "numpy.load"):
            ap = kw.get("allow_pickle")
            if isinstance(ap, ast.Constant) and ap.value is True:
                found.append((node.lineno, "np.load(allow_pickle=True)"))
    return found


def test_the_scan_finds_what_it_looks_for():
    bad = ("import torch, pickle\ntorch.load(p)\ntorch.load(p, weights_only=False)\npickle.loads(b)\n"
           "np.load(p, allow_pickle=True)\ntorch.load(p, map_location='cpu', weights_only=True)\n")
    assert [line for line, _ in unsafe_loads(bad)] == [2, 3, 4, 5]


def test_the_scan_covers_the_packages():
    files = _sources()
    assert len(files) > 100 and any(p.name == "zero.py" for p in files)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_unsafe_load_in_the_package(package):
    problems = [f"{p.relative_to(ROOT)}:{line}: {what}" for p in _sources() if p.parts[len(ROOT.parts)] == package
                for line, what in unsafe_loads(p.read_text(encoding="utf-8"))]
    assert not problems, problems
