"""The Optuna side of a search (harness/search/run.py): its sampler and pruner, opening its study in its storage
(one search per study, checked), and counting the trials that count towards n_trials."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from harness.config import ConfigError
from harness.runs.records import read_json
from harness.runs.state import check_out_dir
from harness.search.space import Search
from harness.search.storage import (
    DEFAULT_DB,
    HEARTBEAT,
    JOURNAL,
    Heartbeat,
    display,
    open_storage,
    retried_numbers,
    storage_url,
)

# Trial attributes: why a proposed point was not run; the driver checked the point (its arm can be planned).
INVALID_ATTR, SURPLUS_ATTR, CHECKED_ATTR = "invalid", "surplus", "regbench_checked"

def trial_sampler(search: Search, position: int = 0, parallel: bool = False):
    """The file's sampler for the trial at `position` (its number not counting trials enqueued again), seeded
    with seed + position: a trial's proposal depends on the history only, not on how often the search was
    resumed or how many drivers share it. Parallel trials use TPE's constant liar (running trials count as
    bad), so one batch spreads out."""
    # lazy: start-up cost (optuna)
    import optuna

    spec = search.sampler
    seed = spec.get("seed", 0) + position
    if spec.get("name", "tpe") == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=int(spec.get("n_startup_trials", 5)),
                                      constant_liar=parallel)


def _pruner(search: Search):
    # lazy: start-up cost (optuna)
    import optuna

    spec = search.pruner
    if spec.get("name") != "median":
        return optuna.pruners.NopPruner()
    # Steps are RL optimizer steps; a trial is compared with the others at the steps it has reported.
    return optuna.pruners.MedianPruner(n_startup_trials=int(spec.get("n_startup_trials", 3)),
                                       n_warmup_steps=int(spec.get("n_warmup_steps", 0)))


def open_study(out: Path, search: Search | None = None, *, create: bool = True, parallel: bool = False,
               storage: str | None = None, heartbeat: Heartbeat = HEARTBEAT):
    """The search's Optuna study and its storage: `storage` (a URL or spec, harness/search/storage.py), else the
    file's `storage:`, else (reading a folder) the one its search.json names, else `<out>/optuna.db` or an
    older folder's `<out>/optuna.journal`. `create` creates the study (named after the search) if need be."""
    # lazy: start-up cost (optuna)
    import optuna

    out = Path(out)
    spec = storage or (search.storage if search else None)
    summary = out / "search.json"
    if spec is None and not create:
        recorded = read_json(summary).get("storage") if summary.is_file() else None
        if recorded and "***" in recorded:
            raise ConfigError(f"{summary}: the study is in {recorded}; pass --storage with the password")
        spec = recorded
        if spec is None and not (out / DEFAULT_DB).is_file() and not (out / JOURNAL).is_file():
            raise FileNotFoundError(f"{out}: not a search folder (no search.json storage, {DEFAULT_DB} or {JOURNAL})")
    url = storage_url(spec, out)  # checked (parses, driver installed, SQLite file is one) before any write
    if not create:
        store = open_storage(url, heartbeat)
        names = optuna.get_all_study_names(store)
        wanted = read_json(summary).get("search") if summary.is_file() else None
        if not names:
            raise FileNotFoundError(f"{out}: no Optuna study in {url}")
        study = optuna.load_study(study_name=wanted if wanted in names else names[0], storage=store)
        return study, store
    check_out_dir(out, "--out")
    existed = out.exists()
    try:
        store = open_storage(url, heartbeat)
        study = optuna.create_study(study_name=search.name, storage=store, load_if_exists=True,
                                    direction=search.objective.direction,
                                    sampler=trial_sampler(search, parallel=parallel), pruner=_pruner(search))
        _check_same_search(study, search, url)
    except Exception as e:
        if not existed:  # made by this call (the default SQLite file's folder): leave nothing behind
            with contextlib.suppress(OSError):
                out.rmdir()  # only if empty: never what another driver may have put there meanwhile
        if isinstance(e, ConfigError):
            raise
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ConfigError(f"storage {display(url)!r}: cannot open the Optuna study ({type(e).__name__}: "
                          f"{first[:200]}); check the URL, that the database server runs and accepts this user, "
                          "or use another storage (--storage)") from e
    out.mkdir(parents=True, exist_ok=True)
    return study, store

SEARCH_ATTR = "regbench_search"


def _identity(search: Search) -> dict:
    """What makes two drivers run the same search: the trials they run must mean the same thing."""
    return json.loads(json.dumps({
        "preset": search.preset, "seeds": search.seeds, "pipeline": search.pipeline,
        "objective": {"metric": search.objective.metric, "direction": search.objective.direction},
        "fixed": search.fixed, "space": {p.key: {k: v for k, v in vars(p).items() if k != "key"}
                                         for p in search.params},
        "common": search.common, "stages": search.stages}, sort_keys=True, default=str))


def _check_same_search(study, search: Search, url: str) -> None:
    """A study in a shared storage is one search: refuse a driver whose search differs, naming the keys."""
    mine = _identity(search)
    theirs = study.user_attrs.get(SEARCH_ATTR)
    if theirs is None:
        study.set_user_attr(SEARCH_ATTR, mine)
        return
    differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    if differ:
        shown = "; ".join(f"{k}: {theirs.get(k)!r} in the study, {mine.get(k)!r} here" for k in differ[:3])
        raise ConfigError(f"{search.path}: the study '{search.name}' in {display(url)} was started by another "
                          f"search ({shown}). Give this search another name (--set search=NAME), another --out "
                          "or --storage")

def counted_trials(study) -> list:
    """The finished trials that count towards n_trials (not the ones enqueued again, nor surplus asks)."""
    # lazy: start-up cost (optuna)
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    retried = retried_numbers(trials)
    return [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
            and t.number not in retried and not t.user_attrs.get(SURPLUS_ATTR)]


def trial_position(study, number: int) -> int:
    """Trial `number`'s place in the search: its number less the earlier trials enqueued again or surplus."""
    trials = study.get_trials(deepcopy=False)
    retried = retried_numbers(trials)
    return sum(1 for t in trials if t.number < number and t.number not in retried
               and not t.user_attrs.get(SURPLUS_ATTR))
