"""Figures (PNG and PDF, matplotlib Agg backend) from run records.

- `fig2_rer_beta`: REVA-PO Fig. 2(a, b), beta against the normalised reference entropy for A > 0 and A < 0,
  computed with `regularizers.rer.rer_betas` itself.
- `fig3_curves`: Fig. 3(a) reward RER vs constant KL, 3(b) no KL vs KL, 3(c) with vs without VAPR (sampling
  reward, steps.jsonl `reward_mean`); `fig3d_kl_pressure`: KL pressure per step with the VAPR resets
  (evals.jsonl lines with `reset: true`) marked. KL pressure = the KL term of the loss, steps.jsonl `kl_loss`
  (token mean of beta_i x KL); where a line lacks it, `beta_mean x kl_mean`.
- `fig_s5_reward_std`: Fig. S5, within-group reward std before / after RL (analysis_reward-variance.json).
- `fig_a3_alignment`: Supp. A.3, P_sign and P_top1 before / after RL (analysis_sign-alignment.json), with
  the published values.
- `fig_optuna`: optimisation history of each Optuna study in a storage file (optional).
Curves: each seed's series is smoothed with a trailing rolling mean (window w, stated in the title), then
the arm's line is the mean over seeds at each step and its band mean ± 1 std across seeds (no band for n = 1).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from reports.experiment import Experiment, Run, is_number  # noqa: E402

COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]


def save_figure(fig, out_dir: str | Path, name: str) -> list[Path]:
    """Write `name`.png (150 dpi) and `name`.pdf; close the figure; return both paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    plt.close(fig)
    return paths


# ------------------------------------------------------------------------------------------------------
# Fig. 2


def rer_curves(beta_min: float = 0.05, beta_base: float = 0.10, beta_max: float = 0.12, k: int = 101):
    """(x, beta for A > 0, beta for A < 0): x in [0, 1] is the normalised reference entropy of Eq. 8."""
    import torch

    from regularizers.rer import rer_betas

    h = torch.linspace(0.0, 1.0, k, dtype=torch.float64).unsqueeze(0)  # one group: min 0, max 1
    x = (h - h.min()) / (h.max() - h.min() + 1e-6)
    pos = rer_betas(torch.ones_like(h), h, beta_min, beta_base, beta_max)
    neg = rer_betas(-torch.ones_like(h), h, beta_min, beta_base, beta_max)
    return x[0].numpy(), pos[0].numpy(), neg[0].numpy()


def fig2_rer_beta(out_dir, bounds: list[tuple[str, float, float, float]] | None = None) -> list[Path]:
    """Fig. 2(a) A > 0 and 2(b) A < 0, one line per (label, beta_min, beta_base, beta_max)."""
    bounds = bounds or [("MIMIC-CXR (0.05/0.10/0.12)", 0.05, 0.10, 0.12),
                        ("IU-Xray (0.05/0.10/0.15)", 0.05, 0.10, 0.15)]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for i, (label, lo, base, hi) in enumerate(bounds):
        x, pos, neg = rer_curves(lo, base, hi)
        style = dict(color=COLORS[i % len(COLORS)], ls=("-", "--", ":", "-.")[i % 4], label=label)
        axes[0].plot(x, pos, **style)
        axes[1].plot(x, neg, **style)
    for ax, title in zip(axes, ("(a) $A_i > 0$: toward $\\beta_{min}$", "(b) $A_i < 0$: toward $\\beta_{max}$"),
                         strict=True):
        ax.set_xlabel("normalised reference entropy $\\hat{H}^{ref}_i$")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("$\\beta_i$ (regularizers.rer.rer_betas)")
    axes[1].legend(fontsize=8)
    fig.suptitle("Fig. 2(a,b): RER KL weight per response", y=1.03)
    return save_figure(fig, out_dir, "fig2_rer_beta")


# ------------------------------------------------------------------------------------------------------
# Curves over steps


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
    (e.g. every reward arm of a reward study runs RER + VAPR): the reference arm if it is one of them, else
    the one sharing the most other factors with the reference arm, else the first."""
    out = []
    for a in exp.arms:
        f = exp.factors(a.name)
        if all(str(f.get(k)) in ({v} if isinstance(v, str) else set(v)) for k, v in want.items()):
            if exp.runs_of(a.name):
                out.append(a.name)
    if len(out) <= 1:
        return out
    if exp.reference_arm in out:
        return [exp.reference_arm]
    ref = exp.factors(exp.reference_arm) if exp.reference_arm in {a.name for a in exp.arms} else {}
    return [max(out, key=lambda a: sum(str(v) == str(ref.get(k)) for k, v in exp.factors(a).items()
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


# ------------------------------------------------------------------------------------------------------
# Supp. A figures (from analysis_*.json)


def _analyses(exp: Experiment, kind: str, arm: str | None = None) -> list[tuple[Run, dict]]:
    runs = exp.runs_of(arm) if arm else [r for a in exp.arms for r in exp.runs_of(a.name)]
    return [(r, d) for r in runs for d in [r.analysis(kind)] if d]


def analysis_arm(exp: Experiment, kind: str) -> str | None:
    """The arm whose runs' analyses the Supp. A figures use: the reference arm if it has any, else the first."""
    order = ([exp.reference_arm] if exp.reference_arm else []) + [a.name for a in exp.arms]
    for arm in order:
        if arm and _analyses(exp, kind, arm):
            return arm
    return None


def fig_s5_reward_std(exp: Experiment, out_dir, arm: str | None = None) -> list[Path] | None:
    """Fig. S5: distribution of the within-group reward std per reward, (a) before and (b) after RL, pooled
    over the arm's seeds."""
    arm = arm or analysis_arm(exp, "reward-variance")
    found = _analyses(exp, "reward-variance", arm) if arm else []
    if not found:
        return None
    rewards = list(dict.fromkeys(k for _, d in found for p in d["policies"].values() for k in p["rewards"]))
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    for ax, (pol, title) in zip(axes, (("before", "(a) Before RL"), ("after", "(b) After RL")), strict=True):
        data = []
        for name in rewards:
            vals = [np.asarray(d["policies"][pol]["rewards"][name], dtype=np.float64).std(axis=1)
                    for _, d in found if pol in d["policies"] and name in d["policies"][pol]["rewards"]]
            data.append(np.concatenate(vals) if vals else np.array([np.nan]))
        ax.boxplot(data, showmeans=True)
        ax.set_xticks(range(1, len(rewards) + 1), rewards)
        n_groups = sum(len(d["policies"].get(pol, {}).get("rewards", {}).get(rewards[0], [])) for _, d in found)
        ax.set_title(f"{title}: {n_groups} groups, G = {found[0][1].get('group_size')}", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel("within-group reward std")
    seeds = sorted(r.seed for r, _ in found)
    fig.suptitle(f"Fig. S5: within-group reward std, arm {arm}, seeds {seeds} (n = {len(seeds)})", fontsize=10,
                 y=1.03)
    return save_figure(fig, out_dir, "fig_s5_reward_std")


def alignment_stats(exp: Experiment, arm: str | None = None) -> dict:
    """{policy: {seed: sign_alignment(...)}} of the arm's analysis_sign-alignment.json files, recomputed from the
    stored rewards with the current definitions (reports/analyses.py) where the file holds them."""
    from reports.analyses import sign_alignment

    arm = arm or analysis_arm(exp, "sign-alignment")
    out: dict = {}
    for run, d in (_analyses(exp, "sign-alignment", arm) if arm else []):
        for pol, res in d["policies"].items():
            rewards = res.get("rewards") or {}
            if "bleu4" in rewards and "chexpert_f1" in rewards:
                stats = sign_alignment(rewards["bleu4"], rewards["chexpert_f1"])
            else:
                stats = res.get("stats") or {}
            out.setdefault(pol, {})[run.seed] = stats
    return out


def alignment_values(exp: Experiment, arm: str | None = None) -> dict:
    """{policy: {stat: {seed: value}}} (stat: p_sign = the paper's formula, p_sign_nonzero, p_top1)."""
    out: dict = {}
    for pol, by_seed in alignment_stats(exp, arm).items():
        for seed, stats in by_seed.items():
            for stat in ("p_sign", "p_sign_nonzero", "p_top1"):
                v = (stats.get(stat) or {}).get("value")
                if is_number(v):
                    out.setdefault(pol, {}).setdefault(stat, {})[seed] = float(v)
    return out


def fig_a3_alignment(exp: Experiment, out_dir, arm: str | None = None) -> list[Path] | None:
    """Supp. A.3: P_sign and P_top1 before / after RL (mean over seeds, 95% bootstrap interval), with the
    published values as markers."""
    from reports.published import published_table
    from reports.stats import summarize

    arm = arm or analysis_arm(exp, "sign-alignment")
    vals = alignment_values(exp, arm)
    if not vals:
        return None
    pub = {r["arm"]: r for r in published_table("revapo_supp_a3")["rows"]}
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    width = 0.35
    for j, pol in enumerate(("before", "after")):
        for i, stat in enumerate(("p_sign", "p_top1")):
            s = summarize(list(vals.get(pol, {}).get(stat, {}).values()))
            x = i + (j - 0.5) * width
            if s.n:
                err = [[s.mean - s.lo], [s.hi - s.mean]] if s.n > 1 else None
                ax.bar(x, s.mean, width, color=COLORS[j], yerr=err, capsize=3,
                       label=f"ours, {pol} RL (n={s.n})" if i == 0 else None)
            p = pub.get(f"{pol}_rl", {}).get("P_sign" if stat == "p_sign" else "P_top1")
            if p is not None:
                ax.plot([x], [p], marker="D", color="k", ms=5, label="REVA-PO Supp. A.3" if (i, j) == (0, 0) else None)
    ax.set_xticks([0, 1], ["P_sign", "P_top1"])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("probability")
    ax.set_title(f"Supp. A.3: BLEU-4 vs CheXpert-F1 agreement, arm {arm}\n(error bar: 95% bootstrap interval "
                 "over seeds)", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, loc="lower right")
    return save_figure(fig, out_dir, "fig_a3_alignment")


# ------------------------------------------------------------------------------------------------------
# Optuna (optional)


def _is_optuna_db(path: str | Path) -> bool:
    """True if `path` is an SQLite file with optuna's `studies` table (opened read-only)."""
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='studies'").fetchone()
            return row is not None
        finally:
            con.close()
    except sqlite3.Error:
        return False


def optuna_files(experiment_dir: str | Path) -> list[Path]:
    """The Optuna storages that belong to an experiment: SQLite `*.db` files in its folder, and the file journal
    (`optuna.journal`, what `regbench search` wrote before `optuna.db`) in its folder, one level below it, or one
    above it (a `search confirm` experiment lives inside its search folder, next to its `optuna.db`)."""
    root = Path(experiment_dir)
    found = [*sorted(root.glob("*.db")), *sorted(root.glob("optuna.journal")), *sorted(root.glob("*/optuna.journal")),
             *sorted(root.parent.glob("optuna.journal")), *sorted(root.parent.glob("optuna.db"))]
    return list(dict.fromkeys(p.resolve() for p in found if p.is_file()))


def _journal_storage(path: Path):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(path)))


def fig_optuna(storage_file: str | Path, out_dir) -> list[list[Path]]:
    """Optimisation history of every study in an Optuna SQLite file or file journal (empty list if optuna
    cannot read it)."""
    try:
        import optuna
        from optuna.visualization.matplotlib import plot_optimization_history
    except ImportError:
        return []
    if str(storage_file).endswith(".journal"):
        try:
            storage = _journal_storage(Path(storage_file))
        except Exception:  # noqa: BLE001 - a foreign or corrupt file is simply not plotted
            return []
    elif not _is_optuna_db(storage_file):  # never let optuna create its tables in a foreign file
        return []
    else:
        storage = f"sqlite:///{Path(storage_file).resolve()}"
    out = []
    try:
        summaries = optuna.get_all_study_summaries(storage)
    except Exception:  # noqa: BLE001 - a foreign or corrupt file is simply not plotted
        return []
    for s in summaries:
        try:
            study = optuna.load_study(study_name=s.study_name, storage=storage)
            if not any(t.state.name == "COMPLETE" for t in study.trials):
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # optuna marks its matplotlib plots experimental
                ax = plot_optimization_history(study)
            fig = ax.figure
            fig.set_size_inches(6, 3.6)
            safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in s.study_name)
            out.append(save_figure(fig, out_dir, f"fig_optuna_{safe}"))
        except Exception:  # noqa: BLE001
            plt.close("all")
            continue
    return out
