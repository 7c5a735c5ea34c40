"""Training curves: Fig. 3(a-d), every arm's curves, validation scores (steps.jsonl / evals.jsonl)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from reports.experiment import Experiment, Run, is_number
from reports.figures.common import COLORS, plt, save_figure


def kl_pressure(row: dict) -> float | None:
    """The KL term of the loss at a step: `kl_loss`, else beta_mean x kl_mean (None if neither is logged)."""
    if is_number(row.get("kl_loss")):
        return float(row["kl_loss"])
    if is_number(row.get("beta_mean")) and is_number(row.get("kl_mean")):
        return float(row["beta_mean"]) * float(row["kl_mean"])
    return None


def series(run: Run, key: str | Callable[[dict], float | None]) -> pd.Series:
    """One run's steps.jsonl values of `key` (or of a function of the line), indexed by step."""
    get = key if callable(key) else (lambda r: r.get(key))
    pts = {}
    for r in run.steps:
        v = get(r)
        if "step" in r and is_number(v):
            pts[int(r["step"])] = float(v)
    return pd.Series(pts, dtype=np.float64).sort_index()


def default_window(n_steps: int) -> int:
    return max(1, int(round(n_steps / 50)))


def band(runs: list[Run], key, window: int | None = None) -> tuple[pd.DataFrame, int]:
    """(frame with step, mean, std, n per step over seeds; window used), each seed smoothed first."""
    ss = [series(r, key) for r in runs]
    ss = [s for s in ss if len(s)]
    if not ss:
        return pd.DataFrame(columns=["step", "mean", "std", "n"]), 1
    w = window or default_window(max(len(s) for s in ss))
    smooth = pd.concat([s.rolling(w, min_periods=1).mean() for s in ss], axis=1)
    out = pd.DataFrame({"step": smooth.index, "mean": smooth.mean(axis=1).values,
                        "std": smooth.std(axis=1, ddof=1).values, "n": smooth.count(axis=1).values})
    return out, w


def plot_band(ax, frame: pd.DataFrame, label: str, color) -> None:
    if frame.empty:
        return
    n = int(frame.n.max())
    ax.plot(frame.step, frame["mean"], color=color, label=f"{label} (n={n})", lw=1.4)
    if n > 1:
        sd = frame["std"].fillna(0.0)
        ax.fill_between(frame.step, frame["mean"] - sd, frame["mean"] + sd, color=color, alpha=0.2, lw=0)


def curves_figure(exp: Experiment, groups: list[tuple[str, list[str]]], key, ylabel: str, title: str,
                  window: int | None = None, resets: bool = False, ax=None):
    """One axes: for each (label, arms) the mean ± std band over all the arms' complete runs."""
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(6, 3.6))
    used_w = 1
    for i, (label, arms) in enumerate(groups):
        runs = [r for a in arms for r in exp.runs_of(a)]
        frame, used_w = band(runs, key, window)
        color = COLORS[i % len(COLORS)]
        plot_band(ax, frame, label, color)
        if resets:
            steps = sorted({s for r in runs for s in r.reset_steps()})
            for j, s in enumerate(steps):
                ax.axvline(s, color=color, ls="--", lw=0.9, alpha=0.8,
                           label=f"{label}: VAPR reset" if j == 0 else None)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{title}\n(band: ±1 std across seeds; rolling mean w={used_w})", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return (ax.figure if own else None)


def _arms_where(exp: Experiment, **want) -> list[str]:
    """The one arm (as a list; empty if none) with the wanted factors that has complete runs. Several match
    (e.g. every reward arm of a reward study runs RER + VAPR): the baseline arm if it is one of them, else
    the one sharing the most other factors with the baseline arm, else the first."""
    out = []
    for a in exp.arms:
        f = exp.factors(a.name)
        if all(str(f.get(k)) in ({v} if isinstance(v, str) else set(v)) for k, v in want.items()):
            if exp.runs_of(a.name):
                out.append(a.name)
    if len(out) <= 1:
        return out
    if exp.baseline_arm in out:
        return [exp.baseline_arm]
    base = exp.factors(exp.baseline_arm) if exp.baseline_arm in {a.name for a in exp.arms} else {}
    return [max(out, key=lambda a: sum(str(v) == str(base.get(k)) for k, v in exp.factors(a).items()
                                       if k not in want))]


def fig3_panels(exp: Experiment) -> dict[str, tuple[list[tuple[str, list[str]]], str]]:
    """Which arms each panel of Fig. 3 compares (panels without the arms they need are left out).

    (a) RER vs constant KL with the same reference strategy (VAPR preferred); (b) no KL vs RER (VAPR
    preferred); (c) RER with VAPR vs RER with a static reference; (d) KL pressure of the RER arms with and
    without VAPR, resets marked.
    """
    panels = {}
    refs = ["vapr", "static", "ema"]
    for ref in refs:
        rer, ckl = _arms_where(exp, regularizer="rer", reference=ref), _arms_where(exp, regularizer="constant",
                                                                                  reference=ref)
        if rer and ckl:
            panels["a"] = ([(f"RER ({ref})", rer), (f"constant KL ({ref})", ckl)],
                           "Fig. 3(a): sampling reward, RER vs constant KL")
            break
    nokl = _arms_where(exp, regularizer="none")
    for ref in refs:
        kl = _arms_where(exp, regularizer="rer", reference=ref)
        if nokl and kl:
            panels["b"] = ([(f"KL: RER ({ref})", kl), ("no KL", nokl)], "Fig. 3(b): sampling reward, no KL vs KL")
            break
    vapr, static = _arms_where(exp, regularizer="rer", reference="vapr"), _arms_where(exp, regularizer="rer",
                                                                                    reference="static")
    if vapr and static:
        panels["c"] = ([("RER + VAPR", vapr), ("RER, static reference", static)],
                       "Fig. 3(c): sampling reward, with vs without VAPR")
    if vapr:
        groups = [("RER + VAPR", vapr)] + ([("RER, static reference", static)] if static else [])
        panels["d"] = (groups, "Fig. 3(d): KL pressure (beta x KL) with VAPR resets")
    return panels


def fig3_curves(exp: Experiment, out_dir, window: int | None = None) -> dict[str, list[Path]]:
    """Fig. 3(a)-(d) for the panels `fig3_panels` finds; returns {panel: [png, pdf]}."""
    out = {}
    for panel, (groups, title) in fig3_panels(exp).items():
        if panel == "d":
            fig = curves_figure(exp, groups, kl_pressure, "KL pressure (kl_loss = mean of beta_i x KL)", title,
                                window, resets=True)
        else:
            fig = curves_figure(exp, groups, "reward_mean", "mean sampling reward", title, window)
        out[panel] = save_figure(fig, out_dir, f"fig3{panel}")
    return out


def fig_all_arms(exp: Experiment, out_dir, key: str, name: str, ylabel: str, title: str,
                 window: int | None = None) -> list[Path] | None:
    """Every arm's curve of one steps.jsonl key (e.g. reward_mean, kl_mean, entropy_mean)."""
    def logged(arm) -> bool:
        return any(is_number(s.get(key)) for r in exp.runs_of(arm.name) for s in r.steps)

    ran = [a for a in exp.arms if any(len(r.steps) for r in exp.runs_of(a.name))]
    groups = [(a.label, [a.name]) for a in ran if logged(a)]
    if not groups:
        return None
    # An arm that never measured the quantity (e.g. no KL: no reference pass) is named, never drawn as 0.
    missing = [a.label for a in ran if not logged(a)]
    if missing:
        title = f"{title}\nnot computed: {', '.join(missing)}"
    fig = curves_figure(exp, groups, key, ylabel, title, window, resets=key in ("kl_loss", "kl_mean"))
    return save_figure(fig, out_dir, name)


def fig_val_scores(exp: Experiment, out_dir) -> list[Path] | None:
    """Validation score (evals.jsonl val_score) over steps per arm, mean ± std across seeds, resets marked."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    drawn = False
    for i, a in enumerate(exp.arms):
        runs = exp.runs_of(a.name)
        pts = [pd.Series({int(e["step"]): float(e["val_score"]) for e in r.val_evals if is_number(e.get("val_score"))},
                         dtype=np.float64) for r in runs]
        pts = [p.sort_index() for p in pts if len(p)]
        if not pts:
            continue
        frame = pd.concat(pts, axis=1)
        df = pd.DataFrame({"step": frame.index, "mean": frame.mean(axis=1).values,
                           "std": frame.std(axis=1, ddof=1).values, "n": frame.count(axis=1).values})
        color = COLORS[i % len(COLORS)]
        plot_band(ax, df, a.label, color)
        ax.scatter(df.step, df["mean"], color=color, s=8)
        for s in sorted({s for r in runs for s in r.reset_steps()}):
            ax.axvline(s, color=color, ls=":", lw=0.8, alpha=0.7)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("validation score (Eq. 10)")
    ax.set_title("Validation score per arm (band: ±1 std across seeds; dotted: VAPR resets)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save_figure(fig, out_dir, "fig_val_score")
