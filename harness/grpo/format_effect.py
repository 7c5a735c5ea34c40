"""What MRG-R1's format reward adds to its clinical reward, read from an RL run's recorded samples (issue 24).

An `mrg_r1` RL run's reward is 0.75 MCCS + 0.25 format (rewards/composite.py). For every recorded group
(`samples.jsonl`: candidates, rewards, advantages per prompt; `rl.samples_every=1` records every step) this
recomputes the format reward of each candidate, the MCCS part alone, (reward - 0.25 format) / 0.75, and the
advantages that part alone would get (harness/grpo/core.py: group_advantages, the run's advantage scale), and
reports how far the format term moves the advantages:

- the share of sampled candidates with the layout, over all steps and at the first and last recorded step;
- groups whose format reward varies; groups whose MCCS is equal for every candidate and that the format term
  separates (they carry signal only through it);
- mean and max |A - A(MCCS alone)|, and how many candidates' advantages change sign.

    python -m harness.grpo.format_effect RUN_DIR          # an mrg_r1 RL stage run; prints JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

FORMAT_WEIGHT = 0.25  # rewards/composite.py: MRG_R1_WEIGHTS


def read_groups(run_dir: str | Path) -> list[dict]:
    """Every recorded group of `samples.jsonl`: step, candidates, rewards, advantages."""
    path = Path(run_dir) / "samples.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no recorded samples (run RL with rl.samples_every >= 1)")
    groups = []
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        size = len(rec["rewards"][0])
        for i, (rewards, advantages) in enumerate(zip(rec["rewards"], rec["advantages"], strict=True)):
            groups.append({"step": rec["step"], "candidates": rec["candidates"][i * size:(i + 1) * size],
                           "rewards": rewards, "advantages": advantages})
    return groups


def format_reward_summary(run_dir: str | Path, scale: str | None = None) -> dict:
    """The statistics of the module docstring for one RL run (`scale`: the advantage scale; None = the run's)."""
    # lazy: start-up cost (torch; `regbench report` imports this module)
    import torch

    # lazy: start-up cost (torch, through the GRPO core)
    from harness.grpo.core import group_advantages

    # lazy: read with the GRPO core above, at call time
    from rewards.format import format_reward

    run_dir = Path(run_dir)
    if scale is None:
        config = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))["config"]
        scale = config["rl"]["advantage_scale"]
    groups = read_groups(run_dir)
    steps = sorted({g["step"] for g in groups})
    fmt = [format_reward(g["candidates"]) for g in groups]
    rewards = torch.tensor([g["rewards"] for g in groups], dtype=torch.float32)
    logged = torch.tensor([g["advantages"] for g in groups], dtype=torch.float32)
    fmt_t = torch.tensor(np.array(fmt), dtype=torch.float32)
    mccs = (rewards - FORMAT_WEIGHT * fmt_t) / (1 - FORMAT_WEIGHT)
    alone = group_advantages(mccs, scale=scale)
    diff = (logged - alone).abs()
    varies = fmt_t.std(dim=1) > 0
    mccs_equal = (mccs.max(dim=1).values - mccs.min(dim=1).values) < 1e-6

    def well_formatted(step: int) -> float:
        return float(np.mean([f for g, f in zip(groups, fmt, strict=True) if g["step"] == step]))

    return {
        "run": str(run_dir), "groups": len(groups), "candidates": int(rewards.numel()), "steps": len(steps),
        "well_formatted_sampled": float(fmt_t.mean()), "well_formatted_first_step": well_formatted(steps[0]),
        "well_formatted_last_step": well_formatted(steps[-1]),
        "groups_format_varies": int(varies.sum()),
        "groups_equal_mccs_separated_by_format": int((mccs_equal & varies).sum()),
        "advantage_diff_mean": float(diff.mean()), "advantage_diff_max": float(diff.max()),
        "advantage_sign_changes": int((torch.sign(logged) != torch.sign(alone)).sum()),
        "logged_vs_recomputed_max": float((logged - group_advantages(rewards, scale=scale)).abs().max()),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m harness.grpo.format_effect RUN_DIR", file=sys.stderr)
        return 2
    print(json.dumps(format_reward_summary(args[0]), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
