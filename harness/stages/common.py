"""What every stage does the same way: seeding, data, images, prompts, model loading, run directories."""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from harness.config import RunConfig, to_dict
from harness.config.names import tracker_names
from harness.data.datasets import load_annotation
from harness.data.phantom import SPLITS, PhantomConfig, synthesize
from harness.runs import leftovers, preemption
from harness.runs import lock as runlock
from harness.runs import state as runstate
from harness.runs.records import RunDir
from harness.runs.trackers import read_labels
from harness.stages.paths import default_cache_dir, phantom_dir, test_split_dir  # noqa: F401 - re-exported


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def preemptible(fn: Callable) -> Callable:
    """A stage function `fn(cfg, ...)` run with the stop-signal handlers of `cfg.train.preempt_signals` installed
    (harness/runs/preemption.py: `handling`). Here, not in runs/, because it is the stage that reads the config."""

    @functools.wraps(fn)
    def wrapper(cfg, *args, **kwargs):
        with preemption.handling(cfg.train.preempt_signals):
            return fn(cfg, *args, **kwargs)

    return wrapper


@contextlib.contextmanager
def torch_threads(n: int):
    """Run the block with `n` torch threads (float sums, and so trained weights, depend on the count)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def ensure_phantom(out_dir: Path, n: int, seed: int, image_size: int, progress: bool = True,
                   splits: tuple[str, ...] | None = None, report_variation: str = "none") -> Path:
    """Synthesize the phantom set (only `splits`' studies when given) into `out_dir` unless it is already there;
    returns annotation.json."""
    ann = out_dir / "annotation.json"
    if ann.is_file():
        return ann
    cfg = PhantomConfig(n=n, seed=seed, image_size=image_size, report_variation=report_variation)
    return Path(synthesize(out_dir, cfg, splits or SPLITS))


def ensure_test_split(cfg: RunConfig, progress: bool = True) -> Path:
    """annotation.json of the phantom set's test split: the whole set's when it is there, else a set of the test
    studies alone (drawn on first use; the same studies, so the same test reports and scores)."""
    d = cfg.data
    folder = test_split_dir(cfg)
    only_test = folder != phantom_dir(cfg)
    return ensure_phantom(folder, d.synth_n, d.synth_seed, d.synth_image_size, progress,
                          ("test",) if only_test else None, d.report_variation)


def load_splits(cfg: RunConfig, progress: bool = True, only: str | None = None) -> dict:
    """{split: [Sample]} for the configured data set (synthesizing the phantom set on first use). `only="test"`:
    just the test split (on the phantom set, its studies alone are drawn when the whole set is not there)."""
    d = cfg.data
    phantom = d.dataset == "phantom" and d.annotation is None
    if phantom and only == "test":
        ann = ensure_test_split(cfg, progress)
    elif phantom:
        ann = ensure_phantom(phantom_dir(cfg), d.synth_n, d.synth_seed, d.synth_image_size, progress,
                             report_variation=d.report_variation)
    else:
        ann = Path(d.annotation)
    splits = load_annotation(ann, d.dataset, image_dir=d.image_dir, views=d.views,
                             allow_outside_image_dir=d.allow_outside_image_dir, cleaning=d.report_cleaning,
                             leak_check=d.leak_check,
                             **({"splits": (only,)} if only else {}))
    if "train" in splits:
        splits["train"] = select_train(splits["train"], d, str(ann))
    caps = {"val": d.max_val, "test": d.max_test}
    return {k: (v[: caps[k]] if caps.get(k) else v) for k, v in splits.items()}


def require_train(splits: dict, cfg: RunConfig, stage: str) -> dict:
    """A training stage needs training samples (and a validation split to choose and report on)."""
    source = cfg.data.annotation or str(phantom_dir(cfg) / "annotation.json")
    for split in ("train", "val"):
        if not splits.get(split):
            raise ValueError(f"{source}: the {split} split is empty (after data.train_min_tokens / data.max_{split}); "
                             f"stage {stage} needs {split} samples")
    return splits


def select_train(samples: list, d, source: str) -> list:
    """The training samples a stage uses: reports of at least `train_min_tokens` tokens, then `max_train`
    of them (the first, or a seeded random draw kept in data order); REVA-PO's RL subset is 30 / 10k."""
    if d.train_min_tokens:
        samples = [s for s in samples if len(s.report.split()) >= d.train_min_tokens]
        if not samples:
            raise ValueError(f"{source}: no training report has >= {d.train_min_tokens} tokens "
                             "(data.train_min_tokens)")
    if not d.max_train or d.max_train >= len(samples):
        return samples
    if d.train_subset == "first":
        return samples[: d.max_train]
    keep = sorted(random.Random(d.train_subset_seed).sample(range(len(samples)), d.max_train))
    return [samples[i] for i in keep]


def start_run(cfg: RunConfig, stage: str, extra: dict | None = None, restart: bool | None = None) -> RunDir:
    """The run directory, locked by this process (harness/runs/lock.py) and checked to be this stage's with this
    config (harness/runs/state.py; `restart` discards what it holds instead). A new or resumed run gets a fresh
    manifest, a completed one is left as it is; a run with no checkpoint starts from zero, so its logs are
    emptied (a rerun never appends to the rows of an interrupted or failed try)."""
    path = Path(cfg.out_dir)
    restart = runstate.restart_requested() if restart is None else restart
    runstate.check_out_dir(path)
    if not restart:
        runstate.check_reuse(path, to_dict(cfg), stage)  # before the folder is touched
    runlock.acquire(path)
    if restart:
        runstate.discard_run(path)
    else:
        runstate.check_reuse(path, to_dict(cfg), stage)  # again, now that no one else writes it

    # read_labels: a study's W&B group/name/tags and TensorBoard folder (harness/experiments/tracker_labels.py)
    run = RunDir(path, trackers=tracker_names(cfg.train.report_to),
                 tracker_info={"stage": stage, "config": to_dict(cfg), "project": cfg.train.wandb_project,
                               **read_labels(path)})
    leftovers.clean(path, finished=run.complete)  # a killed try's pixel caches, temporary files, unsealed checkpoint
    if not run.complete:
        if not runstate.has_checkpoint(path):
            run.clear_logs()
        # `preemptions`: how often the run was stopped by a signal so far (one line each in preemptions.jsonl)
        run.write_manifest(to_dict(cfg), cfg.seed, stage, {"config_hash": runstate.config_hash(to_dict(cfg)),
                                                           "preemptions": preemption.count(path), **(extra or {})})
    return run
