"""One meaning per word (issue 47): the glossary (docs/protocol.md, "## Glossary") is the source, and the phrases
its "Words not used" list bans appear in no tracked text file outside the glossary itself, code, tests and
documents alike. A phrase matches whatever its case and however it is broken over lines, as a whole word (so
`stage checkpoint` does not catch "the stage checkpoints and exits", a verb)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY_FILE = "docs/protocol.md"
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".sh", ".json", ".html", ".j2", ""}


def glossary(text: str) -> str:
    return text[text.index("## Glossary"):]


def banned_phrases(text: str) -> dict[str, str]:
    """The "Words not used" entries of the glossary: phrase -> the word to use instead."""
    section = glossary(text)
    section = section[section.index("### Words not used"):]
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^- `([^`]+)`: (.+)$", section, flags=re.M)}


def pattern(phrase: str) -> re.Pattern:
    """The phrase as whole words, any case, its words apart by spaces, line breaks and comment marks (#)."""
    return re.compile(r"\b" + r"[\s#]+".join(re.escape(w) for w in phrase.split()) + r"\b", flags=re.I)


def occurrences(files: dict[str, str], phrases) -> list[str]:
    """`path:line: phrase` for every banned phrase in `files` (path -> text)."""
    found = []
    for path, text in sorted(files.items()):
        for phrase in phrases:
            found += [f"{path}:{text.count(chr(10), 0, m.start()) + 1}: {phrase!r}"
                      for m in pattern(phrase).finditer(text)]
    return found


def _tracked_texts() -> dict[str, str]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    out = {}
    for name in names:
        path = ROOT / name
        if Path(name).suffix not in TEXT_SUFFIXES or not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        try:
            out[name] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
    text = out[GLOSSARY_FILE]
    out[GLOSSARY_FILE] = text[:text.index("## Glossary")]  # the glossary names the phrases it bans
    out.pop("tests/test_glossary.py", None)
    return out


def test_the_glossary_lists_the_words_it_bans():
    phrases = banned_phrases((ROOT / GLOSSARY_FILE).read_text(encoding="utf-8"))
    assert "stage checkpoint" in phrases and phrases["stage checkpoint"].startswith("**stage model**")
    assert len(phrases) >= 5


def test_no_banned_phrase_is_used():
    if not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout (git ls-files)")
    phrases = banned_phrases((ROOT / GLOSSARY_FILE).read_text(encoding="utf-8"))
    found = occurrences(_tracked_texts(), phrases)
    assert not found, "phrases the glossary bans (docs/protocol.md, Words not used):\n" + "\n".join(found)


def test_the_check_finds_a_phrase_across_lines_and_cases_only_as_whole_words():
    files = {"a.py": "x = 1\n# the Stage\n#   checkpoint folder\n", "b.md": "the stage checkpoints and exits 75\n",
             "c.md": "a reference model", "d.md": "prereference modelling"}
    assert occurrences(files, ["stage checkpoint", "reference model"]) == [
        "a.py:2: 'stage checkpoint'", "c.md:1: 'reference model'"]
