"""The report of an Optuna search folder (harness/search/run.py): the trials table and Optuna's plots.

    regbench search report runs/rer_bounds-tiny-bench [--dest DIR]

writes into `<out>/search_report/` (or DEST):

- `trials.csv` and `trials.md`: one row per trial (number, arm, state, objective, per-seed values, the searched
  values), finished trials best first;
- `best.json`: the best trial (values, objective, arm) and the objective's definition;
- `history.png` (objective per trial and the running best), `slice.png` (objective against each parameter),
  and, once there are enough complete trials, `importance.png` (fANOVA importances), `contour.png` (pairs of
  parameters) and `parallel.png`; all from `optuna.visualization.matplotlib`;
- `README.md`: what the search optimised, the best trial, the table and the figures.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd

from harness.runs.records import atomic_write_json, atomic_write_text, read_json

MIN_TRIALS_FOR_IMPORTANCE = 3


def trials_frame(summary: dict) -> pd.DataFrame:
    """One row per trial; finished trials first, best first."""
    rows = []
    for t in summary["trials"]:
        row = {"trial": t["number"], "arm": t["arm"], "state": t["state"], "objective": t["objective"]}
        for seed, value in (t.get("per_seed") or {}).items():
            row[f"seed{seed}"] = value
        row.update({key.split(".")[-1]: value for key, value in (t["values"] or {}).items()})
        row["error"] = t.get("error")
        rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    ascending = summary["objective"]["direction"] == "minimize"
    frame["_done"] = frame["objective"].notna()
    frame = frame.sort_values(["_done", "objective", "trial"], ascending=[False, ascending, True])
    return frame.drop(columns="_done").reset_index(drop=True)


def _markdown(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "(no trials)\n"
    cols = [c for c in frame.columns if c != "error" or frame["error"].notna().any()]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in frame[cols].iterrows():
        cells = []
        for c in cols:
            v = row[c]
            if v is None or (isinstance(v, float) and pd.isna(v)):
                cells.append("–")
            elif isinstance(v, float):
                cells.append(f"{v:.4g}")
            else:
                cells.append(str(v).replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _save_plot(plot, study, path: Path, size: tuple[float, float] = (7.0, 4.5), **kwargs) -> bool:
    # lazy: start-up cost (matplotlib)
    import matplotlib

    matplotlib.use("Agg")
    # lazy: start-up cost (matplotlib)
    import matplotlib.pyplot as plt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
        try:
            result = plot(study, **kwargs)
        except (ValueError, RuntimeError, ZeroDivisionError) as e:  # too few trials for this plot
            print(f"  skipped {path.name}: {e}")
            return False
    fig = result.figure if hasattr(result, "figure") else result.flat[0].figure
    fig.set_size_inches(max(fig.get_size_inches()[0], size[0]), max(fig.get_size_inches()[1], size[1]))
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return True


def build_search_report(out: str | Path, study, dest: str | Path | None = None) -> Path:
    """Write the search report of `out` (a `regbench search run` folder) from its search.json and its
    optuna.Study, which the caller opened (harness/cli/search_commands.py); returns the report folder."""
    # lazy: start-up cost (optuna)
    from optuna.trial import TrialState
    from optuna.visualization import matplotlib as ovm

    out = Path(out)
    summary_path = out / "search.json"
    if not summary_path.is_file():
        raise FileNotFoundError(f"{summary_path}: not a search folder (run `regbench search run FILE` first)")
    summary = read_json(summary_path)
    dest = Path(dest) if dest else out / "search_report"
    dest.mkdir(parents=True, exist_ok=True)

    frame = trials_frame(summary)
    atomic_write_text(dest / "trials.csv", frame.to_csv(index=False))
    table = _markdown(frame)
    atomic_write_text(dest / "trials.md", table)
    atomic_write_json(dest / "best.json", {"best": summary["best"], "objective": summary["objective"],
                                           "search": summary["search"], "preset": summary["preset"]})

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    names = sorted({k for t in complete for k in t.params})
    numeric = [k for k in names if all(isinstance(t.params.get(k), int | float) for t in complete)]
    figures = []
    if complete:
        for name, plot, kwargs in (("history.png", ovm.plot_optimization_history, {}),
                                   ("slice.png", ovm.plot_slice, {})):
            if _save_plot(plot, study, dest / name, **kwargs):
                figures.append(name)
    if len(complete) >= MIN_TRIALS_FOR_IMPORTANCE and len(names) >= 2:
        if _save_plot(ovm.plot_param_importances, study, dest / "importance.png"):
            figures.append("importance.png")
        if _save_plot(ovm.plot_parallel_coordinate, study, dest / "parallel.png"):
            figures.append("parallel.png")
        shown = numeric[:3]
        if len(shown) >= 2 and _save_plot(ovm.plot_contour, study, dest / "contour.png",
                                          size=(3.6 * len(shown) + 1.5, 3.2 * len(shown)), params=shown):
            figures.append("contour.png")

    objective = summary["objective"]
    best = summary["best"]
    lines = [f"# {summary['title']}", "",
             f"Search `{summary['search']}` on preset `{summary['preset']}`, seeds {summary['seeds']}: "
             f"{objective['direction']} `{objective['metric']}` ({objective['description']}), averaged over seeds.",
             f"{len(complete)} complete of {len(summary['trials'])} trials (target {summary['n_trials']}).", ""]
    if best:
        values = ", ".join(f"`{k}` = {v:.4g}" if isinstance(v, float) else f"`{k}` = {v}"
                           for k, v in best["values"].items())
        lines += [f"**Best: trial {best['number']}** (arm `{best['arm']}`), {objective['metric']} = "
                  f"{best['objective']:.4f}: {values}.", ""]
    if len(summary["seeds"]) < 2:
        lines += ["One seed per trial: differences between trials include seed noise. Before trusting the ranking, "
                  f"rerun the best few against the preset's values over several seeds: `regbench search confirm "
                  f"{out} --top 3 --seeds 0,1,2` (paired tests in its report).", ""]
    lines += ["## Trials", "", table, "## Figures", ""]
    lines += [f"![{name}]({name})" for name in figures] or ["(no complete trials yet)"]
    atomic_write_text(dest / "README.md", "\n".join(lines) + "\n")
    return dest
