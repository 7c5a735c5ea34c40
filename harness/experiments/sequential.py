"""`regbench experiment run FILE --until-decided [--max-seeds K]`: seeds in rounds until every declared primary
contrast is decided (harness/stats/decisions.py), with alpha spent over the planned looks so that the chance of a
false "better" / "worse" over all looks stays at most alpha.

A look is a planned seed count (`decide.looks` of the study, e.g. [3, 5, 8]; without them, 3, 5, 8, 12, ...
up to K). Each round runs the study on the first n seeds (the study's seeds, then the next integers), which
resumes every run already complete, like any rerun; then the contrasts are decided at that look from the runs'
test metrics. The rounds stop at the first look where nothing is undecided, or at the last. What each look
decided is kept in `<out>/sequential.json`, so an interrupted search for a decision resumes where it was.

Under the study's default rule, `decide.rule: anytime` (issue 48), every look decides at the full alpha and a
later call may continue with a larger --max-seeds: the confidence sequence holds however the seeds were added.
Under `decide.rule: fixed_n` the looks and the maximum recorded in sequential.json are the plan: a call whose
looks differ from a plan that has already decided a look is refused (it would change the plan after looking and
spend more than alpha).
"""

from __future__ import annotations

import math
from pathlib import Path

from harness.config import ConfigError
from harness.experiments.run import ExperimentResult, run_experiment
from harness.experiments.study import Study, load_study
from harness.runs.records import atomic_write_json, read_json
from harness.runs.schema import INDEX_FILE, IndexKey, RunKey
from harness.stats.decisions import Contrast, Decision, decide_family, stop_rule

SEQUENTIAL_FILE = "sequential.json"
DEFAULT_LOOKS = (3, 5, 8, 12, 16, 24, 32)


def planned_looks(study: Study, max_seeds: int | None) -> list[int]:
    """The seed counts to decide at: the study's `decide.looks` (cut at max_seeds), else DEFAULT_LOOKS below
    max_seeds and max_seeds itself."""
    looks = study.decide.get("looks")
    if looks:
        cut = [n for n in looks if max_seeds is None or n <= max_seeds]
        if not cut:
            raise ConfigError(f"--max-seeds {max_seeds} is below the study's first look ({looks[0]} seeds)")
        return cut
    if max_seeds is None:
        raise ConfigError(f"{study.path}: --until-decided needs planned looks: set decide.looks in the study (e.g. "
                          "[3, 5, 8]) or give --max-seeds K")
    if max_seeds < 2:
        raise ConfigError(f"--max-seeds must be >= 2 (one seed never decides), got {max_seeds}")
    return [n for n in DEFAULT_LOOKS if n < max_seeds] + [max_seeds]


def seed_list(study: Study, n: int) -> list[int]:
    """The first n seeds: the study's, then the integers after its largest."""
    seeds = list(study.seeds[:n])
    nxt = max(study.seeds) + 1
    while len(seeds) < n:
        seeds.append(nxt)
        nxt += 1
    return seeds


def contrasts_of(study: Study) -> list[Contrast]:
    return [Contrast(c["arm"], c["baseline"], c["metric"], float(c["delta"])) for c in study.contrasts]


def seed_differences(out: Path, contrasts: list[Contrast], seeds: list[int]) -> dict[Contrast, list[float]]:
    """Per contrast, arm - baseline of its test metric over the given seeds that both arms completed."""
    index = read_json(out / INDEX_FILE)
    scores: dict[tuple[str, int], dict] = {}
    for r in index.get(IndexKey.RUNS, []):
        if r.get(RunKey.STATUS) == "complete" and r.get(RunKey.METRICS):
            scores[r[RunKey.ARM], int(r[RunKey.SEED])] = read_json(out / r[RunKey.METRICS])
    diffs = {}
    for c in contrasts:
        d = []
        for s in seeds:
            a, b = scores.get((c.arm, s), {}).get(c.metric), scores.get((c.baseline, s), {}).get(c.metric)
            if isinstance(a, int | float) and isinstance(b, int | float) and math.isfinite(a) and math.isfinite(b):
                d.append(float(a) - float(b))
        diffs[c] = d
    return diffs


def _check_plan(out: Path, looks: list[int]) -> None:
    """fixed_n: refuse looks other than those of a plan that has already decided a look (sequential.json)."""
    try:
        recorded = read_json(out / SEQUENTIAL_FILE)
    except (OSError, ValueError):
        return
    if recorded.get("history") and recorded.get("rule", "fixed_n") == "fixed_n" and recorded.get("looks") != looks:
        raise ConfigError(f"{out / SEQUENTIAL_FILE} records the plan looks {recorded.get('looks')} under decide.rule "
                          f"fixed_n, already looked at; looks {looks} would change the plan after looking and spend "
                          f"more than alpha: keep the plan, or set decide.rule: anytime (valid however seeds are "
                          f"added)")


def _record(d: Decision) -> dict:
    c = d.contrast
    return {"arm": c.arm, "baseline": c.baseline, "metric": c.metric, "delta": c.delta, "outcome": d.outcome,
            "n": d.n, "diff": d.diff, "lo": d.lo, "hi": d.hi, "p": d.p, "p_adjusted": d.p_adjusted,
            "alpha_look": d.alpha_look, "seeds_needed": d.seeds_needed}


def run_until_decided(study: Study | str | Path, out: str | Path | None = None, *, max_seeds: int | None = None,
                      log=None, **run_kwargs) -> tuple[ExperimentResult, list[Decision]]:
    """Run looks of growing seed counts until every declared contrast is decided; returns the last round's
    result and decisions. `run_kwargs` go to run_experiment (workers, arms, launcher, stages_dir, ...)."""
    if not isinstance(study, Study):
        study = load_study(study)
    if not study.contrasts:
        raise ConfigError(f"{study.path}: --until-decided needs declared primary contrasts ('contrasts:' in the "
                          "study file)")
    log = log or (lambda s: print(s, flush=True))
    looks = planned_looks(study, max_seeds)
    study.decide = {**study.decide, "looks": study.decide.get("looks") or looks}  # recorded in index.json
    plan_looks = study.decide["looks"]
    out = Path(out) if out else Path("runs") / f"{study.name}-{study.preset}"
    rule = study.decide.get("rule", "anytime")
    if rule == "fixed_n":
        _check_plan(out, plan_looks)
    contrasts = contrasts_of(study)
    history = []
    result, decisions = None, []
    for look, n in enumerate(looks, start=1):
        seeds = seed_list(study, n)
        study.seeds = seeds
        log(f"[until-decided] look {look}/{len(plan_looks)}: {n} seeds ({', '.join(map(str, seeds))})")
        result = run_experiment(study, out, seeds=seeds, log=log, **run_kwargs)
        result.stop_if_preempted(f"--until-decided look {look} of {study.name}")  # no decision on missing runs
        if not result.ok:
            log(f"[until-decided] look {look}: {len(result.failed)} run(s) failed; stopping undecided")
            break
        decisions = decide_family(contrasts, seed_differences(out, contrasts, seeds), alpha=study.decide["alpha"],
                                  looks=plan_looks, look=look, spending=study.decide["spending"], rule=rule)
        history.append({"look": look, "seeds": seeds, "decisions": [_record(d) for d in decisions]})
        atomic_write_json(out / SEQUENTIAL_FILE, {"looks": plan_looks, "alpha": study.decide["alpha"],
                                                   "spending": study.decide["spending"], "rule": rule,
                                                   "history": history})
        for d in decisions:
            c = d.contrast
            log(f"[until-decided]   {c.arm} - {c.baseline} {c.metric}: {d.diff:+.4f} [{d.lo:+.4f}, {d.hi:+.4f}] "
                f"n {d.n}: {d.outcome}")
        if stop_rule(decisions):
            log(f"[until-decided] every contrast decided at look {look} ({n} seeds)")
            break
    else:
        log(f"[until-decided] stopped at the last look ({looks[-1]} seeds) with undecided contrasts")
    return result, decisions
