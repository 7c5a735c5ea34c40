"""The parts of the package stand on floors (issue 47): between the parts (each package of harness/, each loose
module beside them, and regularizers/, rewards/, reports/) the imports, lazy ones included, make no circle, so every
arrow points down to a lower floor. tests/test_import_circles.py reads the same graph module by module; this is the
same rule one level up, where a module moved into the wrong package shows first."""

from __future__ import annotations

from pathlib import Path

from tests.test_import_circles import _circle, _graph

ROOT = Path(__file__).resolve().parents[1]


def part(module: str) -> str:
    """harness.<package or loose module>, or the top-level package."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "harness" and len(parts) > 1 else parts[0]


def part_graph(root: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module, arrows in _graph(root).items():
        out.setdefault(part(module), set()).update(part(a) for a in arrows)
    return {p: arrows - {p} for p, arrows in out.items()}


def floors(graph: dict[str, set[str]]) -> dict[str, int]:
    """Floor 0: parts that import no other part; floor k: one above the highest part it imports."""
    memo: dict[str, int] = {}

    def floor(p: str) -> int:
        if p not in memo:
            memo[p] = 1 + max((floor(q) for q in graph[p]), default=-1)
        return memo[p]

    return {p: floor(p) for p in graph}


def test_the_parts_import_each_other_without_a_circle():
    graph = part_graph(ROOT)
    assert {"harness.config", "harness.grpo", "harness.checks", "harness.stats", "rewards", "reports"} <= set(graph)
    circle = _circle(graph)
    assert circle is None, "parts importing each other in a circle: " + " -> ".join(circle)
    levels = floors(graph)
    assert levels["harness.cli"] == max(levels.values())  # the command line is the top floor
    assert levels["harness.stats"] == 0 and levels["harness.cli"] > levels["harness.checks"]


def test_a_module_in_the_wrong_package_makes_a_circle(tmp_path):
    # a check that reads the experiment runner, while the runner runs the checks: the package-level circle
    files = {"harness/__init__.py": "", "harness/checks/__init__.py": "", "harness/experiments/__init__.py": "",
             "harness/checks/preflight.py": "from harness.experiments.plan import x\n",
             "harness/checks/needs.py": "", "harness/experiments/plan.py": "",
             "harness/experiments/run.py": "def f():\n    from harness.checks.needs import y\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert _circle(_graph(tmp_path)) is None  # module by module, no circle
    assert _circle(part_graph(tmp_path)) in (["harness.checks", "harness.experiments", "harness.checks"],
                                             ["harness.experiments", "harness.checks", "harness.experiments"])
