"""Imports inside functions only where they are needed, each with its reason (issue 47).

A function-level import is kept only for start-up cost (the module would otherwise load a heavy library, torch,
transformers, scipy, optuna, ..., that it does not load already), an optional dependency (vLLM), an ImportError
handled on the spot, or a name read at call time; the line above it (or above its group of imports) says which:
`# lazy: <reason>`. The import rules (tests/test_import_circles.py, tests/test_design_claims.py,
tests/reports/test_import_rule.py) read every import at any depth, these ones included.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "regularizers", "rewards", "reports")
# Not annotated yet; the list only shrinks (empty since issue 47).
NOT_YET: tuple[str, ...] = ()
HEAVY = ("torch", "transformers", "peft", "timm", "scipy", "optuna", "deepspeed", "vllm", "accelerate", "pandas",
         "matplotlib", "sklearn", "sqlalchemy", "submitit", "wandb", "radgraph", "f1chexbert", "pycocoevalcap")


def function_imports(tree: ast.AST) -> list[ast.stmt]:
    """The import statements inside function bodies, at any depth."""
    out = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append(child)
            visit(child, inside)

    visit(tree, False)
    return out


def unexplained(text: str) -> list[int]:
    """Line numbers of function-level imports with no `# lazy:` reason on or above their group."""
    lines = text.splitlines()
    imports = function_imports(ast.parse(text))
    import_lines = {i for node in imports for i in range(node.lineno, node.end_lineno + 1)}
    bad = []
    for node in imports:
        if any("# lazy:" in lines[i - 1] for i in range(node.lineno, node.end_lineno + 1)):
            continue
        above = node.lineno - 1
        while above in import_lines:  # the group's first import carries the comment
            above -= 1
        if not (above >= 1 and lines[above - 1].strip().startswith("# lazy:")):
            bad.append(node.lineno)
    return bad


def test_every_function_level_import_says_why():
    bad = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if not rel.startswith(NOT_YET):
                bad += [f"{rel}:{n}" for n in unexplained(path.read_text(encoding="utf-8"))]
    assert not bad, "imports inside functions without a '# lazy: <reason>' line (or hoist them):\n" + "\n".join(bad)


def test_the_check_reads_groups_and_nested_imports():
    text = ("import os\n\n\ndef f():\n    # lazy: start-up cost (torch)\n    import torch\n    from x import (\n"
            "        a,\n    )\n\n    def g():\n        import json\n        return json\n    return torch, a, g\n")
    assert unexplained(text) == [12]
    assert unexplained(text.replace("    # lazy: start-up cost (torch)\n", "")) == [5, 6, 11]  # one line up


def test_the_command_line_starts_without_the_heavy_libraries():
    """The start-up reason holds: `regbench --help` imports the CLI and none of the heavy libraries."""
    code = (f"import sys, harness.cli; heavy = {HEAVY!r}; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
