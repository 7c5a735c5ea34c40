"""The demo's decided verdict: its declared contrast (no KL vs constant KL, gold findings micro-F1 and BLEU-4) over
the RL seeds both arms ran (harness/cli/demo.py runs them on three seeds from one shared SFT model), under the
decision rule of harness/stats/decisions.py (reports/verdicts.py: paired t over seeds, Holm over the declared metrics,
better / worse / equivalent within +-delta / undecided), with each arm's KL to the SFT model at its tested step.
"""

from __future__ import annotations

import math
from pathlib import Path

from reports.demo_verdict import METRICS, selected_kl
from reports.verdicts import study_verdicts

_LABELS = dict(METRICS)


def _num(x: float) -> str:
    return f"{x:+.4f}" if math.isfinite(x) else "n/a"


def decision_text(out: Path, labels: dict[str, str] | None = None) -> str:
    """Markdown lines: each declared contrast with n seeds, mean difference, the interval that decided, +-delta and
    the outcome word; then both arms' mean KL to the SFT model. Empty when the study declares no contrast."""
    # lazy: tests replace load_experiment at its source, read at call time
    from reports.experiment import load_experiment

    exp = load_experiment(out)
    verdicts = study_verdicts(exp)
    if verdicts is None:
        return ""
    labels = labels or {}
    lines = []
    pairs = list(dict.fromkeys((d.contrast.arm, d.contrast.baseline) for d in verdicts.decisions))
    for arm, baseline in pairs:
        seeds = verdicts.seeds[arm, baseline]
        how = ("anytime-valid confidence sequence over seeds (holds however seeds were added)"
               if verdicts.rule == "anytime" else
               f"paired t over seeds, fixed n ({len(seeds)} seeds fixed in advance by the study: the error rates "
               f"hold only so)")
        lines.append(f"{labels.get(arm, arm)} - {labels.get(baseline, baseline)} over n = {len(seeds)} RL seeds "
                     f"{seeds} (one shared SFT model; {how}, alpha {verdicts.alpha:g}, Holm "
                     f"over the {len(verdicts.decisions)} declared contrasts; assumes roughly normal per-seed "
                     f"differences):")
        for d in (d for d in verdicts.decisions if (d.contrast.arm, d.contrast.baseline) == (arm, baseline)):
            outcome = d.outcome
            if outcome == "undecided":
                outcome += (f" (about {d.seeds_needed} seeds at this spread)" if d.seeds_needed
                            else " (one seed never decides)" if d.n < 2 else " (spread too large to say)")
            if (verdicts.flags or {}).get(d.contrast):
                outcome += f" (check: {verdicts.flags[d.contrast]})"
            p = f", p {d.p:.3g} (Holm {d.p_adjusted:.3g})" if math.isfinite(d.p) else ""
            lines.append(f"- {_LABELS.get(d.contrast.metric, d.contrast.metric)}: {_num(d.diff)} "
                         f"[{_num(d.lo)}, {_num(d.hi)}], +-{d.contrast.delta:g}{p}: {outcome}, n = {d.n} seeds")
        kls = []
        for name in (arm, baseline):
            values = [k for r in exp.runs_of(name) if r.rl_dir and (k := selected_kl(r.rl_dir)) is not None]
            kls.append(f"{labels.get(name, name)} {sum(values) / len(values):.2f}" if values
                       else f"{labels.get(name, name)} not logged")
        lines.append(f"- KL to the SFT model at the tested step (nats per report, mean over seeds): {', '.join(kls)}")
    return "\n".join(lines)
