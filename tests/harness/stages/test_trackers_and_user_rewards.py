"""Issue 25 through the stages themselves (tiny, CLI): every training stage (warm-up, classifier, SFT, RL) mirrors
its JSONL records into TensorBoard and a W&B offline run with the same keys, RL's validation completions as a table;
and a reward defined in a file outside the package drives the RL stage, by name and in a weighted mix (YAML)."""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest

from harness.cli import main
from harness.runs.records import read_json, read_jsonl
from harness.runs.trackers import scalars
from tests.harness.runs.test_trackers import tensorboard_tags
from tests.tiny_sizes import TINY
from tests.wandb_records import history, offline_runs

USER_REWARDS = '''
import numpy as np


def brevity(candidates, references, **context):
    """A user's reward, outside the regbench package: shorter reports score higher."""
    return np.array([1.0 / (1 + len(c.split())) for c in candidates])
'''
TRACKED = ["train.report_to=[tensorboard, wandb]"]
RL = ["train.max_steps=2", "rl.prompts_per_step=2", "rl.group_size=2", "rl.max_new_tokens=8", "rl.min_new_tokens=2",
      "rl.val_max_samples=4", "rl.samples_every=1", "train.lr=1e-4", "train.scheduler=constant"]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """pretrain, warm-up, classifier, SFT and RL of the tiny preset, each reporting to TensorBoard and W&B."""
    root = tmp_path_factory.mktemp("tracked")

    def common(stage):
        return [*TINY, f"out_dir={root / stage}", f"data.synth_dir={root / 'data'}", f"cache_dir={root / 'cache'}"]

    assert main(["train", "pretrain", *common("pretrain"), *TRACKED, "--no-progress"]) == 0
    assert main(["train", "warmup", *common("warmup"), *TRACKED, "train.max_steps=2", "train.batch_size=4",
                 "--no-progress"]) == 0
    assert main(["classifier", "train", *common("classifier"), *TRACKED, "classifier.epochs=1",
                 "classifier.batch_size=8", "classifier.img_size=32", "--no-progress"]) == 0
    assert main(["train", "sft", *common("sft"), *TRACKED, "train.max_steps=2", "train.batch_size=4",
                 "model.lora_r=4", "model.lora_alpha=8", f"init_from={root / 'warmup' / 'model'}",
                 f"classifier.dir={root / 'classifier' / 'classifier'}", "--no-progress"]) == 0
    assert main(["train", "rl", *common("rl"), *TRACKED, *RL, f"init_from={root / 'sft' / 'model'}",
                 "--no-progress"]) == 0
    return root, common


def jsonl_keys(run_dir) -> set[str]:
    keys = {f"train/{k}" for r in read_jsonl(run_dir / "steps.jsonl") for k in scalars(r)}
    return keys | {f"{r.get('split', 'eval')}/{k}" for r in read_jsonl(run_dir / "evals.jsonl") for k in scalars(r)}


@pytest.mark.parametrize("stage", ["warmup", "classifier", "sft", "rl"])
def test_every_training_stage_reports_its_jsonl_keys_to_tensorboard_and_wandb(pipeline, stage):
    root, _ = pipeline
    run_dir = root / stage
    keys = jsonl_keys(run_dir)
    assert "train/loss" in keys or "train/reward_mean" in keys
    assert set(tensorboard_tags(run_dir).Tags()["scalars"]) == keys
    (folder,) = offline_runs(run_dir)
    rows = history(folder)
    assert {k for r in rows for k in r if not k.startswith("_") and not k.startswith("val/completions")} == keys
    steps = read_jsonl(run_dir / "steps.jsonl")
    logged = [r for r in rows if "train/" + next(iter(scalars(steps[-1]))) in r]
    assert [r["_step"] for r in logged] == [s["step"] for s in steps]


def test_rl_validation_completions_are_a_table(pipeline):
    root, _ = pipeline
    run_dir = root / "rl"
    (folder,) = offline_runs(run_dir)
    tables = [r for r in history(folder) if "val/completions/_type" in r]
    assert [t["_step"] for t in tables] == [e["step"] for e in read_jsonl(run_dir / "evals.jsonl")]
    table = json.loads((folder / "files" / tables[-1]["val/completions/path"]).read_text())
    assert table["columns"] == ["id", "prompt", "completion", "reward", "gold", "image"] and len(table["data"]) == 4
    from rewards.spec import compute_reward

    ids, prompts, texts, rewards, gold, _ = zip(*table["data"], strict=True)
    assert list(rewards) == pytest.approx(list(compute_reward("bleu4", list(texts), list(gold))))
    last = read_jsonl(run_dir / "evals.jsonl")[-1]
    assert float(np.mean(rewards)) == pytest.approx(last["proxy_reward"])
    text = tensorboard_tags(run_dir).Tensors("val/completions/text_summary")
    assert [t.step for t in text] == [t["_step"] for t in tables]
    assert b"| id | prompt | completion | reward | gold |" in text[-1].tensor_proto.string_val[0]
    # each row's input image (issue 46)
    images = tensorboard_tags(run_dir).Tags()["images"]
    assert sorted(images) == sorted(f"val/completions/images/{i}" for i in ids)


def test_stage0_reports_to_its_trackers(pipeline):
    root, _ = pipeline
    (base,) = [p.parent for p in (root / "cache").rglob("DONE")]
    run_dir = base / "run"
    keys = jsonl_keys(run_dir)
    assert "train/loss" in keys and set(tensorboard_tags(run_dir).Tags()["scalars"]) == keys
    (folder,) = offline_runs(run_dir)
    rows = history(folder)
    assert {k for r in rows for k in r if not k.startswith("_")} == keys


@pytest.fixture(scope="module")
def user_module(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user_code")
    (folder / "my_rewards.py").write_text(textwrap.dedent(USER_REWARDS))
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))
    sys.modules.pop("my_rewards", None)


def _candidates_and_rewards(run_dir):
    rows = read_jsonl(run_dir / "samples.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    return [(r["ids"], r["candidates"], np.asarray(r["rewards"]).ravel()) for r in rows]


def test_a_users_reward_by_name_drives_the_rl_stage(pipeline, user_module):
    root, common = pipeline
    from my_rewards import brevity

    assert main(["train", "rl", *common("rl_user"), *RL, "rl.reward=my_rewards:brevity",
                 f"init_from={root / 'sft' / 'model'}", "--no-progress"]) == 0
    for _, texts, rewards in _candidates_and_rewards(root / "rl_user"):
        assert rewards == pytest.approx(brevity(texts, texts))
    assert read_json(root / "rl_user" / "metrics.json")["reward"] == "my_rewards:brevity"
    evals = read_jsonl(root / "rl_user" / "evals.jsonl")
    assert all(0 < e["proxy_reward"] <= 1 for e in evals)


def test_a_weighted_mix_of_a_users_reward_and_bleu4_from_yaml_drives_the_rl_stage(pipeline, user_module, tmp_path):
    root, common = pipeline
    from my_rewards import brevity

    from harness.config import load_config
    from harness.stages.common import load_splits
    from rewards.spec import compute_reward

    config = tmp_path / "mix.yaml"
    config.write_text("rl:\n  reward:\n    my_rewards:brevity: 0.25\n    bleu4: 0.75\n")
    assert main(["train", "rl", str(config), *common("rl_mix"), *RL, f"init_from={root / 'sft' / 'model'}",
                 "--no-progress"]) == 0
    cfg = load_config(config, common("rl_mix"))
    assert cfg.rl.reward == {"my_rewards:brevity": 0.25, "bleu4": 0.75}
    reports = {s.id: s.report for s in load_splits(cfg, progress=False)["train"]}
    for ids, texts, rewards in _candidates_and_rewards(root / "rl_mix"):
        refs = [reports[i] for i in ids for _ in range(2)]  # G = 2 candidates per prompt
        expected = 0.25 * brevity(texts, refs) + 0.75 * compute_reward("bleu4", texts, refs)
        assert rewards == pytest.approx(expected)
    assert read_json(root / "rl_mix" / "metrics.json")["reward"] == {"my_rewards:brevity": 0.25, "bleu4": 0.75}
