"""Checks before writing (issue 26): every command validates config, data, device and storage before it creates
or changes anything in its out folder, so a refused command leaves the folder as it was: absent, or the earlier
run, byte for byte. Each case runs one command line on a bad input and compares the whole temporary folder
(paths, sizes, modification times) before and after; the message must be one line naming the input.

Before the fix, data and device errors came after the manifest was written (a folder holding only manifest.json)
and `eval --out`, `data synth` and `search run --storage` left empty folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from harness.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "experiments" / "demo_rl_ablation.yaml"
SEARCH = ROOT / "experiments" / "searches" / "rer_bounds.yaml"
REPORT = "The heart size is normal. The lungs are clear. No pleural effusion or pneumothorax is seen."


def _item(i: int, split: str, image: str | None = None) -> dict:
    return {"id": f"{split}{i}", "report": REPORT, "image_path": [image or f"{split}{i}.png"]}


def _data(root: Path, damage: str = "") -> Path:
    """A MIMIC-CXR-style annotation with images/ (2 studies per split), damaged as asked."""
    splits = {s: [_item(i, s) for i in range(2)] for s in ("train", "val", "test")}
    if damage == "leak_id":
        splits["test"][1] = {**splits["train"][0]}
    elif damage == "leak_image":
        splits["test"][1] = _item(1, "test", "train0.png")
    (root / "images").mkdir(parents=True, exist_ok=True)
    for k, item in enumerate(item for items in splits.values() for item in items):
        Image.new("L", (32, 32), 60 + 10 * k).save(root / "images" / item["image_path"][0])  # distinct bytes
    if damage == "leak_copy":  # a test image copied under another name into the training data
        (root / "images" / "train1.png").write_bytes((root / "images" / "test0.png").read_bytes())
    if damage == "missing_image":
        (root / "images" / "val1.png").unlink()
    if damage == "empty_image":  # a zero-byte file: found, but no image (a copy cut at its start)
        (root / "images" / "train1.png").write_bytes(b"")
    ann = root / "annotation.json"
    ann.write_text(json.dumps(splits))
    return ann


def _classifier(root: Path, damage: str = "") -> Path:
    """A classifier folder as `classifier train` writes it (weights contents are not read before a run)."""
    from harness.constants import OBSERVATIONS
    from harness.models.classifier import ClassifierConfig

    root.mkdir(parents=True)
    (root / "classifier.safetensors").write_bytes(b"x")
    meta = {"format_version": 1, "config": ClassifierConfig().to_dict(), "observations": list(OBSERVATIONS),
            "thresholds": [0.5] * len(OBSERVATIONS)}
    text = json.dumps(meta, indent=2)
    (root / "classifier.json").write_text(text[: len(text) // 2] if damage == "corrupt" else text)
    return root


def _setup(tmp: Path, kind: str) -> dict[str, str]:
    names = {"tmp": str(tmp), "out": str(tmp / "out")}
    damage = {"data_missing": "missing_image", "data_leak_id": "leak_id", "data_leak_image": "leak_image",
              "data_leak_copy": "leak_copy", "data_empty_image": "empty_image"}.get(kind, "")
    names["ann"] = str(_data(tmp / "data", damage))
    names["clf"] = str(_classifier(tmp / "clf", "corrupt" if kind == "clf_corrupt" else ""))
    if kind == "earlier_run":  # a complete warm-up run of another config in the out folder
        out = tmp / "out"
        out.mkdir()
        (out / "manifest.json").write_text(json.dumps({"stage": "warmup", "config": {"seed": 7}}))
        (out / "metrics.json").write_text("{}")
        (out / "model").mkdir()
        (out / "model" / "spec.json").write_text("{}")
    elif kind == "file":
        (tmp / "afile").write_text("not a folder")
    elif kind == "not_sqlite":
        (tmp / "db.sqlite").write_text("these are notes, not a database\n")
    elif kind.startswith("user_reward_"):  # a reward in the user's code, importable from tmp (the test's sys.path)
        body = {"user_reward_raises": "    raise ZeroDivisionError('my reward crashed on purpose')\n",
                "user_reward_strings": "    return ['high'] * len(candidates)\n",
                "user_reward_none": "    return None\n",
                "user_reward_inf": "    return [float('inf')] * len(candidates)\n"}[kind]
        (tmp / f"probe_{kind}.py").write_text(f"def score(candidates, references, **context):\n{body}")
    elif kind == "pickled_pth":
        import torch

        torch.save({"blocks.0.weight": torch.zeros(2), "note": Image.new("L", (2, 2))}, tmp / "backbone.pth")
    return names


DATA = ["data.dataset=mimic_cxr", "data.annotation={ann}", "out_dir={out}", "cache_dir={tmp}/cache",
        "data.synth_dir={tmp}/phantom", "--no-progress"]

# (case id, setup kind, argv, substrings of the one-line message)
CASES = [
    # -- data checks, which came after the manifest --
    ("warmup_missing_image", "data_missing", ["train", "warmup", *DATA], ["val1.png", "not found"]),
    ("sft_missing_image", "data_missing", ["train", "sft", *DATA, "classifier.dir={clf}"], ["val1.png"]),
    ("rl_missing_image", "data_missing", ["train", "rl", *DATA], ["val1.png"]),
    ("classifier_missing_image", "data_missing", ["classifier", "train", *DATA], ["val1.png"]),
    ("classifier_empty_image", "data_empty_image", ["classifier", "train", *DATA],
     ["train1.png", "not a readable image"]),
    ("warmup_empty_image", "data_empty_image", ["train", "warmup", *DATA], ["train1.png", "not a readable image"]),
    ("warmup_leak_id", "data_leak_id", ["train", "warmup", *DATA], ["'train0'", "train", "test", "leak"]),
    ("rl_leak_image", "data_leak_image", ["train", "rl", *DATA], ["train0.png", "'test1'", "'train0'"]),
    ("classifier_leak_id", "data_leak_id", ["classifier", "train", *DATA], ["'train0'", "leak"]),
    # -- issue 49: a test image copied under another name into the training data (same bytes, other path) --
    ("warmup_leak_copy", "data_leak_copy", ["train", "warmup", *DATA],
     ["test0.png", "train1.png", "same bytes", "'test0'", "'train1'", "data.leak_check=path"]),
    ("rl_leak_copy", "data_leak_copy", ["train", "rl", *DATA], ["test0.png", "train1.png", "same bytes"]),
    ("no_long_report", "", ["train", "warmup", *DATA, "data.train_min_tokens=1000"],
     ["no training report"]),
    # -- device and model --
    ("warmup_device", "", ["train", "warmup", *DATA, "model.device=cuda:99"], ["model.device", "cuda:99"]),
    ("classifier_device", "", ["classifier", "train", *DATA, "model.device=cuda:99"], ["model.device", "cuda:99"]),
    ("eval_device", "", ["eval", "--model", "{tmp}/nomodel", "--out", "{out}", *DATA[:2], *DATA[3:],
                         "model.device=cuda:99"], ["model.device", "cuda:99"]),
    ("hub_id", "", ["train", "warmup", *DATA, "model.path=nobody-here/no-such-model"],
     ["'model.path'", "nobody-here/no-such-model", "huggingface-cli download", "model.path=DIR"]),
    ("rl_hub_id", "", ["train", "rl", *DATA, "model.path=nobody-here/no-such-model"], ["'model.path'"]),
    ("sft_corrupt_classifier", "clf_corrupt", ["train", "sft", *DATA, "classifier.dir={clf}"],
     ["classifier.json", "not valid JSON", "classifier train"]),
    ("classifier_pickled_pth", "pickled_pth", ["classifier", "train", *DATA,
                                               "classifier.pretrained_path={tmp}/backbone.pth"],
     ["'classifier.pretrained_path'", "backbone.pth", "pickled", "safetensors"]),
    ("classifier_medical_mae_missing", "", ["classifier", "train", *DATA, "classifier.pretrained_format=medical_mae",
                                            "classifier.pretrained_path={tmp}/weights/vit-b_CXR_0.5M_mae_CheXpert.pth"],
     ["'classifier.pretrained_path'", "vit-b_CXR_0.5M_mae_CheXpert.pth", "file not found", "lambert-x/medical_mae"]),
    ("classifier_bf16_without_native_bf16", "no_native_bf16", ["classifier", "train", *DATA,
                                                                "classifier.amp_bf16=true"],
     ["classifier.amp_bf16 = true", "native bf16", "set it to false"]),
    # -- the out folder --
    ("earlier_run_other_config", "earlier_run", ["train", "warmup", *DATA], ["manifest.json", "--restart"]),
    ("earlier_run_bad_data", "earlier_run", ["train", "warmup", *DATA[:1], "data.annotation={tmp}/none.json",
                                             *DATA[2:]], ["'data.annotation'", "none.json"]),
    ("out_under_file", "file", ["train", "warmup", *DATA, "out_dir={tmp}/afile/run"], ["out_dir", "is a file"]),
    # -- eval --
    ("eval_missing_model", "", ["eval", "--model", "{tmp}/nomodel", "--out", "{out}", *DATA[:2], *DATA[3:]],
     ["'--model'", "nomodel", "folder not found"]),
    ("eval_hub_id", "", ["eval", "--model", "nobody-here/no-such-model", "--out", "{out}", *DATA[:2], *DATA[3:]],
     ["'--model'", "nobody-here/no-such-model", "huggingface-cli download"]),
    # -- a user reward, called on a probe batch before any decoding (issues 46, 49) --
    ("rl_user_reward_raises", "user_reward_raises", ["train", "rl", *DATA, "rl.reward=probe_user_reward_raises:score"],
     ["'rl.reward'", "probe_user_reward_raises:score", "probe batch", "ZeroDivisionError", "crashed on purpose"]),
    ("rl_user_reward_strings", "user_reward_strings", ["train", "rl", *DATA,
                                                       "rl.reward=probe_user_reward_strings:score"],
     ["'rl.reward'", "probe_user_reward_strings:score", "ValueError"]),
    ("rl_user_reward_none", "user_reward_none", ["train", "rl", *DATA, "rl.reward=probe_user_reward_none:score"],
     ["probe_user_reward_none:score", "shape"]),
    ("rl_user_reward_inf", "user_reward_inf", ["train", "rl", *DATA,
                                               "rl.reward={{bleu4: 0.5, 'probe_user_reward_inf:score': 0.5}}"],
     ["probe_user_reward_inf:score", "inf"]),
    # -- W&B requested online but not usable: refused before any step, hinting offline mode (issue 49) --
    ("warmup_wandb_not_logged_in", "wandb_no_key", ["train", "warmup", *DATA, "train.report_to=wandb"],
     ["'train.report_to'", "not logged in", "wandb login", "WANDB_MODE=offline"]),
    ("rl_wandb_unreachable", "wandb_unreachable", ["train", "rl", *DATA, "train.report_to=[tensorboard, wandb]"],
     ["http://127.0.0.1:9", "cannot be reached", "WANDB_MODE=offline"]),
    ("classifier_wandb_not_logged_in", "wandb_no_key", ["classifier", "train", *DATA, "train.report_to=wandb"],
     ["not logged in", "WANDB_MODE=offline"]),
    # -- compare: options checked before the study folders are read (issue 49) --
    ("compare_alpha_big", "", ["compare", "{tmp}/a", "{tmp}/b", "--alpha", "0.7"], ["--alpha 0.7", "(0, 0.5)"]),
    ("compare_alpha_zero", "", ["compare", "{tmp}/a", "{tmp}/b", "--alpha", "0"], ["--alpha 0", "(0, 0.5)"]),
    ("compare_delta_text", "", ["compare", "{tmp}/a", "{tmp}/b", "--delta", "gold_f1=abc"],
     ["--delta gold_f1=abc", "number > 0"]),
    # -- data synth --
    ("synth_seed_negative", "", ["data", "synth", "--n", "20", "--seed", "-1", "--out", "{out}"],
     ["--seed", "-1", ">= 0"]),
    ("synth_image_size", "", ["data", "synth", "--n", "20", "--image-size", "30", "--out", "{out}"],
     ["--image-size", "30", ">= 32"]),
    ("synth_out_under_file", "file", ["data", "synth", "--n", "20", "--out", "{tmp}/afile/d"],
     ["--out", "is a file"]),
    # -- experiment run --
    ("experiment_workers_zero", "", ["experiment", "run", str(DEMO), "--workers", "0", "--out", "{out}"],
     ["--workers", "0", ">= 1"]),
    ("experiment_slurm_missing", "no_slurm", ["experiment", "run", str(DEMO), "--executor", "slurm", "--out", "{out}"],
     ["--executor slurm", "sbatch"]),  # issue 49: before, index.json and the run links came first
    ("experiment_workers_negative", "", ["experiment", "run", str(DEMO), "--workers", "-1", "--out", "{out}"],
     ["--workers", "-1", ">= 1"]),
    # -- search run: storages --
    ("search_workers_zero", "", ["search", "run", str(SEARCH), "--workers", "0", "--out", "{out}"],
     ["--workers", "0"]),
    ("storage_malformed", "", ["search", "run", str(SEARCH), "--out", "{out}", "--storage",
                               "postgresql://user@host:port/optuna"], ["postgresql://user@host:port/optuna",
                                                                        "not a database URL"]),
    ("storage_unknown_database", "", ["search", "run", str(SEARCH), "--out", "{out}", "--storage",
                                      "mongodb://host/optuna"], ["mongodb", "no database"]),
    ("storage_driver_missing", "", ["search", "run", str(SEARCH), "--out", "{out}", "--storage",
                                    "postgresql+pg8000://user:secret@host/optuna"],
     ["driver is not installed", "pip install", "***"]),
    ("storage_not_sqlite", "not_sqlite", ["search", "run", str(SEARCH), "--out", "{out}", "--storage",
                                          "sqlite:///{tmp}/db.sqlite"], ["db.sqlite", "not an SQLite database"]),
    ("storage_under_file", "file", ["search", "run", str(SEARCH), "--out", "{out}", "--storage",
                                    "sqlite:///{tmp}/afile/optuna.db"], ["afile", "is a file"]),
    ("journal_under_file", "file", ["search", "run", str(SEARCH), "--out", "{out}", "--storage",
                                    "journal:{tmp}/afile/x.journal"], ["afile", "is a file"]),
]


def _snapshot(root: Path) -> dict[str, tuple]:
    return {str(p.relative_to(root)): (p.is_dir(), p.stat().st_size if p.is_file() else 0, p.stat().st_mtime_ns)
            for p in root.rglob("*")}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_refused_command_leaves_every_folder_as_it_was(case, tmp_path, capsys, monkeypatch):
    _, kind, argv, expected = case
    monkeypatch.chdir(tmp_path)  # default folders (runs/...) would land here
    names = _setup(tmp_path, kind)
    if kind.startswith("user_reward_"):
        monkeypatch.syspath_prepend(str(tmp_path))
    if kind.startswith("wandb_"):  # W&B online (the test session runs it offline), no key or no server
        monkeypatch.setenv("WANDB_MODE", "online")
        monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
        monkeypatch.delenv("WANDB_API_KEY", raising=False)
        if kind == "wandb_unreachable":  # a key, and a server that refuses the connection (the discard port)
            monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
            monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    if kind == "no_slurm":  # whatever this machine has: a cluster that does not answer
        monkeypatch.setattr("harness.experiments.slurm_queue.slurm_available",  # every check reads it there
                            lambda: "no sbatch, squeue on PATH (not on a Slurm cluster's login node?)")
    if kind == "no_native_bf16":  # issue 27: refused before the run folder is opened, on a CPU without bf16
        monkeypatch.setattr("harness.models.classifier.training.native_cpu_bf16", lambda: False)
    args = [a.format(**names) for a in argv]
    before = _snapshot(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for text in expected:
        assert text in err, f"{text!r} not in: {err}"
    after = _snapshot(tmp_path)
    assert sorted(set(after) - set(before)) == [], f"new: {sorted(set(after) - set(before))}; {err}"
    assert after == before, "a file or folder of the earlier state changed"


def test_the_suite_covers_every_command():
    commands = {" ".join(a for a in c[2][:2] if not a.startswith("-")) for c in CASES}
    assert {"train warmup", "train sft", "train rl", "classifier train", "data synth", "experiment run",
            "search run"} <= commands
    assert any(c[2][0] == "eval" for c in CASES)
    assert len(CASES) >= 30
