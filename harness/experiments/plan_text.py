"""The plan as text: which arms and seeds a node serves (progress lines) and the plan table
(`regbench experiment plan`)."""

from __future__ import annotations

from collections.abc import Collection

from harness.experiments.plan import STAGE_EVAL_PREFIX, Node, Plan, node_done
from harness.experiments.study import STAGES


def node_label(node: Node, selected: Collection[tuple[str, int]] | None = None) -> str:
    """Which arms and seeds a graph node serves, for progress lines: the `selected` runs (those this call runs)
    that use it, or every run of the plan that does when `selected` is None (or when none of it does)."""
    users = [u for u in node.users if selected is None or u in selected] or node.users
    users = sorted({f"{arm} seed {seed}" for arm, seed in users})
    text = ", ".join(users[:3]) + (f", +{len(users) - 3} more" if len(users) > 3 else "")
    if node.id.startswith(STAGE_EVAL_PREFIX):  # a `stage_evals` node: name the model it tests
        stage = node.id.removeprefix(STAGE_EVAL_PREFIX)
        return "the base model" if stage == "base" else f"the {stage} model of {text}"
    return text


def describe_plan(plan: Plan, seeds: list[int] | None = None, arms: list[str] | None = None) -> str:
    """A text table of the plan: arm, seed, pipeline, stage keys (shared ones marked), status."""
    study = plan.study
    lines = [f"study {study.name} ({study.title}); preset {study.preset}; reproduces {study.reproduces}; "
             f"baseline arm {study.baseline}; seeds {plan.seeds}; out {plan.out}"]
    for a in study.arms:
        lines.append(f"  arm {a.name:<16} {a.label!r:<36} pipeline {'+'.join(a.pipeline) or '(base)'}")
    up = study.upstream
    if up:
        into = {"classifier": "classifier.pretrained_path"}
        feeds = ", ".join(f"its {theirs} -> {mine} ({into.get(mine, 'init_from')})"
                          for mine, theirs in up.stages.items())
        lines.append(f"  upstream {up.file.name} (study {up.study.name}, preset {up.study.preset}), arm {up.arm}: "
                     f"{feeds}")
    lines.append("")
    lines.append("| arm | seed | stage runs (key, *shared) | status |")
    lines.append("|---|---|---|---|")
    for (arm, seed), rp in plan.runs.items():
        if (arms and arm not in arms) or (seeds and seed not in seeds):
            continue
        cells = []
        for stage, nid in rp.stages.items():
            n = plan.nodes[nid]
            cell = f"{stage} {n.key}{'*' if len(n.users) > 1 else ''}"
            if stage in rp.upstream:  # its input: a stage run of the upstream study
                u = plan.nodes[rp.upstream[stage]]
                cell += f" (<- {study.upstream.study.name} {u.kind} {u.key}{', complete' if node_done(u) else ''})"
            cells.append(cell)
        ev = plan.nodes[rp.eval_node]
        status = "complete" if node_done(ev) else "pending"
        lines.append(f"| {arm} | {seed} | {', '.join(cells) or '-'} | {status} |")
    distinct = plan.stage_nodes()
    lines.append("")
    lines.append(f"{len(plan.runs)} runs; {len(distinct)} distinct stage runs "
                 f"({sum(len(r.stages) for r in plan.runs.values())} without sharing)")
    if up:
        theirs = sorted((plan.nodes[i] for i in {i for r in plan.runs.values() for i in r.upstream.values()}),
                        key=lambda n: (n.config["seed"], STAGES.index(n.kind)))
        lines.append(f"inputs from {up.study.name} (counted above): " + ", ".join(
            f"{n.kind}-seed{n.config['seed']}-{n.key} ({'complete' if node_done(n) else 'pending'})" for n in theirs))
    return "\n".join(lines)
