"""The layout of what the harness writes and reports/ reads: an experiment's index.json and the files of a run
directory (experiments/README.md and docs/DESIGN.md "Run records" describe them).

The one place for these names: the writers (harness/experiments/, harness/runs/records.py) and the readers
(reports/) both take them from here. It imports nothing of the project, so both layers may import it.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------------------
# An experiment folder (harness/experiments/index.py writes it)

INDEX_FILE = "index.json"
INDEX_FORMAT = "regbench.experiment-index/1"
RUN_STATUSES = ("complete", "failed", "pending", "running")  # a run's status, counted in the index's summary
PRUNED = "pruned"  # a run a search stopped on purpose; counted in the summary only where one was
# a run of the study file no runner call was asked for (`--arms`, `--seeds` subsets); in the summary only where one is
NOT_REQUESTED = "not requested"


class IndexKey:
    """Top-level keys of index.json."""
    FORMAT = "format"
    STUDY = "study"
    TITLE = "title"
    STUDY_FILE = "study_file"
    PRESET = "preset"
    PRESET_FILE = "preset_file"
    REPRODUCES = "reproduces"
    BASELINE_ARM = "baseline_arm"  # the study's baseline arm, which every comparison is against
    PUBLISHED_DATASET = "published_dataset"
    SEEDS = "seeds"
    ARMS = "arms"              # list of ArmKey mappings
    STAGES_DIR = "stages_dir"
    RUNS = "runs"              # list of RunKey mappings, one per (arm, seed)
    SUMMARY = "summary"        # RUN_STATUSES -> count
    REQUESTED = "requested"    # [[arm, seed], ...] the runner calls were asked for (absent: every run)
    CREATED = "created"
    UPDATED = "updated"
    GIT_COMMIT = "git_commit"
    ARGV = "argv"
    CONTRASTS = "contrasts"    # the study's primary contrasts: [{arm, baseline, metric, delta}]
    DECIDE = "decide"          # the decision rule's settings: {alpha, looks, spending}
    TEST_REPORTS = "test_reports"  # "shared" (one test split for every seed) or "per_seed" (a fresh draw per seed)
    EXECUTOR = "executor"      # where the stage runs ran last: "local" (worker processes) or "slurm" (jobs)
    SLURM_JOBS = "slurm_jobs"  # --executor slurm: node id -> its job ids (resubmissions after the first; last current)
    STAGE_EVALS = "stage_evals"  # study `stage_evals`: stage -> {dir, status, elapsed_s, metrics} (StageKey names)
    LEGACY_BASELINE_ARM = "reference_arm"  # read only: indexes written before the baseline arm had its name
    LEGACY_REFERENCE = "reference"  # read only: the oldest indexes named the baseline arm so


class ArmKey:
    """Keys of one entry of index.json's `arms` (a study arm as recorded)."""
    NAME = "name"
    LABEL = "label"
    PUBLISHED_ROW = "published_row"
    FACTORS = "factors"
    PIPELINE = "pipeline"
    OVERRIDES = "overrides"


class RunKey:
    """Keys of one entry of index.json's `runs` (one arm x seed)."""
    ARM = "arm"
    SEED = "seed"
    DIR = "dir"
    STATUS = "status"
    ERROR = "error"
    FAILED_STAGE = "failed_stage"
    FINAL_STAGE = "final_stage"    # the stage whose model was tested; null: the base model
    EVAL_DIR = "eval_dir"
    METRICS = "metrics"            # the eval's metrics.json, relative to the experiment folder
    EVAL_KEY = "eval_key"
    ELAPSED_S = "elapsed_s"
    STAGES = "stages"              # stage name (and "analysis") -> StageKey mapping
    EVAL_SLURM_JOBS = "eval_slurm_jobs"  # --executor slurm: the test evaluation's job ids (last current)
    LEGACY_RL_DIR = "rl_dir"       # read only: hand-written indexes
    LEGACY_SCORES = "scores"       # read only: hand-written indexes with the test scores inline


class StageKey:
    """Keys of one entry of a run's `stages` in index.json (one stage run, or the run's analysis)."""
    KEY = "key"
    DIR = "dir"
    STATUS = "status"
    ELAPSED_S = "elapsed_s"
    SHARED_BY = "shared_by"        # the arms of this seed that use the same stage run
    INIT_FROM = "init_from"        # model stages: the stage it starts from (null: the base model)
    UPSTREAM = "upstream"          # study `upstream`: {study, stage, key, dir, status} of the run it starts from
    ERROR = "error"
    PRUNED = "pruned"              # why a validation callback stopped this stage (a search's pruner)
    KINDS = "kinds"                # analysis: the Supp. A record kinds
    SLURM_JOBS = "slurm_jobs"      # --executor slurm: the stage run's job ids (resubmissions after the first)


ANALYSIS_STAGE = "analysis"  # the `stages` entry of a run's analysis records

# The eval node's metrics.json holds the test scores plus these keys.
EVAL_KEY = RunKey.EVAL_KEY
EVAL_FINAL_STAGE = RunKey.FINAL_STAGE
EVAL_MODEL_DIR = "model_dir"

# ---------------------------------------------------------------------------------------------------------
# A run directory (harness/runs/records.py: RunDir writes it)

MANIFEST_FILE = "manifest.json"
STEPS_FILE = "steps.jsonl"
EVALS_FILE = "evals.jsonl"
SAMPLES_FILE = "samples.jsonl"
METRICS_FILE = "metrics.json"
PREEMPTIONS_FILE = "preemptions.jsonl"  # one line per stop signal the run honoured (harness/runs/preemption.py)
LOG_FILES = (STEPS_FILE, EVALS_FILE, SAMPLES_FILE)
FINAL_TEST_PREDICTIONS = "predictions_final_test.jsonl"  # the eval stage's per-report test outputs
TEST_PREDICTIONS_GLOB = "predictions_*_test.jsonl"


def analysis_file(kind: str) -> str:
    """The Supp. A record `regbench analyze` writes in an RL run directory."""
    return f"analysis_{kind}.json"


class ManifestKey:
    """Keys of manifest.json that readers use."""
    STAGE = "stage"
    SEED = "seed"
    CONFIG = "config"


class EvalKey:
    """Keys of an evals.jsonl line that readers use."""
    SPLIT = "split"    # "val" or "test"
    STEP = "step"
    RESET = "reset"    # VAPR reset the policies at this validation
