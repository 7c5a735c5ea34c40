"""Supp. A figures from the analysis records: Fig. S5 (within-group reward std), Supp. A.3 (sign alignment)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from reports.analyses import sign_alignment
from reports.experiment import Experiment, Run, is_number
from reports.figures.common import COLORS, plt, save_figure
from reports.published import published_table
from reports.stats import summarize


def _analyses(exp: Experiment, kind: str, arm: str | None = None) -> list[tuple[Run, dict]]:
    runs = exp.runs_of(arm) if arm else [r for a in exp.arms for r in exp.runs_of(a.name)]
    return [(r, d) for r in runs for d in [r.analysis(kind)] if d]


def analysis_arms(exp: Experiment, kind: str) -> list[str]:
    """The arms with analyses of `kind`: the baseline arm first, then the study's order."""
    order = ([exp.baseline_arm] if exp.baseline_arm else []) + [a.name for a in exp.arms]
    return [arm for arm in dict.fromkeys(order) if arm and _analyses(exp, kind, arm)]


def analysis_arm(exp: Experiment, kind: str) -> str | None:
    """The arm whose runs' analyses the Supp. A figures use: the baseline arm if it has any, else the first."""
    arms = analysis_arms(exp, kind)
    return arms[0] if arms else None


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


def distinct_policy_seeds(exp: Experiment, kind: str, arm: str, policy: str) -> set[int]:
    """The seeds whose `policy` ("before" / "after") is a model of its own: with a shared SFT model (a study's
    `stage_seeds`) every seed's "before" policy is the same model, analysed with the same seed, so it counts
    once (the first seed), not as independent repeats with a zero-width interval."""
    seen: dict[str, int] = {}
    for run, d in sorted(_analyses(exp, kind, arm), key=lambda rd: rd[0].seed):
        model = (d.get("policies", {}).get(policy) or {}).get("model")
        seen.setdefault(str(model) if model else f"seed {run.seed}", run.seed)
    return set(seen.values())


def alignment_stats(exp: Experiment, arm: str | None = None) -> dict:
    """{policy: {seed: sign_alignment(...)}} of the arm's analysis_sign-alignment.json files, recomputed from the
    stored rewards with the current definitions (reports/analyses.py) where the file holds them."""
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
    arm = arm or analysis_arm(exp, "sign-alignment")
    vals = alignment_values(exp, arm)
    if not vals:
        return None
    pub = {r["arm"]: r for r in published_table("revapo_supp_a3")["rows"]}
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    width = 0.35
    for j, pol in enumerate(("before", "after")):
        own = distinct_policy_seeds(exp, "sign-alignment", arm, pol)  # a shared SFT model counts once
        for i, stat in enumerate(("p_sign", "p_top1")):
            s = summarize([v for k, v in vals.get(pol, {}).get(stat, {}).items() if k in own])
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
