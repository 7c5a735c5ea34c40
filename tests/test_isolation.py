"""The suite writes only into its temporary folders (issue 25; tests/conftest.py): HOME, the XDG folders, the
regbench cache (stage 0's tiny bases) and W&B point into the session's folder, and the session fails if a new entry
appears in the real HOME's watched folders."""

from __future__ import annotations

import os
from pathlib import Path

from tests import conftest


def _inside(path, root) -> bool:
    return Path(path).resolve().is_relative_to(Path(root).resolve())


def test_home_caches_and_wandb_point_into_the_session_folder():
    from harness.config import RunConfig
    from harness.stages.paths import base_dir, default_cache_dir

    assert not _inside(conftest.SESSION_DIR, conftest.REAL_HOME)
    for key in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "WANDB_DIR", "MPLCONFIGDIR"):
        assert _inside(os.environ[key], conftest.SESSION_DIR), key
    assert _inside(Path.home(), conftest.SESSION_DIR) and os.environ["WANDB_MODE"] == "offline"
    cache = default_cache_dir(RunConfig())  # where stage 0 caches a base when a test sets no cache_dir
    assert cache == Path(os.environ["REGBENCH_CACHE"]) and not _inside(cache, conftest.REAL_HOME)
    assert not _inside(base_dir(RunConfig()), conftest.REAL_HOME)


def test_a_new_entry_in_a_watched_folder_is_found(tmp_path):
    (tmp_path / "old").mkdir()
    before = conftest.listing([tmp_path, tmp_path / "old"])
    (tmp_path / "old" / "tiny-base").mkdir()
    (tmp_path / "new.txt").write_text("x")
    assert sorted(conftest.listing([tmp_path, tmp_path / "old"]) - before) == [str(tmp_path / "new.txt"),
                                                                            str(tmp_path / "old" / "tiny-base")]


def test_nothing_new_in_the_real_home_so_far():
    """The session-end check, run now too (it holds at the end of the session: tests/conftest.py). On a machine where
    other processes write into the same HOME meanwhile, REGBENCH_HOME_CHECK=warn reports instead of failing."""
    new = conftest.new_in_real_home()
    if os.environ.get("REGBENCH_HOME_CHECK") == "warn":
        print("new in the real HOME (not failing: REGBENCH_HOME_CHECK=warn):", new)
        return
    assert new == []
