"""The figure backend (matplotlib Agg, set before pyplot is imported), the colour cycle, and the PNG + PDF writer."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

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
