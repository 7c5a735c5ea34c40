"""The house's shape in numbers (issue 47), read from the code as text (nothing is imported or run): the import
graph between the parts, imports inside functions, module sizes, `train_step`'s length, and how far the whole
run config travels from the RL stage.

    PYTHONPATH=$PWD python benchmarks/house_shape.py                  # this checkout
    PYTHONPATH=$PWD python benchmarks/house_shape.py --repo OTHER     # another checkout (e.g. a git worktree at an
                                                                      # older commit), measured by this file's rules

Parts and arrows are the import rule tests' (tests/test_import_circles.py, tests/test_import_floors.py): a part is a
package of harness/ or a loose module beside them, or regularizers/, rewards/, reports/; lazy imports are arrows.
"The whole config" is the rule of tests/test_config_reach.py: a parameter annotated `RunConfig`, or named `cfg`
without an annotation. Its trip from `harness/stages/rl.py:run_rl` follows every call that hands `cfg` on whole to a
project function taking the whole config (by name; a method call by its attribute name), to the end.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from tests.test_config_reach import _takes_whole_config
from tests.test_import_circles import _circle, _graph
from tests.test_import_floors import floors, part_graph
from tests.test_lazy_imports import function_imports
from tests.test_module_size import LIMIT, _sizes

PACKAGES = ("harness", "regularizers", "rewards", "reports")
START = ("harness/stages/rl.py", "run_rl")


def _files(root: Path):
    for top in PACKAGES:
        for path in sorted((root / top).rglob("*.py")):
            yield path.relative_to(root).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _functions(tree: ast.AST):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _whole_config_param(fn: ast.FunctionDef) -> str | None:
    a = fn.args
    for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
        if _takes_whole_config(arg):
            return arg.arg
    return None


def _called_name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def config_trip(root: Path) -> tuple[set[str], set[str]]:
    """(files, functions) the whole config enters from run_rl, following calls that hand it on whole."""
    takers: dict[str, list[tuple[str, ast.FunctionDef, str]]] = {}
    for name, tree in _files(root):
        for fn in _functions(tree):
            if (param := _whole_config_param(fn)) is not None:
                takers.setdefault(fn.name, []).append((name, fn, param))
    start = [t for t in takers.get(START[1], []) if t[0] == START[0]]
    seen: set[tuple[str, str]] = set()
    todo = list(start)
    while todo:
        file, fn, param = todo.pop()
        if (file, fn.name) in seen:
            continue
        seen.add((file, fn.name))
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            args = [*call.args, *(k.value for k in call.keywords)]
            if any(isinstance(a, ast.Name) and a.id == param for a in args):
                todo.extend(takers.get(_called_name(call) or "", []))
    return {f for f, _ in seen}, {f"{f}:{n}" for f, n in seen}


def shape(root: Path) -> dict[str, object]:
    parts = part_graph(root)
    level = floors(parts) if not _has_circle(parts) else {}
    modules = _graph(root)
    lazy = {name: len(function_imports(tree)) for name, tree in _files(root)}
    sizes = {k: v for k, v in _sizes(root).items() if k.split("/")[0] in PACKAGES}
    trainer = root / "harness/grpo/trainer.py"
    step = next((f for f in _functions(ast.parse(trainer.read_text(encoding="utf-8"))) if f.name == "train_step"),
                None) if trainer.exists() else None
    below = [f"{name}:{fn.name}" for name, tree in _files(root) if not name.startswith("harness/stages/")
             for fn in _functions(tree) if _whole_config_param(fn)]
    files, functions = config_trip(root)
    return {
        "parts": len(parts),
        "floors": 1 + max(level.values(), default=-1) if level else "circle",
        "arrows between parts": sum(len(v) for v in parts.values()),
        "circles between parts": "none" if level else "yes",
        "modules / arrows between modules": f"{len(modules)} / {sum(len(v) for v in modules.values())}",
        "loose modules in harness/": len([p for p in parts if p.startswith("harness.") and
                                          (root / (p.replace(".", "/") + ".py")).exists()]),
        "imports inside functions (files)": f"{sum(lazy.values())} ({sum(1 for v in lazy.values() if v)})",
        f"modules over {LIMIT} lines (largest)": f"{sum(v > LIMIT for v in sizes.values())} ({max(sizes.values())})",
        "train_step lines": (step.end_lineno - step.lineno + 1) if step else "-",
        "functions taking the whole config outside stages/ (files)":
            f"{len(below)} ({len({b.split(':')[0] for b in below})})",
        "run_rl's whole-config trip: files / functions": f"{len(files)} / {len(functions)}",
    }


def _has_circle(graph: dict[str, set[str]]) -> bool:
    return _circle(graph) is not None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=Path.cwd(), help="checkout to measure (default: here)")
    ap.add_argument("--trip", action="store_true", help="also list the functions of run_rl's whole-config trip")
    args = ap.parse_args()
    root = args.repo.resolve()
    if not (root / START[0]).is_file():  # checked before reading anything: one line naming the path
        ap.error(f"--repo {root}: not a regbench checkout (no {START[0]})")
    for key, value in shape(root).items():
        print(f"{key}: {value}")
    if args.trip:
        for f in sorted(config_trip(root)[1]):
            print("  ", f)


if __name__ == "__main__":
    main()
