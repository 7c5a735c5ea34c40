"""Shared fixtures: a tiny tokenizer/processor/model built offline, and a small synthetic data set.

The suite writes nothing outside temporary folders (issue 25): before any test module is imported, HOME, the XDG
folders, the regbench cache (REGBENCH_CACHE, where stage 0 caches its tiny bases) and W&B (offline, WANDB_DIR) point
into one temporary folder of the session, removed at its end; subprocesses inherit them. REGBENCH_TEST_CACHE names a
folder to use as the regbench cache instead (e.g. one a CI job keeps between runs). At the end of the session the
real HOME, its ~/.cache and ~/.cache/regbench (and its tiny-base/) are compared with their listing at the start: a
new entry fails the session with its path (`REGBENCH_HOME_CHECK=warn` only reports it, for a machine where other
processes write there at the same time).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REAL_HOME = Path(os.path.expanduser("~")).resolve()
SESSION_DIR = Path(tempfile.mkdtemp(prefix="regbench-tests-")).resolve()
ISOLATED_ENV = {
    "HOME": SESSION_DIR / "home",
    "XDG_CACHE_HOME": SESSION_DIR / "home" / ".cache",
    "XDG_CONFIG_HOME": SESSION_DIR / "home" / ".config",
    "XDG_DATA_HOME": SESSION_DIR / "home" / ".local" / "share",
    "REGBENCH_CACHE": Path(os.environ.get("REGBENCH_TEST_CACHE") or SESSION_DIR / "regbench-cache"),
    "WANDB_DIR": SESSION_DIR / "wandb",
    "WANDB_CACHE_DIR": SESSION_DIR / "wandb" / "cache",
    "WANDB_CONFIG_DIR": SESSION_DIR / "wandb" / "config",
    "WANDB_DATA_DIR": SESSION_DIR / "wandb" / "data",
    "MPLCONFIGDIR": SESSION_DIR / "home" / ".config" / "matplotlib",
}
for _key, _path in ISOLATED_ENV.items():
    _path.mkdir(parents=True, exist_ok=True)
    os.environ[_key] = str(_path)
os.environ["WANDB_MODE"] = "offline"  # never the network; runs stay in their folders
os.environ["WANDB_SILENT"] = "true"

# What the suite must leave as it found it: the real HOME, its cache, the regbench cache and its stage-0 bases.
WATCHED = [REAL_HOME, REAL_HOME / ".cache", REAL_HOME / ".cache" / "regbench",
           REAL_HOME / ".cache" / "regbench" / "tiny-base", REAL_HOME / ".config", REAL_HOME / ".local" / "share"]


def listing(folders=WATCHED) -> set[str]:
    """Paths of the entries of `folders` (those that exist)."""
    return {str(p) for d in folders if d.is_dir() for p in d.iterdir()}


HOME_BEFORE = listing()


def new_in_real_home() -> list[str]:
    """Entries of the watched real folders that were not there when the session started."""
    return sorted(listing() - HOME_BEFORE)


def pytest_sessionfinish(session, exitstatus):
    new = new_in_real_home()
    if new:
        # The check sees the folders, not the writer: a command run beside the suite on the same account (a
        # `regbench report` drawing with matplotlib, say) trips it too, hence the word "appeared" and the way out.
        message = ("new in the real home during the test session (the suite wrote outside its temporary folders, "
                   "or another process of this account did; REGBENCH_HOME_CHECK=warn on a shared machine): "
                   + ", ".join(new))
        if os.environ.get("REGBENCH_HOME_CHECK", "fail") == "warn":
            print(f"\nwarning: {message}")
        else:
            print(f"\nerror: {message}")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    shutil.rmtree(SESSION_DIR, ignore_errors=True)

CORPUS = [
    "the heart size is normal . there is no pleural effusion or pneumothorax .",
    "mild cardiomegaly . small left pleural effusion . no focal consolidation .",
    "the lungs are clear . no acute osseous abnormality .",
    "right lower lobe opacity may represent pneumonia . endotracheal tube in place .",
] * 20


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from harness.models.tiny import train_tokenizer

    return train_tokenizer(CORPUS, vocab_size=400)


@pytest.fixture(scope="session")
def tiny_processor(tiny_tokenizer):
    from harness.models.tiny import build_processor

    return build_processor(tiny_tokenizer, 56)


@pytest.fixture
def tiny_model(tiny_tokenizer):
    from harness.models.tiny import build_tiny_model

    return build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=1, vision_hidden=16,
                            vision_depth=1, image_size=56)


@pytest.fixture(scope="session")
def xray_images():
    from PIL import Image

    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 255, (64, 64), dtype=np.uint8)).convert("RGB") for _ in range(4)]
