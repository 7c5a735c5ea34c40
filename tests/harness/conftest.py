"""Fixtures shared by the runner, search and kill -9 tests."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def calls(tmp_path, monkeypatch):
    """The stage calls the fake runners record (REGBENCH_TEST_CALLS), read back as a list of dicts."""
    path = tmp_path / "calls.jsonl"
    monkeypatch.setenv("REGBENCH_TEST_CALLS", str(path))

    def read() -> list[dict]:
        return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    return read
