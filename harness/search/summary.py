"""The record of a search (harness/search/run.py): `<out>/search.json` (format regbench.search/1), every trial with
its values, objective, per-seed values and state, and the best trial; reports/search.py reads it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.search.file import arm_name
from harness.search.optuna_study import INVALID_ATTR, SURPLUS_ATTR
from harness.search.space import Search
from harness.search.storage import retried_numbers

SEARCH_FORMAT = "regbench.search/1"

def search_summary(search: Search, study, out: Path, storage: str | None = None) -> dict:
    # lazy: start-up cost (optuna)
    from optuna.trial import TrialState

    trials = []
    retried = retried_numbers(study.get_trials(deepcopy=False))
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.WAITING:
            continue  # enqueued again, not asked for yet: listed once it runs
        state = "surplus" if t.user_attrs.get(SURPLUS_ATTR) else t.state.name.lower()
        trials.append({"number": t.number, "arm": arm_name(t.number), "state": state,
                       # (Optuna gives a pruned trial its last intermediate value; it has no objective.)
                       "values": t.params, "objective": t.value if t.state == TrialState.COMPLETE else None,
                       "per_seed": t.user_attrs.get("per_seed"), "error": t.user_attrs.get("error"),
                       "pruned": t.user_attrs.get("pruned"), "invalid": bool(t.user_attrs.get(INVALID_ATTR)),
                       "requeued": t.number in retried, "retry_of": t.system_attrs.get("failed_trial"),
                       "duration_s": t.duration.total_seconds() if t.duration else None})
    complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    best = None
    if complete:
        b = study.best_trial
        best = {"number": b.number, "arm": arm_name(b.number), "values": b.params, "objective": b.value}
    return {"format": SEARCH_FORMAT, "search": search.name, "title": search.title, "search_file": str(search.path),
            "preset": search.preset, "preset_file": str(search.preset_file), "sets": search.sets,
            "seeds": search.seeds, "n_trials": search.n_trials,
            "objective": {"metric": search.objective.metric, "direction": search.objective.direction,
                          "description": search.objective.description},
            "sampler": search.sampler or {"name": "tpe"}, "pruner": search.pruner,
            "space": {p.key: {k: v for k, v in vars(p).items() if k != "key" and v not in (None, False)}
                      for p in search.params},
            "trials": trials, "best": best, "index": "index.json", "storage": storage}


@dataclass
class SearchResult:
    out: Path
    summary: dict

    @property
    def best(self) -> dict | None:
        return self.summary["best"]
