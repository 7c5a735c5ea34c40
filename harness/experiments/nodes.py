"""What runs each node of the plan: the default functions by node kind, and the two that live here."""

from __future__ import annotations

from pathlib import Path

from harness.config import RunConfig
from harness.runs.records import RunDir

# What runs each node: "module:function", looked up at call time (so tests can monkeypatch the stage modules,
# or pass importable fakes that also work in spawned workers).
#   data / pretrain / stages: fn(cfg: RunConfig, progress: bool) -> Path
#   eval:                     fn(cfg: RunConfig, model_dir: str | None, progress: bool) -> dict of scores
DEFAULT_FUNCTIONS = {
    "data": "harness.experiments.nodes:prepare_data",
    "test_data": "harness.experiments.nodes:prepare_test_data",
    "pretrain": "harness.stages.pretrain:build_base",
    "warmup": "harness.stages.warmup:run_warmup",
    "classifier": "harness.stages.classifier:run_classifier_training",
    "sft": "harness.stages.sft:run_sft",
    "rl": "harness.stages.rl:run_rl",
    "eval": "harness.experiments.nodes:evaluate_final",
    # Supp. A records of an RL run (study field `analyses`): fn(rl_run_dir, kinds, n_prompts, group_size, seed,
    # key=..., progress=...) -> paths
    "analysis": "harness.stages.analyze:run_analyses",
}


def prepare_data(cfg: RunConfig, progress: bool = False) -> Path:
    """Synthesize the phantom data set of `cfg` unless it exists (a node of its own: built by one process)."""
    # lazy: start-up cost (torch)
    from harness.stages.common import ensure_phantom, phantom_dir

    d = cfg.data
    return ensure_phantom(phantom_dir(cfg), d.synth_n, d.synth_seed, d.synth_image_size, progress,
                          report_variation=d.report_variation)


def prepare_test_data(cfg: RunConfig, progress: bool = False) -> Path:
    """The test split of the phantom set of `cfg`, for an evaluation whose set no stage of the plan trains on: the
    test studies alone are drawn (a 4,000-report test split of a 20,000-study set costs 4,000 studies)."""
    # lazy: start-up cost (torch)
    from harness.stages.common import ensure_test_split

    return ensure_test_split(cfg, progress)


def evaluate_final(cfg: RunConfig, model_dir: str | None, progress: bool = False) -> dict:
    """Test evaluation of an arm's final model into cfg.out_dir (stale files of an earlier try removed)."""
    # lazy: start-up cost (pandas, torch)
    from harness.stages.evaluate import evaluate_model
    from harness.stages.loading import base_path

    out = Path(cfg.out_dir)
    if out.is_dir():
        for p in [out / "evals.jsonl", out / "metrics.json", *out.glob("predictions_*.jsonl")]:
            p.unlink(missing_ok=True)
    if model_dir is None:
        model_dir = str(base_path(cfg, progress))
    return evaluate_model(cfg, model_dir, "test", run=RunDir(out), label="final", progress=progress)
