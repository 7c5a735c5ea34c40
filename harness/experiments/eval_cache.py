"""Test evaluations shared between studies that share a stages folder.

A study's test evaluation lives in its own folder (`<out>/<arm>/seed<k>/eval`), keyed by the evaluation's config
and the model it reads (harness/experiments/plan.py, `build_plan`). Two studies pointed at one `--stages-dir`
share their stage runs, and an arm both run (Table 4's RER+VAPR and RL-vs-SFT's, say) has the same evaluation key
there: greedy decoding of the same model on the same test set (byte-identical predictions in the 36 runs the two
studies share on the varied testbed, docs/phantom_language.md). So a finished evaluation is also kept under
`<stages>/evals/eval-seed<k>-<key>/`, and a later study whose evaluation has that key and reads the same model takes
it from there instead of decoding the test set again. A kept evaluation is never rewritten (a reader never sees
it change), and the cache is best effort: a copy that cannot be written or read is skipped and the evaluation
runs as it would without it.

"The same model" is checked, not assumed: the kept copy records a digest of the stage run's metrics.json, which
a retrained stage run rewrites (its timings differ), so an evaluation of a model that was since trained again is
never taken. Only a stages folder given with `--stages-dir` (outside the study's own folder) keeps evaluations:
within one study the run's eval folder is the record, and deleting its metrics.json evaluates again. With a shared
folder, an evaluation to redo (a scorer changed) is deleted from both places. Files are hard links where the file
system allows (the evaluation rewrites by unlinking first, so a link is never written through) and copies otherwise.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from harness.experiments.plan import Node, Plan, node_done
from harness.runs.records import atomic_write_json, read_json
from harness.runs.schema import EVAL_FINAL_STAGE, EVAL_KEY, EVAL_MODEL_DIR, METRICS_FILE

CACHE_DIR = "evals"
MODEL_STAMP = "model_stamp"  # metrics.json of a kept evaluation: digest of the evaluated stage run's metrics.json


def shared(plan: Plan) -> bool:
    """Whether the plan's stage runs live in a folder other studies can share (`--stages-dir`)."""
    return plan.stages_root.resolve() != (plan.out / "stages").resolve()


def cache_dir(plan: Plan, node: Node) -> Path:
    return plan.stages_root / CACHE_DIR / f"eval-seed{node.config['seed']}-{node.key}"


def model_stamp(node: Node) -> str | None:
    """sha256 of the evaluated stage run's metrics.json ("base" for the preset's base model); None when the stage
    run has none (unfinished), which matches nothing."""
    if node.model_dir is None:
        return "base"
    try:
        return hashlib.sha256((Path(node.model_dir).parent / METRICS_FILE).read_bytes()).hexdigest()[:16]
    except OSError:
        return None


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name != METRICS_FILE and not p.name.startswith("."))


def keep(plan: Plan, node: Node) -> None:
    """After `node` (an eval) finished and wrote its metrics.json: a copy under the stages folder, unless one is
    there. Written to a hidden folder first and renamed, so a reader sees a whole copy or none."""
    if not shared(plan):
        return
    target = cache_dir(plan, node)
    stamp = model_stamp(node)
    if target.exists() or stamp is None or not node_done(node):
        return
    tmp = target.parent / f".{target.name}.{os.getpid()}.tmp"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for p in _files(node.run_dir):
            _link_or_copy(p, tmp / p.name)
        atomic_write_json(tmp / METRICS_FILE, {**read_json(node.run_dir / METRICS_FILE), MODEL_STAMP: stamp})
        tmp.rename(target)
    except OSError:  # another runner kept the same evaluation meanwhile, or the folder cannot take a copy
        shutil.rmtree(tmp, ignore_errors=True)


def adopt(plan: Plan, node: Node, final_stage: str | None) -> bool:
    """Before `node` (an eval not done) runs: take a kept evaluation with its key of the same model, if there is
    one. Its metrics.json is written last, as that is what marks the evaluation done; it names this plan's run
    (`final_stage`, the model's folder) as the graph's own record would."""
    if not shared(plan):
        return False
    source = cache_dir(plan, node)
    try:
        kept = read_json(source / METRICS_FILE)
    except (OSError, ValueError):
        return False
    stamp = model_stamp(node)
    if kept.get(EVAL_KEY) != node.key or stamp is None or kept.get(MODEL_STAMP) != stamp:
        return False
    try:
        node.run_dir.mkdir(parents=True, exist_ok=True)
        (node.run_dir / METRICS_FILE).unlink(missing_ok=True)
        for p in _files(node.run_dir):
            p.unlink()
        for p in _files(source):
            _link_or_copy(p, node.run_dir / p.name)
    except OSError:  # no metrics.json yet, so the eval is not done: it runs (and clears these files) as usual
        return False
    kept.pop(MODEL_STAMP)
    kept.update({EVAL_FINAL_STAGE: final_stage, EVAL_MODEL_DIR: node.model_dir})
    atomic_write_json(node.run_dir / METRICS_FILE, kept)
    return True
