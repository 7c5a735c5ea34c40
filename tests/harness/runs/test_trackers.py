"""harness/runs/trackers.py: train.report_to's names (parsed by harness/config/names.py), TensorBoard events and a
W&B offline run with the JSONL keys, and the validation completions as a table."""

from __future__ import annotations

import json
import re

import pytest

from harness.config import ConfigError, load_config
from harness.config.names import tracker_names
from harness.runs.records import RunDir, read_jsonl
from harness.runs.trackers import markdown_table, scalars, wandb_run_id
from tests.wandb_records import history, offline_runs

COLUMNS = ("id", "prompt", "completion", "reward", "gold")
TABLE = [["s0", "write", "the heart | is normal .", 0.25, "the heart is normal ."]]


def tensorboard_tags(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


@pytest.mark.parametrize("value, names", [("none", []), ("tensorboard", ["tensorboard"]), (None, []), ([], []),
                                          (["wandb", "tensorboard", "wandb"], ["wandb", "tensorboard"]),
                                          ("WandB", ["wandb"])])
def test_tracker_names(value, names):
    assert tracker_names(value) == names


@pytest.mark.parametrize("value, message", [("mlflow", "unknown tracker 'mlflow'"),
                                            (["none", "wandb"], "'none' cannot be combined")])
def test_bad_tracker_names_fail_when_the_config_loads(value, message):
    with pytest.raises(ValueError, match=message):
        tracker_names(value)
    override = f"train.report_to={json.dumps(value)}"
    with pytest.raises(ConfigError, match=re.escape(f"override '{override}': 'train.report_to' = ") + ".*" + message):
        load_config(None, [override])


def test_report_to_is_not_part_of_a_runs_key():
    from harness.experiments.resolve import config_key
    from harness.runs.state import config_hash

    a = load_config(None, ["train.report_to=tensorboard"])
    b = load_config(None, ["train.report_to=[tensorboard, wandb]", "train.wandb_project=other"])
    assert config_hash(a) == config_hash(b) and config_key("rl", a, {}) == config_key("rl", b, {})


def test_scalars_are_the_rows_numbers():
    row = {"step": 3, "loss": 0.5, "tokens": 7, "skipped": True, "split": "val", "kl": None, "bad": float("nan")}
    assert scalars(row) == {"loss": 0.5, "tokens": 7.0}


def test_markdown_table_escapes_cells():
    text = markdown_table(COLUMNS, TABLE)
    assert text.splitlines()[0] == "| id | prompt | completion | reward | gold |"
    assert "the heart \\| is normal ." in text and "| 0.25 |" in text


def test_no_tracker_writes_nothing(tmp_path):
    run = RunDir(tmp_path / "r")
    run.log_step({"step": 1, "loss": 1.0})
    run.log_table("val/completions", COLUMNS, TABLE, 1)
    run.close()
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["steps.jsonl"]


def test_tensorboard_and_wandb_get_the_jsonl_keys_and_the_table(tmp_path):
    run_dir = tmp_path / "r"
    run = RunDir(run_dir, trackers=["tensorboard", "wandb"], tracker_info={"stage": "rl", "config": {"seed": 0}})
    run.log_eval({"step": 0, "split": "val", "val_score": 0.1, "improved": False})
    run.log_step({"step": 1, "loss": 0.5, "lr": 1e-3, "skipped": False})
    run.log_eval({"step": 1, "split": "val", "val_score": 0.3, "BLEU_4": 0.2})
    run.log_table("val/completions", COLUMNS, TABLE, 1)
    run.close()
    jsonl = {f"train/{k}" for r in read_jsonl(run_dir / "steps.jsonl") for k in scalars(r)}
    jsonl |= {f"{r['split']}/{k}" for r in read_jsonl(run_dir / "evals.jsonl") for k in scalars(r)}
    assert jsonl == {"train/loss", "train/lr", "val/val_score", "val/BLEU_4"}

    acc = tensorboard_tags(run_dir)
    assert set(acc.Tags()["scalars"]) == jsonl
    assert [(e.step, e.value) for e in acc.Scalars("val/val_score")] == [(0, pytest.approx(0.1)),
                                                                       (1, pytest.approx(0.3))]
    text = acc.Tensors("val/completions/text_summary")[0]
    assert text.step == 1 and b"the heart \\| is normal ." in text.tensor_proto.string_val[0]

    (folder,) = offline_runs(run_dir)
    assert folder.name.endswith(wandb_run_id(run_dir)) and wandb_run_id(run_dir) == wandb_run_id(run_dir)
    rows = history(folder)
    logged = {k for r in rows for k in r if not k.startswith("_") and not k.startswith("val/completions")}
    assert logged == jsonl
    assert [r["val/val_score"] for r in rows if "val/val_score" in r] == [0.1, 0.3]
    (table_row,) = [r for r in rows if "val/completions/_type" in r]
    assert table_row["_step"] == 1 and table_row["val/completions/nrows"] == 1
    table = json.loads((folder / "files" / table_row["val/completions/path"]).read_text())
    assert table["columns"] == list(COLUMNS) and table["data"] == TABLE


def test_a_resumed_run_purges_the_later_events_and_keeps_its_wandb_id(tmp_path):
    run_dir = tmp_path / "r"
    first = RunDir(run_dir, trackers=["tensorboard", "wandb"])
    for step in (1, 2, 3):
        first.log_step({"step": step, "loss": float(step)})
    first.close()
    run_id = wandb_run_id(run_dir)
    resumed = RunDir(run_dir, trackers=["tensorboard", "wandb"])
    resumed.truncate_logs_after(1)  # the checkpoint was at step 1: steps 2-3 are dropped and redone
    for step in (2, 3):
        resumed.log_step({"step": step, "loss": 10.0 * step})
    resumed.close()
    assert [r["loss"] for r in read_jsonl(run_dir / "steps.jsonl")] == [1.0, 20.0, 30.0]
    assert [(e.step, e.value) for e in tensorboard_tags(run_dir).Scalars("train/loss")] == [(1, 1.0), (2, 20.0),
                                                                                             (3, 30.0)]
    # every offline run folder holds this run's records (a restart within the same second names its folder
    # differently, so the folder name alone is not the test)
    assert wandb_run_id(run_dir) == run_id
    assert all((f / f"run-{run_id}.wandb").is_file() for f in offline_runs(run_dir))


def test_a_run_started_over_clears_its_trackers(tmp_path):
    run_dir = tmp_path / "r"
    run = RunDir(run_dir, trackers=["tensorboard", "wandb"])
    run.log_step({"step": 1, "loss": 1.0})
    run.close()
    run_id = wandb_run_id(run_dir)
    again = RunDir(run_dir, trackers=["tensorboard", "wandb"])
    again.clear_logs()
    assert not (run_dir / "tb").exists() and not (run_dir / "wandb").exists()
    again.log_step({"step": 1, "loss": 2.0})
    again.close()
    assert [e.value for e in tensorboard_tags(run_dir).Scalars("train/loss")] == [2.0]
    assert wandb_run_id(run_dir) != run_id and len(offline_runs(run_dir)) == 1


# -- images in a table, and a study's labels (issue 46) -------------------------------------------------------
def test_a_tables_image_column_is_an_image_in_tensorboard_and_wandb(tmp_path):
    import numpy as np

    run_dir = tmp_path / "r"
    image = np.zeros((8, 6, 3), dtype=np.uint8)
    image[2:4, 1:3] = 200
    run = RunDir(run_dir, trackers=["tensorboard", "wandb"])
    # the second row carries no image (harness/grpo/validation.py COMPLETION_IMAGES: only the first rows do)
    run.log_table("val/completions", (*COLUMNS, "image"), [[*TABLE[0], [image]], ["s1", "w", "x", 0.5, "y", None]],
                  2)
    run.close()
    acc = tensorboard_tags(run_dir)
    (tag,) = acc.Tags()["images"]
    assert tag == "val/completions/images/s0"
    (event,) = acc.Images(tag)
    assert (event.step, event.width, event.height) == (2, 6, 8)
    text = acc.Tensors("val/completions/text_summary")[0].tensor_proto.string_val[0]
    assert b"| id | prompt | completion | reward | gold |\n" in text  # the image is not a text cell

    (folder,) = offline_runs(run_dir)
    (row,) = [r for r in history(folder) if "val/completions/_type" in r]
    table = json.loads((folder / "files" / row["val/completions/path"]).read_text())
    assert table["columns"] == [*COLUMNS, "image"] and table["data"][0][:5] == TABLE[0]
    # W&B writes a table's images with the table's artifact (the run's files keep a copy without them)
    from tests.wandb_records import finished_records

    (path,) = folder.glob("run-*.wandb")
    (artifact,) = [r.artifact for r in finished_records(path) if r.WhichOneof("record_type") == "artifact"]
    entries = [e.path for e in artifact.manifest.contents]
    assert "val/completions.table.json" in entries
    assert len([e for e in entries if e.startswith("media/images/") and e.endswith(".png")]) == 1


def run_record(run_dir):
    from tests.wandb_records import finished_records

    (folder,) = offline_runs(run_dir)
    (path,) = folder.glob("run-*.wandb")
    (run,) = [r.run for r in finished_records(path) if r.WhichOneof("record_type") == "run"]
    return run


TWO_ARMS = """  - name: a
    factors: {regularizer: rer, reference: vapr}
    overrides: {rl: [rl.regularizer=rer, rl.reference=vapr]}
  - name: b
    factors: {regularizer: constant, reference: static}
    overrides: {rl: {rl: {regularizer: constant, reference: static}}}
"""


def fake_study_run(tmp_path, trackers=("tensorboard",)):
    """A 2-arm x 2-seed study's plan with its links and labels, each stage run logging one step as a stage does
    (harness/stages/common.py: start_run reads the labels)."""
    from harness.experiments import build_plan, load_study
    from harness.experiments.plan import link_stages
    from harness.experiments.tracker_labels import write_tracker_labels
    from harness.runs.trackers import read_labels
    from tests.harness.test_experiments import write_study

    # cache_dir: stage 0's labels are written beside its base, in the cache (here the test's own)
    extra = f"common: {{cache_dir: {tmp_path / 'cache'}}}\n"
    plan = build_plan(load_study(write_study(tmp_path, TWO_ARMS, extra=extra)), tmp_path / "out")
    link_stages(plan)
    write_tracker_labels(plan)
    for node in plan.stage_nodes():
        run = RunDir(node.run_dir, trackers=list(trackers), tracker_info={"stage": node.kind,
                                                                          **read_labels(node.run_dir)})
        run.log_step({"step": 1, "loss": 1.0})
        run.close()
    return plan


def test_tensorboard_lists_each_stage_run_of_a_study_once_by_its_readable_name(tmp_path):
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

    plan = fake_study_run(tmp_path)
    nodes = plan.stage_nodes()
    assert len(nodes) == 10  # warm-up, classifier, SFT shared by both arms per seed; RL per arm and seed
    assert any((plan.out / "a" / "seed0" / stage).is_symlink() for stage in ("warmup", "sft", "rl"))
    runs = sorted(EventMultiplexer().AddRunsFromDirectory(str(plan.out)).Runs())
    assert runs == sorted(f"tb/{arms}/seed{seed}/{stage}" for seed in (0, 1) for arms, stage in
                          [("a+b", "warmup"), ("a+b", "classifier"), ("a+b", "sft"), ("a", "rl"), ("b", "rl")])


def test_stage0_of_a_study_gets_its_labels_beside_its_base(tmp_path):
    from harness.config import RunConfig, from_dict
    from harness.runs.trackers import labels_beside, read_labels
    from harness.stages.paths import base_dir

    plan = fake_study_run(tmp_path)
    (node,) = [n for n in plan.nodes.values() if n.kind == "pretrain"]
    base = base_dir(from_dict(RunConfig, node.config))
    assert tmp_path / "cache" in base.parents
    labels = read_labels(base / "run", labels_beside(base))
    assert labels["group"] == "toy/out" and labels["name"] == f"stage0/{node.key}"
    assert labels["tb_dir"] == str(plan.out / "tb" / "stage0" / node.key)


def test_a_study_stage_run_is_grouped_named_and_tagged_in_wandb(tmp_path):
    plan = fake_study_run(tmp_path, trackers=("wandb",))
    rl = plan.nodes[plan.runs["b", 1].stages["rl"]]
    run = run_record(rl.run_dir)
    assert run.run_group == "toy/out" and run.display_name == "b/seed1/rl" and run.job_type == "rl"
    assert {"study:toy", "arm:b", "seed:1", "stage:rl", "regularizer:constant", "reference:static",
            "reward:bleu4"} <= set(run.tags)
    assert "arm:a" not in run.tags
    sft = run_record(plan.nodes[plan.runs["a", 0].stages["sft"]].run_dir)
    assert sft.run_group == "toy/out" and sft.display_name == "a+b/seed0/sft"
    assert {"arm:a", "arm:b", "regularizer:rer", "regularizer:constant"} <= set(sft.tags)


def test_a_run_started_over_clears_its_study_tensorboard_folder(tmp_path):
    tb = tmp_path / "study" / "tb" / "a" / "seed0" / "rl"
    run = RunDir(tmp_path / "r", trackers=["tensorboard"], tracker_info={"tb_dir": str(tb)})
    run.log_step({"step": 1, "loss": 1.0})
    run.close()
    assert any(tb.iterdir()) and not (tmp_path / "r" / "tb").exists()
    RunDir(tmp_path / "r", trackers=["tensorboard"], tracker_info={"tb_dir": str(tb)}).clear_logs()
    assert not tb.exists()
