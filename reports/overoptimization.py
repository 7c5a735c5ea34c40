"""Reward over-optimisation (issue 12; experiments/overoptimization.yaml): gold and proxy against KL.

Reads the RL validations of each run (evals.jsonl, split val), which log `proxy_reward` (mean rl.reward of the
greedy validation reports), `gold_f1` / `gold_exact` (the phantom's gold reader, which no reward sees, on those
reports against what was drawn), `labeler_f1` (the rule labeler that chexpert_f1, MCCS and entity F1 build on,
against the stored report labels: the gold of runs before issue 24), `labeler_gold_disagree` (share of reports the
two read differently) and `kl_start_seq` (KL to the SFT policy, harness/grpo/val_drift.py).

- `fig_frontier`: per arm, gold and proxy against sqrt(KL) (Gao et al., 2022, plot their reward-model scores
  against d = sqrt(KL(pi || pi_init))); one point per validation, the line joins the means over seeds.
- `end_table`: each arm's values at its last validation (the final policy), mean and 95% t-interval over seeds,
  and the paired difference to its contrast arm (reports/stats.py: paired t-test over shared seeds, p adjusted
  by Holm-Bonferroni over the whole table). The contrast arm of an arm is the arm whose factors equal the
  study's baseline arm's factors except `reward` (constant KL with the same reward) and that has complete runs,
  else the baseline arm.
- `disagreement_table`: per arm, how often the rule labeler and the gold reader disagree on the greedy reports,
  at the first validation (before RL, when logged at step 0), at the last (after RL) and on the test split.
  A policy that learns to please the labeler (a clinical-proxy arm hacking its reward) shows as a rising rate.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from reports.experiment import Experiment, Run, is_number
from reports.html import Table
from reports.stats import holm, paired_comparison, summarize

END_METRICS = ("gold_f1", "gold_exact", "labeler_f1", "proxy_reward", "kl_start_seq")
DISAGREE_KEY = "labeler_gold_disagree"
KL_KEY = "kl_start_seq"


def has_gold(exp: Experiment) -> bool:
    return any(is_number(e.get("gold_f1")) and is_number(e.get(KL_KEY)) for r in exp.runs for e in r.val_evals)


def final_values(run: Run) -> dict[str, float]:
    """The last validation line's metrics (the final policy; the step-0 line when nothing trained)."""
    vals = run.val_evals
    if not vals:
        return {}
    last = max(vals, key=lambda e: e.get("step", -1))
    return {m: float(last[m]) for m in END_METRICS if is_number(last.get(m))}


def contrast_arm(exp: Experiment, arm: str) -> str | None:
    baseline = exp.baseline_arm
    if baseline is None:
        return None
    want = {k: v for k, v in exp.factors(baseline).items() if k != "reward"}
    reward = exp.factors(arm).get("reward")
    for a in exp.arms:
        f = exp.factors(a.name)
        if exp.runs_of(a.name) and f.get("reward") == reward and {k: v for k, v in f.items() if k != "reward"} == want:
            return a.name
    return baseline


def _fmt(s, digits: int) -> str:
    if s.n == 0:
        return "–"
    ci = f" [{s.lo:.{digits}f}, {s.hi:.{digits}f}]" if s.n > 1 else ""
    return f"{s.mean:.{digits}f}{ci}"


def end_table(exp: Experiment, digits: int = 3) -> Table:
    per_arm = {a.name: {r.seed: final_values(r) for r in exp.runs_of(a.name)} for a in exp.arms}
    comps, cells = [], []
    for a in exp.arms:
        other = contrast_arm(exp, a.name)
        row = [a.name, str(len(per_arm[a.name])), other if other and other != a.name else "–"]
        for m in END_METRICS:
            mine = {s: v[m] for s, v in per_arm[a.name].items() if m in v}
            row.append(_fmt(summarize(list(mine.values())), digits))
            if other and other != a.name:
                theirs = {s: v[m] for s, v in per_arm[other].items() if m in v}
                c = paired_comparison(mine, theirs)
                comps.append((len(cells), m, c))
        cells.append(row)
    adjusted = holm([c.p for _, _, c in comps])
    diff = {}
    for (i, m, c), p_adj in zip(comps, adjusted, strict=True):
        if c.n >= 2:
            diff[(i, m)] = f"{c.diff:+.{digits}f} [{c.lo:+.{digits}f}, {c.hi:+.{digits}f}] p={p_adj:.3g}"
        else:
            diff[(i, m)] = f"{c.diff:+.{digits}f} (n={c.n}: no test)" if c.n else "–"
    rows = [row + [diff.get((i, m), "–") for m in END_METRICS] for i, row in enumerate(cells)]
    header = ["arm", "seeds", "vs"] + list(END_METRICS) + [f"Δ {m}" for m in END_METRICS]
    notes = ["Values at each run's last validation (the final policy), mean [95% t-interval over seeds].",
             "gold_f1 / gold_exact: findings micro-F1 / exact match of the validation reports read by the "
             "phantom's gold reader (the generator's own grammar; no reward sees it) against what was drawn; "
             "labeler_f1: the rule labeler (which the clinical rewards share) against the stored report labels; "
             "proxy_reward: mean rl.reward of the arm; "
             "kl_start_seq: KL to the SFT policy along the greedy validation reports, nats per report.",
             "Δ: arm - contrast arm ('vs': constant KL with the same reward), 95% t-interval of the paired "
             "differences, paired t-test p adjusted by Holm-Bonferroni over the table (reports/stats.py). With one "
             "seed there is no test here; the test-split differences table has the bootstrap over reports."]
    return Table("Over-optimisation: end of RL (validation)", header, rows, notes)


def has_disagreement(exp: Experiment) -> bool:
    return any(is_number(e.get(DISAGREE_KEY)) for r in exp.runs for e in r.val_evals) or any(
        is_number(r.scores.get(DISAGREE_KEY)) for r in exp.runs)


def disagreement_table(exp: Experiment, digits: int = 3) -> Table:
    """Rule labeler vs gold reader on each arm's greedy reports: before RL (the step-0 validation), after RL (the
    last validation) and on the test split; mean [95% t-interval over seeds]."""
    rows = []
    for a in exp.arms:
        before, after, test = [], [], []
        for run in exp.runs_of(a.name):
            vals = sorted((e for e in run.val_evals if is_number(e.get(DISAGREE_KEY))), key=lambda e: e.get("step", -1))
            if vals and vals[0].get("step") == 0:
                before.append(float(vals[0][DISAGREE_KEY]))
            if vals:
                after.append(float(vals[-1][DISAGREE_KEY]))
            if is_number(run.scores.get(DISAGREE_KEY)):
                test.append(float(run.scores[DISAGREE_KEY]))
        reward = str(exp.factors(a.name).get("reward", "?"))
        rows.append([a.name, reward, str(len(exp.runs_of(a.name)))]
                    + [_fmt(summarize(v), digits) for v in (before, after, test)])
    header = ["arm", "reward", "seeds", "val before RL (step 0)", "val after RL (last)", "test (tested policy)"]
    notes = ["labeler_gold_disagree: share of greedy reports whose positive findings (label 1) differ between the "
             "rule labeler (rewards/chexpert.py, which chexpert_f1, MCCS and entity F1 build on) and the phantom's "
             "gold reader (harness/data/phantom/gold_reader.py, no reward sees it). The two agree on every "
             "reference report of the generator; they differ on text outside its grammar, so a rising rate after "
             "RL is a policy writing what the labeler reads and the grammar does not.",
             "Before RL: the step-0 validation (every arm starts from the same SFT model); '–' where not logged."]
    return Table("Rule labeler vs gold reader: disagreement before and after RL", header, rows, notes)


def table_markdown(t: Table) -> str:
    lines = [f"## {t.title}", "", "| " + " | ".join(t.header) + " |", "|" + "---|" * len(t.header)]
    lines += ["| " + " | ".join(r) + " |" for r in t.rows]
    return "\n".join(lines + [""] + [f"- {n}" for n in t.notes]) + "\n"


def frontier_points(run: Run, metric: str) -> list[tuple[int, float, float]]:
    """(step, sqrt(KL), metric) per validation that logged both."""
    return [(int(e["step"]), math.sqrt(max(float(e[KL_KEY]), 0.0)), float(e[metric])) for e in run.val_evals
            if is_number(e.get(KL_KEY)) and is_number(e.get(metric))]


def frontier_rewards(exp: Experiment) -> list[str]:
    """The rewards that get a proxy panel: those of arms with complete runs (an arm without one states no
    reward, and drew an empty "proxy ... (None)" panel)."""
    return list(dict.fromkeys(str(exp.factors(a.name).get("reward")) for a in exp.arms
                              if exp.runs_of(a.name) and exp.factors(a.name).get("reward") is not None))


def fig_frontier(exp: Experiment, out_dir: str | Path) -> list[Path] | None:
    # lazy: start-up cost (matplotlib, pandas)
    from reports.figures import COLORS, plt, save_figure

    if not has_gold(exp):
        return None
    # One proxy panel per reward (their scales differ); the gold panel has every arm.
    rewards = frontier_rewards(exp)
    fig, axes = plt.subplots(1, 1 + len(rewards), figsize=(5.5 * (1 + len(rewards)), 4.2), squeeze=False)
    panels = [(axes[0][0], "gold_f1", "gold: findings micro-F1 (gold reader vs image truth)", None)]
    panels += [(axes[0][i + 1], "proxy_reward", f"proxy: mean rl.reward ({r})", r) for i, r in enumerate(rewards)]
    for ax, metric, ylabel, reward in panels:
        for k, a in enumerate(exp.arms):
            if reward is not None and str(exp.factors(a.name).get("reward")) != reward:
                continue
            color = COLORS[k % len(COLORS)]
            by_step: dict[int, list[tuple[float, float]]] = {}
            for run in exp.runs_of(a.name):
                for step, x, y in frontier_points(run, metric):
                    by_step.setdefault(step, []).append((x, y))
                    ax.plot(x, y, ".", color=color, alpha=0.3, ms=4)
            if by_step:
                steps = sorted(by_step)
                xs = [float(np.mean([p[0] for p in by_step[s]])) for s in steps]
                ys = [float(np.mean([p[1] for p in by_step[s]])) for s in steps]
                ax.plot(xs, ys, "-o", color=color, ms=3, label=a.label or a.name)
        ax.set_xlabel("sqrt(KL to the SFT policy)  [sqrt(nats per report)]")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="best")
    fig.suptitle("Over-optimisation frontier (Gao et al., 2022): one point per validation, lines = seed means")
    return save_figure(fig, out_dir, "fig_overoptimization")
