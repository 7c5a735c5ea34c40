"""REVA-PO Fig. 2(a, b): the RER mapping from normalised reference entropy to beta."""

from __future__ import annotations

from pathlib import Path

from reports.figures.common import COLORS, plt, save_figure


def rer_curves(beta_min: float = 0.05, beta_base: float = 0.10, beta_max: float = 0.12, k: int = 101):
    """(x, beta for A > 0, beta for A < 0): x in [0, 1] is the normalised reference entropy of Eq. 8."""
    # lazy: start-up cost (torch)
    import torch

    # lazy: start-up cost (torch)
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
