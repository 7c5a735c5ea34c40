"""The claims of docs/DESIGN.md's "Layout" section that can be checked against the tree (issue 46: 4 of 12 had
gone stale within three days): the packages of harness/ and the loose modules beside them are the ones the
document names, and its import rules hold (only the command line imports reports/; nothing imports experiments/)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = (ROOT / "docs/DESIGN.md").read_text(encoding="utf-8")


def _layout() -> str:
    return DESIGN[DESIGN.index("Inside `harness/`, each package"):DESIGN.index("## The central idea")]


def test_the_package_table_names_every_harness_package_and_only_those():
    named = set(re.findall(r"^\| `([a-z_]+)/` \|", _layout(), flags=re.M))
    present = {p.name for p in (ROOT / "harness").iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert named == present, f"named only: {sorted(named - present)}; present only: {sorted(present - named)}"


def test_the_loose_modules_named_are_the_loose_modules_there():
    paragraph = _layout()[_layout().index("Modules beside the packages"):]
    paragraph = paragraph[:paragraph.index("\n\n")]
    named = set(re.findall(r"`([a-z_]+)\.py`", paragraph))
    present = {p.stem for p in (ROOT / "harness").glob("*.py") if p.stem != "__init__"}
    assert named == present, f"named only: {sorted(named - present)}; present only: {sorted(present - named)}"


def _importers_of(package: str) -> set[str]:
    """Files of the installed packages (harness, rewards, regularizers, reports) that import `package`, lazily too."""
    out = set()
    for top in ("harness", "rewards", "regularizers", "reports"):
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
                if any(n == package or n.startswith(package + ".") for n in names):
                    out.add(str(path.relative_to(ROOT)))
    return out


def test_only_the_command_line_imports_reports():
    outside = sorted(f for f in _importers_of("reports") if not f.startswith(("reports/", "harness/cli/")))
    assert not outside, f"import reports/ outside the command line: {outside}"


def test_nothing_imports_experiments_folder():
    assert "Nothing imports `experiments/`" in DESIGN
    assert not (ROOT / "experiments" / "__init__.py").exists() and not list((ROOT / "experiments").rglob("*.py"))
