"""rewards/chexbert.py through the real f1chexbert loading path, offline, on a tiny CheXbert built here.

The fixture writes, under tmp_path, exactly what f1chexbert 0.0.2 reads:
- ``<XDG cache>/chexbert/chexbert.pth``: ``{"model_state_dict": {"module.<key>": tensor}}`` of a randomly
  initialised ``bert_labeler`` (the package's own class);
- the Hugging Face cache entry of ``bert-base-uncased`` (``models--bert-base-uncased/refs/main`` and
  ``snapshots/<rev>/{config.json,vocab.txt,tokenizer_config.json}``) with a small BertConfig (hidden 32, one
  layer) and a small WordPiece vocab. f1chexbert builds the encoder with ``AutoModel.from_config`` from that
  config, so the whole model is tiny (no 440 MB state dict).
Network access is blocked for every test here.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from harness.constants import NUM_OBSERVATIONS, OBSERVATIONS
from rewards import chexbert
from rewards.chexbert import (
    F1CHEXBERT_ORDER,
    binarize,
    label_reports_chexbert,
    labels_from_classes,
)
from tests.rewards.hf_cache import patch_transformers_hub

REVISION = "0123456789abcdef0123456789abcdef01234567"
WORDS = (
    "the heart size is normal there no pleural effusion or pneumothorax mild cardiomegaly small left right "
    "lungs are clear acute osseous abnormality lower lobe opacity may represent pneumonia tube in place "
    "edema consolidation atelectasis fracture"
).split()
REPORTS = [
    "the heart size is normal . there is no pleural effusion or pneumothorax .",
    "mild cardiomegaly . small left pleural effusion .",
    "",
    "the lungs are clear . no acute osseous abnormality .",
    "right lower lobe opacity may represent pneumonia .  tube in place .",
]


def tiny_vocab() -> list[str]:
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,;:-()")
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *dict.fromkeys(WORDS + letters),
            *(f"##{c}" for c in letters)]


def write_hub_repo(hub_cache: Path, repo_id: str, files: dict[str, str]) -> Path:
    """A model repository in the Hugging Face hub cache layout (refs/main -> snapshots/<rev>/...)."""
    root = hub_cache / f"models--{repo_id.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(REVISION)
    snapshot = root / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (snapshot / name).write_text(text)
    return snapshot


def tiny_bert_files(hidden: int = 32) -> dict[str, str]:
    from transformers import BertConfig

    vocab = tiny_vocab()
    config = BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=2 * hidden, max_position_embeddings=512,
                        initializer_range=1.0)  # large random weights: varied outputs
    return {
        "config.json": config.to_json_string(),
        "vocab.txt": "\n".join(vocab) + "\n",
        "tokenizer_config.json": json.dumps({"do_lower_case": True, "model_max_length": 512}),
    }


@pytest.fixture
def offline_caches(tmp_path, monkeypatch, network_attempts):
    """Point every cache the packages read at tmp_path, offline; return (hub cache, chexbert cache dir)."""
    import huggingface_hub.constants
    from f1chexbert import f1chexbert as package

    hf_home = tmp_path / "hf"
    hub = hf_home / "hub"
    xdg = tmp_path / "xdg"
    hub.mkdir(parents=True)
    for name, value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(hf_home),
                        "HF_HUB_CACHE": str(hub), "HUGGINGFACE_HUB_CACHE": str(hub),
                        "XDG_CACHE_HOME": str(xdg)}.items():
        monkeypatch.setenv(name, value)
    # These libraries read the environment once, at import: patch the values they captured too.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    patch_transformers_hub(monkeypatch, offline=True, cache=str(hub))
    monkeypatch.setattr(package, "CACHE_DIR", str(xdg / "chexbert"))
    monkeypatch.setattr(chexbert, "_MODELS", {})
    monkeypatch.setattr(chexbert, "_LABEL_CACHE", OrderedDict())
    return hub, xdg / "chexbert"


def write_tiny_chexbert(hub: Path, cache_dir: Path, seed: int = 0, drop: str | None = None,
                        legacy: bool = False) -> Path:
    import torch
    from f1chexbert.f1chexbert import bert_labeler

    write_hub_repo(hub, "bert-base-uncased", tiny_bert_files())
    torch.manual_seed(seed)
    model = bert_labeler(inference=True)  # reads the tiny config.json from the cache just written
    for head in model.linear_heads:  # larger head weights: random reports get varied classes
        torch.nn.init.normal_(head.weight, std=3.0)
    state = {f"module.{k}": v for k, v in model.state_dict().items() if k != drop}
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / "chexbert.pth"
    torch.save({"epoch": 1, "model_state_dict": state}, path, _use_new_zipfile_serialization=not legacy)
    return path


@pytest.fixture
def tiny_chexbert(offline_caches):
    hub, cache_dir = offline_caches
    return write_tiny_chexbert(hub, cache_dir)


# ------------------------------------------------------------------------------------------ pure mapping
def test_order_and_class_mapping_table():
    assert sorted(F1CHEXBERT_ORDER) == sorted(OBSERVATIONS)
    classes = np.zeros((4, 14), dtype=np.int64)
    for row in range(4):
        classes[row, :13] = row  # findings heads: 0 blank, 1 positive, 2 negative, 3 uncertain
    classes[:, 13] = [0, 1, 0, 1]  # No Finding head: 0 blank, 1 positive
    labels = labels_from_classes(classes)
    nf = OBSERVATIONS.index("No Finding")
    findings = [j for j in range(NUM_OBSERVATIONS) if j != nf]
    assert np.isnan(labels[0, findings]).all()
    assert (labels[1, findings] == 1).all()
    assert (labels[2, findings] == 0).all()
    assert (labels[3, findings] == -1).all()
    assert np.isnan(labels[[0, 2], nf]).all() and (labels[[1, 3], nf] == 1).all()


def test_columns_are_reordered_to_observations():
    classes = np.zeros((1, 14), dtype=np.int64)
    classes[0, F1CHEXBERT_ORDER.index("Cardiomegaly")] = 1
    classes[0, F1CHEXBERT_ORDER.index("Pleural Effusion")] = 3
    classes[0, F1CHEXBERT_ORDER.index("No Finding")] = 1
    labels = labels_from_classes(classes)[0]
    assert labels[OBSERVATIONS.index("Cardiomegaly")] == 1
    assert labels[OBSERVATIONS.index("Pleural Effusion")] == -1
    assert labels[0] == 1 and OBSERVATIONS[0] == "No Finding"
    assert np.isnan(labels[OBSERVATIONS.index("Edema")])


def test_labels_from_classes_rejects_bad_input():
    with pytest.raises(ValueError, match="shape"):
        labels_from_classes(np.zeros((2, 13), dtype=np.int64))
    bad = np.zeros((1, 14), dtype=np.int64)
    bad[0, 13] = 2  # No Finding has only two classes
    with pytest.raises(ValueError, match="No Finding"):
        labels_from_classes(bad)


def test_binarize_modes():
    labels = np.array([[1.0, 0.0, -1.0, np.nan] + [np.nan] * 10])
    assert binarize(labels)[0, :4].tolist() == [1, 0, 0, 0]  # paper (default): positive only
    assert binarize(labels, "paper")[0, :4].tolist() == [1, 0, 0, 0]
    assert binarize(labels, "rrg")[0, :4].tolist() == [1, 0, 1, 0]  # rrg: positive or uncertain
    with pytest.raises(ValueError, match="mode"):
        binarize(labels, "classification")


# ------------------------------------------------------------------------------------------ real loading path
def test_labels_offline_end_to_end(tiny_chexbert, network_attempts):
    labels = label_reports_chexbert(REPORTS, batch_size=2)
    assert labels.shape == (len(REPORTS), NUM_OBSERVATIONS) and labels.dtype == np.float64
    finite = labels[np.isfinite(labels)]
    assert set(finite.tolist()) <= {1.0, 0.0, -1.0}
    assert set(labels[:, 0][np.isfinite(labels[:, 0])].tolist()) <= {1.0}  # No Finding: 1 or nan
    assert len({tuple(np.nan_to_num(r, nan=9)) for r in labels}) > 1  # the tiny model is not constant
    # Loaded once per process and device.
    scorer = chexbert._MODELS["cpu"]
    again = label_reports_chexbert(REPORTS, batch_size=5)
    assert chexbert._MODELS["cpu"] is scorer
    np.testing.assert_array_equal(again, labels)
    assert label_reports_chexbert([]).shape == (0, NUM_OBSERVATIONS)
    assert not network_attempts


def test_loads_without_network_outside_offline_mode(tiny_chexbert, monkeypatch, network_attempts):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    patch_transformers_hub(monkeypatch, offline=False)
    assert label_reports_chexbert(REPORTS[:2]).shape == (2, NUM_OBSERVATIONS)  # sockets refuse any connection
    assert huggingface_hub.constants.HF_HUB_OFFLINE is False  # restored after loading
    assert network_attempts == []


def test_agrees_with_the_package_get_label(tiny_chexbert):
    ours = label_reports_chexbert(REPORTS, mode="paper", batch_size=3)
    ours_rrg = label_reports_chexbert(REPORTS, mode="rrg", batch_size=3)
    scorer = chexbert._MODELS["cpu"]
    for i, report in enumerate(REPORTS):
        theirs = scorer.get_label(report.strip(), mode="classification")  # f1chexbert order, '' = blank
        theirs = np.array([np.nan if v == "" else float(v) for v in theirs])[chexbert._HEAD_OF_COLUMN]
        np.testing.assert_array_equal(ours[i], theirs)
        rrg = np.array(scorer.get_label(report.strip(), mode="rrg"), dtype=float)[chexbert._HEAD_OF_COLUMN]
        np.testing.assert_array_equal(binarize(ours[i], "rrg"), rrg)
        np.testing.assert_array_equal(binarize(ours_rrg[i], "paper"), rrg)


def test_constructed_outputs_map_for_both_modes(tiny_chexbert, monkeypatch):
    import torch

    label_reports_chexbert(["warm up"])
    scorer = chexbert._MODELS["cpu"]
    reports = ["a", "b", "c", "d"]
    first_ids = [scorer.tokenizer.convert_tokens_to_ids(r) for r in reports]

    # Report r gets class (r + h) % 4 on finding head h and r % 2 on the No Finding head.
    def fake_forward(source_padded, attention_mask):
        rows = [first_ids.index(int(t)) for t in source_padded[:, 1]]
        heads = []
        for h in range(14):
            n_classes = 2 if h == 13 else 4
            logits = torch.zeros(len(rows), n_classes)
            for b, r in enumerate(rows):
                logits[b, (r % 2) if h == 13 else (r + h) % 4] = 5.0
            heads.append(logits)
        return heads

    monkeypatch.setattr(scorer.model, "forward", fake_forward)
    value = {0: np.nan, 1: 1.0, 2: 0.0, 3: -1.0}
    expected = np.empty((4, NUM_OBSERVATIONS))
    for r in range(4):
        for j, name in enumerate(OBSERVATIONS):
            h = F1CHEXBERT_ORDER.index(name)
            expected[r, j] = (1.0 if r % 2 else np.nan) if h == 13 else value[(r + h) % 4]

    paper = label_reports_chexbert(reports, mode="paper", batch_size=3)
    np.testing.assert_array_equal(paper, expected)
    rrg = label_reports_chexbert(reports, mode="rrg", batch_size=3)
    np.testing.assert_array_equal(rrg, np.where(expected == -1, 1.0, expected))
    # e.g. Cardiomegaly is head 1: report 0 -> class 1 positive, report 2 -> class 3 uncertain.
    cm = OBSERVATIONS.index("Cardiomegaly")
    assert paper[0, cm] == 1 and paper[2, cm] == -1 and rrg[2, cm] == 1
    assert binarize(paper, "paper")[2, cm] == 0 and binarize(paper, "rrg")[2, cm] == 1
    np.testing.assert_array_equal(binarize(paper, "paper"), (expected == 1).astype(float))
    np.testing.assert_array_equal(binarize(paper, "rrg"), np.isin(expected, [1, -1]).astype(float))
    for r, report in enumerate(reports):  # f1chexbert's own rrg binarisation agrees on the same outputs
        theirs = np.array(scorer.get_label(report, mode="rrg"), dtype=float)[chexbert._HEAD_OF_COLUMN]
        np.testing.assert_array_equal(binarize(paper[r], "rrg"), theirs)


def test_chexbert_f1_reward(tiny_chexbert, monkeypatch):
    from rewards.registry import get_reward
    from rewards.spec import compute_reward

    assert get_reward("chexbert_f1") is chexbert.chexbert_f1
    labels = label_reports_chexbert(REPORTS)
    positives = binarize(labels).sum(1)
    same = compute_reward("chexbert_f1", REPORTS, REPORTS, chexbert_device="cpu")
    np.testing.assert_array_equal(same, (positives > 0).astype(float))  # identical report: 1 (0 if no positive)

    cands, refs = REPORTS[:3], [REPORTS[3]] * 3
    score = compute_reward("chexbert_f1", cands, refs, chexbert_device="cpu")
    hyp, ref = binarize(labels[:3]), binarize(labels[[3, 3, 3]])
    tp = (hyp * ref).sum(1)
    denom = hyp.sum(1) + ref.sum(1)
    np.testing.assert_allclose(score, np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 0.0))
    rrg = compute_reward("chexbert_f1", cands, refs, chexbert_device="cpu", chexbert_mode="rrg")
    assert rrg.shape == (3,) and ((rrg >= 0) & (rrg <= 1)).all()
    assert set(chexbert._LABEL_CACHE) == set(REPORTS)  # every distinct text labelled once and cached


# ------------------------------------------------------------------------------------------ missing files
def test_missing_checkpoint_raises_clear_error(offline_caches):
    hub, cache_dir = offline_caches
    write_hub_repo(hub, "bert-base-uncased", tiny_bert_files())
    assert not chexbert.chexbert_available()
    with pytest.raises(FileNotFoundError) as info:
        label_reports_chexbert(["no effusion ."])
    message = str(info.value)
    assert str(cache_dir / "chexbert.pth") in message
    assert "StanfordAIMI/RRG_scorers" in message
    with pytest.raises(FileNotFoundError):  # the reward never falls back to the rule labeler
        chexbert.chexbert_f1(["no effusion ."], ["no effusion ."], chexbert_device="cpu")
    assert not (cache_dir / "chexbert.pth").exists()


def test_missing_tokenizer_raises_clear_error(offline_caches):
    import torch

    hub, cache_dir = offline_caches
    cache_dir.mkdir(parents=True)
    torch.save({"model_state_dict": {}}, cache_dir / "chexbert.pth")
    with pytest.raises(FileNotFoundError, match="bert-base-uncased.*config.json, vocab.txt"):
        label_reports_chexbert(["no effusion ."])


@pytest.mark.parametrize("legacy", [False, True])  # 2020-era checkpoints may use torch's legacy format
def test_checkpoint_of_wrong_architecture_is_rejected(offline_caches, legacy):
    hub, cache_dir = offline_caches
    write_tiny_chexbert(hub, cache_dir, drop="linear_heads.3.weight", legacy=legacy)
    with pytest.raises(RuntimeError, match="linear_heads.3.weight"):
        label_reports_chexbert(["no effusion ."])


def test_legacy_format_checkpoint_loads(offline_caches):
    hub, cache_dir = offline_caches
    write_tiny_chexbert(hub, cache_dir, legacy=True)
    assert label_reports_chexbert(REPORTS[:2]).shape == (2, NUM_OBSERVATIONS)


def test_rl_step_with_the_chexbert_f1_reward(tiny_chexbert, tiny_model, tiny_processor, xray_images, tmp_path):
    """A GRPO step on the tiny Qwen2.5-VL with this reward, through the offline checkpoint written above."""
    from harness.grpo.trainer import PromptSet
    from tests.harness.grpo.test_trainer import _trainer

    refs = ["mild cardiomegaly . small left pleural effusion .", "the lungs are clear . no pneumothorax ."]
    prompts = PromptSet(["a", "b"], [[xray_images[0]], [xray_images[1]]], ["write"] * 2, refs)
    tr = _trainer(tiny_model, tiny_processor, tmp_path / "rl", prompts, regularizer="rer", reference="static",
                  reward="chexbert_f1")
    tr.reference.on_start(tr.store)
    row = tr.train_step()
    assert 0.0 <= row["reward_min"] <= row["reward_max"] <= 1.0
    assert row["loss"] == row["loss"]  # finite, not NaN


# ---------------------------------------------------------------------------------- preflight (harness/checks/needs.py)
@pytest.mark.parametrize("legacy", [False, True])
def test_preflight_passes_with_the_weights_in_the_package_layout_and_refuses_a_bad_file(offline_caches, legacy):
    """The check a command runs before it decodes or trains: files only (nothing loaded), the exact path f1chexbert
    reads, a torch checkpoint that is empty or not one refused."""
    from harness.checks.needs import check_needs
    from harness.config import ConfigError, load_config

    hub, cache_dir = offline_caches
    eval_cfg = load_config(None, ["eval.ce_backend=chexbert", "eval.radgraph='off'"])
    rl_cfg = load_config(None, ["rl.reward={bleu4: 0.5, chexbert_f1: 0.5}"])
    with pytest.raises(ConfigError, match="'eval.ce_backend' = 'chexbert' needs CheXbert") as info:
        check_needs(eval_cfg, "eval")
    assert str(cache_dir / "chexbert.pth") in str(info.value)
    path = write_tiny_chexbert(hub, cache_dir, legacy=legacy)
    check_needs(eval_cfg, "eval")
    check_needs(rl_cfg, "rl")
    assert chexbert._MODELS == {}  # nothing was loaded
    path.write_bytes(b"")
    with pytest.raises(ConfigError, match=r"chexbert.pth is empty .*StanfordAIMI/RRG_scorers"):
        check_needs(rl_cfg, "rl")
    path.write_bytes(b"<html>rate limited</html>")
    with pytest.raises(ConfigError, match="chexbert.pth is not a torch checkpoint"):
        check_needs(eval_cfg, "eval")
