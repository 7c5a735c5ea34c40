"""harness/runs/schema.py is the one layout of index.json: the writer (harness/experiments/index.py) writes
exactly its keys and the reader (reports/experiment.py) reads them back."""

from __future__ import annotations

import json

import pytest

from harness.experiments import build_index, build_plan, load_study
from harness.runs import schema
from reports.experiment import ArmRecord, load_experiment
from tests.harness.test_experiments import ARMS, write_study


def _declared(cls) -> set[str]:
    """The keys a writer writes: the class's names, less those kept for reading older files."""
    return {v for k, v in vars(cls).items() if k.isupper() and not k.startswith("LEGACY_")}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("schema")
    study = load_study(write_study(tmp, ARMS, seeds="[0, 3]"))
    plan = build_plan(study, tmp / "out")
    # requested: the runs the runner calls were asked for (a runner always records them; issue 46)
    index = build_index(plan, {("a", 3): {"elapsed_s": 1.25}}, "2001-02-03T04:05:06", requested=set(plan.runs))
    (tmp / "out").mkdir(exist_ok=True)
    (tmp / "out" / schema.INDEX_FILE).write_text(json.dumps(index))
    return tmp / "out", index


def test_the_writer_writes_exactly_the_schema_keys(index):
    _, idx = index
    # slurm_jobs is written by the Slurm executor only; this index comes from the local one
    assert idx[schema.IndexKey.EXECUTOR] == "local"
    assert set(idx) == _declared(schema.IndexKey) - {schema.IndexKey.SLURM_JOBS}
    assert idx[schema.IndexKey.FORMAT] == schema.INDEX_FORMAT
    assert {k for a in idx[schema.IndexKey.ARMS] for k in a} == _declared(schema.ArmKey)
    runs = idx[schema.IndexKey.RUNS]
    assert len(runs) == 6  # 3 arms x 2 seeds
    assert all(set(r) == _declared(schema.RunKey) - {schema.RunKey.EVAL_SLURM_JOBS} for r in runs)
    entries = [e for r in runs for e in r[schema.RunKey.STAGES].values()]
    assert entries and all(set(e) <= _declared(schema.StageKey) for e in entries)
    assert set(idx[schema.IndexKey.SUMMARY]) == set(schema.RUN_STATUSES)
    assert idx[schema.IndexKey.SUMMARY]["pending"] == 6


def test_the_reader_reads_what_the_writer_wrote(index):
    out, idx = index
    exp = load_experiment(out)
    assert [a.name for a in exp.arms] == ["a", "b", "c"] and all(isinstance(a, ArmRecord) for a in exp.arms)
    assert exp.baseline_arm == "a" and exp.seeds == [0, 3] and exp.study == "toy"
    runs = {(r.arm, r.seed): r for r in exp.runs}
    assert set(runs) == {(a, s) for a in "abc" for s in (0, 3)}
    # Arm c runs warm-up then RL; its RL stage folder is the one the index names.
    c = next(r for r in idx[schema.IndexKey.RUNS] if r[schema.RunKey.ARM] == "c" and r[schema.RunKey.SEED] == 3)
    rl_dir = c[schema.RunKey.STAGES]["rl"][schema.StageKey.DIR]
    assert runs[("c", 3)].rl_dir == out / rl_dir and runs[("c", 3)].status == "pending"
    assert runs[("c", 3)].final_stage == "rl"


@pytest.mark.parametrize("key", [schema.IndexKey.LEGACY_BASELINE_ARM, schema.IndexKey.LEGACY_REFERENCE])
def test_older_indexes_name_the_baseline_arm_under_their_old_keys(index, tmp_path, key):
    """Indexes written before the rename say `reference_arm` (the oldest `reference`); they still read."""
    _, idx = index
    old = {k: v for k, v in idx.items() if k != schema.IndexKey.BASELINE_ARM} | {key: "b"}
    (tmp_path / schema.INDEX_FILE).write_text(json.dumps(old))
    assert load_experiment(tmp_path).baseline_arm == "b"


def test_no_reader_or_writer_spells_the_index_file_or_format_itself():
    """The format string and the index file name live in the schema alone."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    for folder in ("harness", "reports"):
        for path in (root / folder).rglob("*.py"):
            if path == root / "harness" / "runs" / "schema.py":
                continue
            text = path.read_text(encoding="utf-8")
            assert schema.INDEX_FORMAT not in text, path
            assert 'plan.out / "index.json"' not in text and 'path / "index.json"' not in text, path
