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
- `fig_optuna`: optimisation history of an Optuna study the harness opened (optional).
Curves: each seed's series is smoothed with a trailing rolling mean (window w, stated in the title), then
the arm's line is the mean over seeds at each step and its band mean ± 1 std across seeds (no band for n = 1).

Modules: ``common`` (backend, colours, the file writer), ``rer`` (Fig. 2), ``curves`` (Fig. 3 and every arm's
curves), ``supplement`` (Fig. S5, Supp. A.3), ``search_plots`` (Optuna).
"""

from reports.figures.common import COLORS, plt, save_figure
from reports.figures.curves import (
    band,
    curves_figure,
    default_window,
    fig3_curves,
    fig3_panels,
    fig_all_arms,
    fig_val_scores,
    kl_pressure,
    plot_band,
    series,
)
from reports.figures.rer import fig2_rer_beta, rer_curves
from reports.figures.search_plots import fig_optuna
from reports.figures.supplement import (
    alignment_stats,
    alignment_values,
    analysis_arm,
    analysis_arms,
    distinct_policy_seeds,
    fig_a3_alignment,
    fig_s5_reward_std,
)

__all__ = [
    "COLORS",
    "alignment_stats",
    "alignment_values",
    "analysis_arm",
    "analysis_arms",
    "distinct_policy_seeds",
    "band",
    "curves_figure",
    "default_window",
    "fig2_rer_beta",
    "fig3_curves",
    "fig3_panels",
    "fig_a3_alignment",
    "fig_all_arms",
    "fig_optuna",
    "fig_s5_reward_std",
    "fig_val_scores",
    "kl_pressure",
    "plot_band",
    "plt",
    "rer_curves",
    "save_figure",
    "series",
]
