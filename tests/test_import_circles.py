"""No module of the project imports itself through a chain of imports (a circle), lazy imports included.

The graph is read from the code as text (ast), like the gold reader's check (tests/harness/data/test_gold_reader.py):
every `import a.b` and `from a.b import c` at any depth of a file, functions' bodies included, is an arrow to the
project module it names: `a.b.c` when that is a module, else `a.b`. Parent packages are not arrows (an
`__init__.py` that hands names on would otherwise tie every package into one circle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "regularizers", "rewards", "reports")


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            out[".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")] = path
    return out


def _arrows(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `path` imports (module docstring)."""
    named = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            named.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                named.add(sub if sub in modules else node.module)
    return {name for name in named if name in modules}


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of `graph` as [m0, m1, ..., m0], or None (depth-first search, in name order)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _graph(root: Path) -> dict[str, set[str]]:
    modules = _modules(root)
    return {name: _arrows(path, modules) - {name} for name, path in modules.items()}


def test_no_module_imports_itself_through_others():
    graph = _graph(ROOT)
    assert "rewards.spec" in graph and "rewards.composite" in graph["rewards.spec"]
    circle = _circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle)


@pytest.mark.parametrize("lazy", [False, True])
def test_the_check_finds_a_circle(tmp_path, lazy):
    # a registry that builds mixes lazily and a mix module that registers through it: the circle the rewards had
    pkg = tmp_path / "rewards"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "registry.py").write_text("def resolve(spec):\n    from rewards.mix import make\n    return make(spec)\n"
                                     if lazy else "from rewards.mix import make\n")
    (pkg / "mix.py").write_text("from rewards import registry\n")
    (pkg / "bleu.py").write_text("from rewards.registry import resolve\n")
    circle = _circle(_graph(tmp_path))
    assert circle in (["rewards.mix", "rewards.registry", "rewards.mix"],
                      ["rewards.registry", "rewards.mix", "rewards.registry"])
