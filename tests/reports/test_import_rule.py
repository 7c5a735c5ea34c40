"""reports/ only reads: it imports from the harness nothing but the run-record layer, and only the CLI imports it.

Run records are written by harness/runs/ (records.py: files; schema.py: their names) with the shared names of
harness/constants.py; that is all reports/ may take from the harness. Anything that runs a model, opens an
Optuna storage or loads a study file is the harness CLI's job (harness/cli/), which hands reports/ what it reads.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What reports/ may import of the project's own packages, and why.
ALLOWED = {
    "harness.runs.records": "reading and atomically writing record files",
    "harness.runs.schema": "the names of index.json and the run-record files",
    "harness.constants": "the 14 observations and the per-report BLEU statistics' keys",
    "harness.stats.decisions": "the decision rule of declared contrasts (pure statistics, shared with the runner)",
    "regularizers.rer": "Fig. 2 draws the RER formula from its one implementation (a pure function)",
}
PROJECT = ("harness", "regularizers", "rewards", "experiments", "benchmarks", "tests")
# Calls that open or create an Optuna storage: the harness does that (harness/search/).
STORE_CALLS = ("load_study", "create_study", "get_all_study_summaries", "JournalStorage", "RDBStorage")


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module)]
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names if node.module in PROJECT]
    return found


def _project_imports(path: Path) -> list[tuple[int, str]]:
    return [(n, m) for n, m in _imports(path) if m.split(".")[0] in PROJECT]


def test_reports_imports_only_the_run_record_layer():
    bad = []
    for path in sorted((ROOT / "reports").rglob("*.py")):
        for line, module in _project_imports(path):
            if not any(module == a or module.startswith(a + ".") for a in ALLOWED) and module not in (
                    "harness.runs", "harness"):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not bad, "reports/ must only read run records:\n" + "\n".join(bad)


def test_reports_opens_no_optuna_storage():
    bad = [f"{p.relative_to(ROOT)}: {call}" for p in sorted((ROOT / "reports").rglob("*.py"))
           for call in STORE_CALLS if call in p.read_text(encoding="utf-8")]
    assert not bad, "\n".join(bad)


def test_only_the_cli_imports_reports():
    bad = []
    for folder in ("harness", "regularizers", "rewards"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.parent == ROOT / "harness" / "cli":
                continue
            bad += [f"{path.relative_to(ROOT)}:{n} imports {m}" for n, m in _imports(path)
                    if m.split(".")[0] == "reports"]
    assert not bad, "\n".join(bad)


def test_the_rule_catches_a_reader_that_runs_models(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from harness.stages.analyze import run_analysis\nfrom harness import search\n")
    assert [m for _, m in _project_imports(probe)] == ["harness.stages.analyze", "harness", "harness.search"]
