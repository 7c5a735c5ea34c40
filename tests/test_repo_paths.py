"""Every repository path that the docs, comments, docstrings and strings name exists.

Files read: the Markdown files of the project (README.md at the top, every *.md under the top-level folders),
the YAML files of experiments/ (their comments cite files), and every .py file under harness/, regularizers/,
rewards/, reports/, benchmarks/ and tests/. A Python file is read whole: outside comments and strings, code
never spells a slash-separated name, so only those are found.

A path is a token that starts with one of the top-level folders (`TOP_LEVEL`) followed by a slash, e.g. the
folder of the RL loop `harness/grpo/` or a file in it; it counts when it ends with a slash (a folder) or its
last part has a dot (a file; `package/module.name` stands for `package/module.py`). Left out:

- tokens with a placeholder (`<arm>`, `*`, `{a,b}`, `$VAR`, `[...]`): they name a pattern, not one path;
- words with slashes that are not paths (`reports/s`): no trailing slash and no dot in the last part;
- a token inside another path (after `/`, `.`, `~` or a word character): `runs/...`, a temp folder, a URL;
- in Markdown, the first line of a ```python block when it is a comment naming a file: the file the example asks
  the reader to write (README, "Extending").

The design document lives in docs/: its file name without the folder, outside docs/, points nowhere in a clone
and is refused; a quoted section name after `docs/DESIGN.md` must be one of its headings.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL = ("harness", "regularizers", "rewards", "reports", "experiments", "benchmarks", "tests", "docs")
PYTHON_FOLDERS = ("harness", "regularizers", "rewards", "reports", "benchmarks", "tests")
DESIGN = "docs/DESIGN.md"

# Paths that a run writes into the repository, so they exist only after it has run. Only outputs belong here,
# each with the command that writes it; a file that was moved or deleted is fixed where it is named instead.
OUTPUTS: dict[str, str] = {}

_PATH = re.compile(r"(?<![\w./~$<>-])(?:" + "|".join(TOP_LEVEL) + r")/[\w./-]*")
_PLACEHOLDER = set("<>*{}[]$?")
_BARE_DESIGN = re.compile(r"(?<![\w./-])DESIGN\.md")
_SECTION = re.compile(r"[,:]?\s*(?:\\?\"|')([A-Z][^\"'\\\n]*)(?:\\?\"|')")
_EXAMPLE_FILE = re.compile(r"```python\n#\s*(\S+)")


def _files() -> list[Path]:
    found = set(ROOT.glob("*.md"))
    for top in TOP_LEVEL:
        for path in (ROOT / top).rglob("*"):
            parts = path.relative_to(ROOT).parts
            if "__pycache__" in parts or any(p.startswith(".") for p in parts) or not path.is_file():
                continue
            if (path.suffix == ".md" or (top == "experiments" and path.suffix == ".yaml")
                    or (path.suffix == ".py" and top in PYTHON_FOLDERS)):
                found.add(path)
    return sorted(found)


def _exists(token: str) -> bool:
    if (ROOT / token).exists():
        return True
    stem, dot, _attr = token.rpartition(".")  # package/module.name: an attribute of package/module.py
    return bool(dot) and "/" in stem and (ROOT / f"{stem}.py").is_file()


def _headings() -> list[str]:
    design = ROOT / DESIGN
    if not design.is_file():
        return []
    return [line.lstrip("#").strip() for line in design.read_text().splitlines() if re.match(r"#+ ", line)]


def _problems(path: Path, headings: list[str]) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    text = path.read_text(encoding="utf-8")
    examples = set(_EXAMPLE_FILE.findall(text)) if path.suffix == ".md" else set()
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        where = f"{rel}:{lineno}"
        for m in _PATH.finditer(line):
            if line[m.end():m.end() + 1] in _PLACEHOLDER:
                continue
            token = m.group(0).rstrip(".,:;-")
            if not token.endswith("/") and "." not in token.rsplit("/", 1)[-1]:
                continue  # a word with slashes, not a path
            if token in examples or token in OUTPUTS:
                continue
            if not _exists(token):
                out.append(f"{where}: {token} does not exist")
            elif token == DESIGN:
                section = _SECTION.match(line, m.end())
                if section and not any(h.startswith(section.group(1)) for h in headings):
                    out.append(f"{where}: {DESIGN} has no section {section.group(1)!r}")
        if not rel.startswith("docs/") and _BARE_DESIGN.search(line):
            out.append(f"{where}: the design document named without its folder (write {DESIGN})")
    return out


def test_every_named_repo_path_exists():
    headings = _headings()
    problems = [p for path in _files() for p in _problems(path, headings)]
    assert not problems, f"{len(problems)} path(s) named in the project do not exist:\n  " + "\n  ".join(problems)


def test_the_scan_reads_the_files_it_should():
    names = {p.relative_to(ROOT).as_posix() for p in _files()}
    assert {"README.md", DESIGN, "experiments/README.md", "harness/grpo/core.py", "tests/test_repo_paths.py"} <= names
    assert not any(n.startswith(("runs/", ".venv/")) for n in names)
    assert _headings(), f"{DESIGN} has no headings"


# A path of the machine a file was written on points nowhere in a clone: commands in the docs write placeholders
# (OUT, runs/...), and kept logs write REPO for the checkout. Joined from parts so this file does not match itself.
_MACHINE_ROOTS = ("/" + "work" + "/", "/" + "home" + "/")


def test_no_file_carries_a_path_of_the_machine_it_was_written_on():
    logs = sorted((ROOT / "benchmarks" / "logs").rglob("*.log"))
    found = [f"{path.relative_to(ROOT)}:{i}" for path in [*_files(), *logs]
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if any(root in line for root in _MACHINE_ROOTS)]
    assert not found, f"write a placeholder (OUT, runs/..., REPO) instead of this machine's path: {found[:20]}"
