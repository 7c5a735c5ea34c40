"""What one stage run asks a cluster scheduler for (`--executor slurm`): the `resources:` section of a preset.

A preset (or a study, or `--set resources.rl.gpus=4`) maps a node kind to its request; `default` applies to the
kinds not listed, and a kind's entry is merged over it key by key:

    resources:
      default: {gpus: 1, cpus: 8, mem_gb: 64, time_min: 240}
      rl:      {gpus: 8, cpus: 64, mem_gb: 512, time_min: 2880}

The local executor ignores the section (it runs on the machine it is given), so the section is no part of any
stage run's key: the same run on a cluster or a laptop is the same run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from harness.config import ConfigError
from harness.constants import PIPELINE_STAGES

# The kinds whose stage runs under torchrun (harness/experiments/workers.py: LAUNCHED_STAGES), so may span nodes.
MULTI_NODE_KINDS = ("warmup", "sft", "rl")


@dataclass(frozen=True)
class Resources:
    """One job's request (this project's choice of defaults: a CPU job of one core for an hour)."""

    gpus: int = 0          # GPUs on the job's node (sbatch --gpus-per-node); > 1 runs warm-up/SFT/RL under torchrun
    cpus: int = 1          # CPU cores for the job's one task (sbatch --cpus-per-task)
    mem_gb: float = 4.0    # memory of the job's node (sbatch --mem)
    time_min: int = 60     # wall-clock limit (sbatch --time); a job that hits it is resubmitted and resumes
    # Nodes of a warm-up / SFT / RL job (sbatch --nodes, one task each): > 1 runs the stage as one srun task per
    # node, each a torchrun agent over its node's GPUs meeting the others through a c10d rendezvous on the first
    # node (harness/experiments/slurm.py); gpus, cpus and mem_gb are per node. 1: the one-node job of before.
    nodes: int = 1

    def describe(self) -> str:
        where = f" per node x {self.nodes} nodes" if self.nodes > 1 else ""
        return f"{self.gpus} GPU, {self.cpus} CPU, {self.mem_gb:g} GB{where}, {self.time_min} min"


# The node kinds of a plan (harness/experiments/plan.py: NODE_ORDER), and `default` for those not listed.
RESOURCE_KINDS = ("default", "data", "pretrain", *PIPELINE_STAGES, "eval", "analysis")
_FIELDS = {f.name: f.type for f in fields(Resources)}


def _check_value(name: str, value: Any, where: str) -> int | float:
    ok = not isinstance(value, bool) and (isinstance(value, int) or (name == "mem_gb" and isinstance(value, float)))
    low = 0 if name == "gpus" else 1 if name != "mem_gb" else 0
    if not ok or value < low or (name == "mem_gb" and value <= 0):
        want = "a number > 0" if name == "mem_gb" else f"an integer >= {low}"
        raise ConfigError(f"{where}.{name} must be {want}, got {value!r}")
    return value


def check_resources(value: Any, where: str) -> dict[str, Resources]:
    """The `resources:` section as one Resources per node kind (every kind present)."""
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: 'resources' must map node kinds ({', '.join(RESOURCE_KINDS)}) to "
                          "{gpus, cpus, mem_gb, time_min, nodes}")
    for kind, entry in value.items():
        at = f"{where}: resources.{kind}"
        if kind not in RESOURCE_KINDS:
            raise ConfigError(f"{where}: unknown kind '{kind}' under 'resources'; valid: {', '.join(RESOURCE_KINDS)}")
        if not isinstance(entry, dict):
            raise ConfigError(f"{at} must be a mapping with keys {', '.join(_FIELDS)}")
        bad = sorted(set(entry) - set(_FIELDS))
        if bad:
            raise ConfigError(f"{at}: unknown key '{bad[0]}'; valid: {', '.join(_FIELDS)}")
        for name, v in entry.items():
            _check_value(name, v, at)
        if entry.get("nodes", 1) > 1 and kind not in MULTI_NODE_KINDS:
            raise ConfigError(f"{at}.nodes must be 1, got {entry['nodes']}: only {', '.join(MULTI_NODE_KINDS)} "
                              "run across nodes (torchrun)")
    default = {**asdict(Resources()), **(value.get("default") or {})}
    return {kind: Resources(**{**default, **(value.get(kind) or {})}) for kind in RESOURCE_KINDS}
