"""Tracker labels of a study's stage runs: what W&B groups, names and tags them by, and where TensorBoard finds them.

The runner writes RUN/tracker.json into each stage run it has not completed (harness/runs/trackers.py: read_labels
reads it when the stage starts), and stage 0's labels beside its cached base (`<base>.tracker.json`):

- W&B group `<study name>/<out folder name>`: one group per study folder;
- run name `<arm>/seed<k>/<stage>` (a stage run shared by several arms: `<a>+<b>/seed<k>/<stage>`, or the first
  arm and `+N` when the names are long); stage 0: `stage0/<base key>`;
- tags: the study, the arms, the seed, the stage, the arms' `factors:` (`key:value`) and, for an RL run, its
  regularizer, reference and reward;
- the TensorBoard folder `<out>/tb/<run name>`: the arm folders link each stage run (harness/experiments/plan.py:
  link_stages) and TensorBoard follows links, so event files inside a stage run were listed once per link.
  `tensorboard --logdir <out>` lists each stage run once, under its readable name.

Labels are not part of a run's key (trackers never are)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from harness.config import RunConfig, from_dict
from harness.experiments.plan import Node, Plan, node_done
from harness.experiments.study import STAGES
from harness.runs.records import atomic_write_text
from harness.runs.trackers import LABELS_FILE, labels_beside
from harness.stages.paths import base_dir

TB_INDEX = "tb"
MAX_ARMS_IN_NAME = 40  # characters: longer lists of arms are named by the first and "+N"


def arms_label(arms: list[str]) -> str:
    joined = "+".join(arms)
    if len(arms) <= 1 or len(joined) <= MAX_ARMS_IN_NAME:
        return joined
    return f"{arms[0]}+{len(arms) - 1}"


def study_group(plan: Plan) -> str:
    return f"{plan.study.name}/{plan.out.name}"


def _reward_name(reward) -> str:
    if isinstance(reward, dict):
        return "+".join(str(k) for k in reward)
    return str(reward)


def stage_labels(plan: Plan, node: Node) -> dict:
    """The labels of one stage node of the plan (its run name, group, tags and TensorBoard folder)."""
    order = [a.name for a in plan.study.arms]
    arms = sorted({arm for arm, _ in node.users}, key=lambda a: order.index(a) if a in order else len(order))
    seed = node.config.get("seed")
    name = f"{arms_label(arms) or node.kind}/seed{seed}/{node.kind}"
    tags = [f"study:{plan.study.name}", *(f"arm:{a}" for a in arms), f"seed:{seed}", f"stage:{node.kind}"]
    for arm in plan.study.arms:
        if arm.name in arms:
            tags += [f"{k}:{v}" for k, v in arm.factors.items()]
    if node.kind == "rl":
        rl = node.config.get("rl") or {}
        tags += [f"regularizer:{rl.get('regularizer')}", f"reference:{rl.get('reference')}",
                 f"reward:{_reward_name(rl.get('reward'))}"]
    return {"group": study_group(plan), "name": name, "tags": list(dict.fromkeys(tags)),
            "tb_dir": str(plan.out / TB_INDEX / name)}


def _write(path: Path, labels: dict, relative_to: Path) -> None:
    labels = {**labels, "tb_dir": os.path.relpath(labels["tb_dir"], relative_to)}
    text = json.dumps(labels, indent=1) + "\n"
    if path.is_file() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


def write_tracker_labels(plan: Plan, node_ids: Iterable[str] | None = None) -> None:
    """RUN/tracker.json for every stage run of the plan (or of `node_ids`: those a runner call will run) not yet
    complete (a completed run keeps the labels it was tracked under), and the labels of stage 0 beside its base."""
    nodes = plan.nodes.values() if node_ids is None else [plan.nodes[i] for i in node_ids]
    for node in nodes:
        if node.kind in STAGES and node.run_dir is not None and not node_done(node):
            _write(node.run_dir / LABELS_FILE, stage_labels(plan, node), node.run_dir)
        elif node.kind == "pretrain" and not node_done(node):
            base = base_dir(from_dict(RunConfig, node.config))
            name = f"stage0/{node.key}"
            labels = {"group": study_group(plan), "name": name, "tags": [f"study:{plan.study.name}", "stage:pretrain"],
                      "tb_dir": str(plan.out / TB_INDEX / name)}
            _write(labels_beside(base), labels, base.parent)
