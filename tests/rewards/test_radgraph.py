"""rewards/radgraph.py through the real radgraph loading path, offline, on a tiny DyGIE model built here.

The fixture writes, under tmp_path, what radgraph 0.1.18 reads:
- the model archive ``<model_type>.tar.gz`` in radgraph's Hub cache
  (``<CACHE_DIR>/models--StanfordAIMI--RRG_scorers/snapshots/<rev>/``), holding ``config.json`` (the DyGIE
  config, with the keys radgraph's loader reads), ``vocabulary/`` (AllenNLP label vocabularies for
  ``<model_type>__ner_labels`` and ``<model_type>__relation_labels``) and ``weights.th`` (the state dict of a
  randomly initialised DyGIE built with the package's own classes from that config);
- the encoder named in that config, in the Hugging Face cache, as a small BertConfig (hidden 32, one layer)
  and a small WordPiece vocab (radgraph builds the encoder with ``AutoModel.from_config``; its weights are in
  ``weights.th``). The name used is the PubMedBERT id RadGraph's DyGIE models are known to use; the real
  archive's config names its own, which ``check_radgraph_files`` reads from the extracted config.
Network access is blocked for every test here.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from rewards import radgraph as rg
from tests.rewards.hf_cache import patch_transformers_hub

REVISION = "0123456789abcdef0123456789abcdef01234567"
ENCODER = "microsoft/BiomedNLP-PubMedBERT-base-uncased-abstract-fulltext"
WORDS = ("the heart size is normal there no pleural effusion or pneumothorax mild cardiomegaly small left right "
         "lungs are clear acute lower lobe opacity may represent pneumonia tube in place").split()
HYPS = ["mild cardiomegaly . small left pleural effusion .", "the lungs are clear .", "", "no pneumothorax .",
        "right lower lobe opacity ."]
REFS = ["the heart size is normal . no pleural effusion .", "the lungs are clear .", "mild cardiomegaly .", "  ",
        "mild cardiomegaly ."]


def write_hub_repo(hub_cache: Path, repo_id: str, files: dict[str, str]) -> Path:
    """A repository in the Hugging Face hub cache layout (refs/main -> snapshots/<rev>/...)."""
    root = hub_cache / f"models--{repo_id.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(REVISION)
    snapshot = root / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (snapshot / name).write_text(text)
    return snapshot


def tiny_encoder_files() -> dict[str, str]:
    from transformers import BertConfig

    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,;:-()")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *dict.fromkeys(WORDS + letters),
             *(f"##{c}" for c in letters)]
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    return {"config.json": config.to_json_string(), "vocab.txt": "\n".join(vocab) + "\n",
            "tokenizer_config.json": json.dumps({"do_lower_case": True, "model_max_length": 512})}


def dygie_config(encoder: str = ENCODER) -> dict:
    bert = {"type": "pretrained_transformer_mismatched", "model_name": encoder, "max_length": 512}
    return {
        "dataset_reader": {"type": "dygie", "max_span_width": 4, "token_indexers": {"bert": dict(bert)}},
        "model": {
            "type": "dygie",
            "embedder": {"token_embedders": {"bert": dict(bert)}},
            "initializer": {},
            "module_initializer": {},
            "feature_size": 8,
            "max_span_width": 4,
            "target_task": "relation",
            "feedforward_params": {"num_layers": 1, "hidden_dims": 16, "dropout": 0.0},
            "loss_weights": {"ner": 1.0, "relation": 1.0, "coref": 0.0, "events": 0.0},
            "modules": {
                "ner": {},
                "coref": {"spans_per_word": 0.3, "max_antecedents": 10},
                "relation": {"spans_per_word": 0.5},
                "events": {"trigger_spans_per_word": 0.3, "argument_spans_per_word": 0.8,
                           "loss_weights": {"trigger": 1.0, "arguments": 0.5}},
            },
        },
    }


def build_model_files(folder: Path, model_type: str, seed: int = 0) -> None:
    """config.json, vocabulary/ and weights.th of a tiny randomly initialised DyGIE, as in the real archive."""
    import torch
    from dotmap import DotMap
    from radgraph.allennlp.data import Vocabulary
    from radgraph.allennlp.modules import text_field_embedders, token_embedders
    from radgraph.dygie.models import dygie

    config = dygie_config()
    vocab_dir = folder / "vocabulary"
    vocab_dir.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    (vocab_dir / "non_padded_namespaces.txt").write_text("*tags\n*labels\n")
    # Label vocabularies are not padded; the NER null label "" must be index 0.
    (vocab_dir / f"{model_type}__ner_labels.txt").write_text("\nANAT-DP\nOBS-DP\nOBS-U\nOBS-DA\n")
    (vocab_dir / f"{model_type}__relation_labels.txt").write_text("modify\nlocated_at\nsuggestive_of\n")
    vocab = Vocabulary.from_files(str(vocab_dir))
    embedder = text_field_embedders.BasicTextFieldEmbedder(
        {"bert": token_embedders.PretrainedTransformerMismatchedEmbedder(model_name=ENCODER, max_length=512)})
    kwargs = DotMap(config["model"])
    for name in ("type", "embedder", "initializer", "module_initializer"):
        del kwargs[name]
    torch.manual_seed(seed)
    model = dygie.DyGIE(vocab=vocab, embedder=embedder, **kwargs)
    torch.save(model.state_dict(), folder / "weights.th")


def write_archive(cache_dir: Path, tmp: Path, model_type: str) -> Path:
    """``<model_type>.tar.gz`` in radgraph's Hub cache, members at the archive root like the real one."""
    src = tmp / f"src-{model_type}"
    build_model_files(src, model_type)
    snapshot = write_hub_repo(cache_dir, "StanfordAIMI/RRG_scorers", {})
    archive = snapshot / f"{model_type}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(src.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(src)), recursive=False)
    return archive


@pytest.fixture
def radgraph_env(tmp_path, monkeypatch, network_attempts):
    """Offline caches under tmp_path: (tmp_path, HF hub cache, radgraph CACHE_DIR); encoder files written."""
    import huggingface_hub.constants
    from radgraph import radgraph as package
    from radgraph.allennlp.common import cached_transformers

    hub = tmp_path / "hf" / "hub"
    cache_dir = tmp_path / "xdg" / "radgraph" / "0.1.18"
    hub.mkdir(parents=True)
    for name, value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
                        "HF_HUB_CACHE": str(hub), "HUGGINGFACE_HUB_CACHE": str(hub),
                        "XDG_CACHE_HOME": str(tmp_path / "xdg")}.items():
        monkeypatch.setenv(name, value)
    # These libraries read the environment once, at import: patch the values they captured too.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    patch_transformers_hub(monkeypatch, offline=True, cache=str(hub))
    monkeypatch.setattr(package, "CACHE_DIR", str(cache_dir))
    monkeypatch.setattr(cached_transformers, "_model_cache", {})
    monkeypatch.setattr(cached_transformers, "_tokenizer_cache", {})
    monkeypatch.setattr(rg, "_SCORERS", {})
    monkeypatch.setattr(rg, "_ANNOTATIONS", type(rg._ANNOTATIONS)())
    write_hub_repo(hub, ENCODER, tiny_encoder_files())
    return tmp_path, hub, cache_dir


@pytest.fixture
def tiny_radgraph_xl(radgraph_env):
    tmp, _, cache_dir = radgraph_env
    write_archive(cache_dir, tmp, "radgraph-xl")
    return cache_dir / "radgraph-xl"


# ------------------------------------------------------------------------------------------ real loading path
@pytest.mark.parametrize("model_type", ["radgraph-xl", "radgraph"])
def test_scores_offline_from_the_cached_archive(radgraph_env, model_type, network_attempts):
    tmp, _, cache_dir = radgraph_env
    write_archive(cache_dir, tmp, model_type)
    assert rg.radgraph_model_dir(model_type) == cache_dir / model_type
    scores = rg.radgraph_f1(HYPS, REFS, model_type=model_type, reward_level="partial", device="cpu")
    assert scores.shape == (len(HYPS),) and scores.dtype == np.float64
    assert ((scores >= 0) & (scores <= 1)).all()
    assert scores[2] == 0.0 and scores[3] == 0.0  # empty hypothesis / whitespace-only reference
    assert scores[1] == 1.0  # identical reports (the tiny model finds entities in them)
    for name in ("config.json", "weights.th", "vocabulary"):
        assert (cache_dir / model_type / name).exists()  # extracted where radgraph reads it
    assert not network_attempts


def test_loads_without_network_outside_offline_mode(tiny_radgraph_xl, monkeypatch, network_attempts):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    patch_transformers_hub(monkeypatch, offline=False)
    assert rg.radgraph_f1(HYPS, REFS, device="cpu").shape == (len(HYPS),)  # sockets refuse any connection
    assert huggingface_hub.constants.HF_HUB_OFFLINE is False  # restored after loading
    assert network_attempts == []


def test_per_pair_scores_match_the_package_F1RadGraph(tiny_radgraph_xl):
    all_levels = rg.radgraph_f1(HYPS, REFS, reward_level="all", device="cpu")
    assert all_levels.shape == (len(HYPS), 3)
    scorer = rg._SCORERS[("radgraph-xl", "cpu")]
    hyps = ["" if not h.strip() else h for h in HYPS]
    refs = ["" if not r.strip() else r for r in REFS]
    mean, per_pair, _, _ = scorer(refs=refs, hyps=hyps)  # the package's own computation, reward_level="all"
    np.testing.assert_allclose(all_levels, np.array(per_pair).T, atol=0)
    for j, level in enumerate(("simple", "partial", "complete")):
        np.testing.assert_allclose(rg.radgraph_f1(HYPS, REFS, reward_level=level, device="cpu"),
                                   all_levels[:, j], atol=0)
    corpus = rg.radgraph_scores(HYPS, REFS, device="cpu")
    assert corpus["radgraph_num_examples"] == len(HYPS) and corpus["radgraph_model_type"] == "radgraph-xl"
    for j, level in enumerate(("simple", "partial", "complete")):
        assert corpus[f"radgraph_{level}"] == pytest.approx(mean[j], abs=1e-12)
        assert corpus[f"radgraph_{level}"] == pytest.approx(all_levels[:, j].mean(), abs=1e-12)


def test_model_loaded_once_and_each_text_annotated_once(tiny_radgraph_xl, monkeypatch):
    rg.radgraph_f1(HYPS[:1], REFS[:1], device="cpu")
    scorer = rg._SCORERS[("radgraph-xl", "cpu")]
    seen: list[str] = []
    original = scorer.radgraph.forward

    def counting(texts):
        seen.extend(texts)
        return original(texts)

    monkeypatch.setattr(scorer.radgraph, "forward", counting)
    cands = ["mild cardiomegaly .", "no pneumothorax .", "mild cardiomegaly ."]
    refs = [REFS[0]] * 3
    rg.radgraph_f1(cands, refs, device="cpu")
    assert rg._SCORERS[("radgraph-xl", "cpu")] is scorer
    assert sorted(seen) == sorted(["mild cardiomegaly .", "no pneumothorax ."])  # REFS[0] was kept from above


def test_constructed_annotations_give_hand_computed_f1(tiny_radgraph_xl, monkeypatch):
    rg.radgraph_f1(["mild cardiomegaly ."], ["mild cardiomegaly ."], device="cpu")
    scorer = rg._SCORERS[("radgraph-xl", "cpu")]

    def entity(tokens, label, relations=()):
        return {"tokens": tokens, "label": label, "start_ix": 0, "end_ix": 0, "relations": [list(r) for r in relations]}

    annotations = {
        "hyp": {"entities": {"1": entity("cardiomegaly", "OBS-DP"), "2": entity("effusion", "OBS-DP")}},
        "ref": {"entities": {"1": entity("cardiomegaly", "OBS-DP"), "2": entity("heart", "ANAT-DP"),
                             "3": entity("effusion", "OBS-DP", [("located_at", "2")])}},
    }

    def fake(texts):
        return {str(i): annotations[t] for i, t in enumerate(texts)}

    monkeypatch.setattr(scorer.radgraph, "forward", fake)
    simple, partial, complete = rg.radgraph_f1(["hyp"], ["ref"], reward_level="all", device="cpu")[0]
    # simple: {cardiomegaly, effusion} vs {cardiomegaly, heart, effusion}: P = 1, R = 2/3 -> F1 = 0.8
    assert simple == pytest.approx(0.8)
    # partial: the reference effusion has a relation, so (effusion, OBS-DP, True) does not match the
    # hypothesis' (effusion, OBS-DP): only cardiomegaly matches, P = 1/2, R = 1/3 -> F1 = 0.4
    assert partial == pytest.approx(0.4)
    # complete: (effusion, OBS-DP, located_at, heart) is not matched either: P = 1/2, R = 1/3
    assert complete == pytest.approx(partial)


def test_reward_is_registered_with_the_paper_defaults(tiny_radgraph_xl):
    from rewards.registry import get_reward
    from rewards.spec import compute_reward

    assert get_reward("radgraph_f1") is rg.radgraph_reward
    reward = compute_reward("radgraph_f1", HYPS, REFS, radgraph_device="cpu")
    np.testing.assert_allclose(reward, rg.radgraph_f1(HYPS, REFS, "radgraph-xl", "partial", device="cpu"))
    with pytest.raises(ValueError, match="one reward level"):
        rg.radgraph_reward(HYPS, REFS, radgraph_reward_level="all")


def test_already_extracted_model_directory_is_used(radgraph_env):
    _, _, cache_dir = radgraph_env
    build_model_files(cache_dir / "radgraph", "radgraph")  # no archive anywhere
    assert rg.radgraph_available("radgraph")
    assert rg.radgraph_f1(["mild cardiomegaly ."], ["mild cardiomegaly ."], "radgraph", device="cpu")[0] == 1.0


# ------------------------------------------------------------------------------------------ missing files
def test_missing_weights_raise_a_clear_error(radgraph_env):
    _, _, cache_dir = radgraph_env
    assert not rg.radgraph_available()
    with pytest.raises(FileNotFoundError) as info:
        rg.radgraph_f1(HYPS, REFS, device="cpu")
    message = str(info.value)
    assert str(cache_dir / "radgraph-xl") in message and "radgraph-xl.tar.gz" in message
    assert "StanfordAIMI/RRG_scorers" in message
    with pytest.raises(FileNotFoundError):
        rg.radgraph_scores(HYPS, REFS, device="cpu")
    with pytest.raises(FileNotFoundError):
        rg.radgraph_reward(HYPS, REFS, radgraph_device="cpu")


def test_incomplete_model_directory_names_the_missing_file(radgraph_env):
    _, _, cache_dir = radgraph_env
    build_model_files(cache_dir / "radgraph-xl", "radgraph-xl")
    (cache_dir / "radgraph-xl" / "weights.th").unlink()
    with pytest.raises(FileNotFoundError, match="lacks weights.th"):
        rg.check_radgraph_files("radgraph-xl")


def test_missing_encoder_files_raise_a_clear_error(radgraph_env):
    tmp, hub, cache_dir = radgraph_env
    write_archive(cache_dir, tmp, "radgraph-xl")
    import shutil

    shutil.rmtree(hub / f"models--{ENCODER.replace('/', '--')}")
    with pytest.raises(FileNotFoundError, match=ENCODER):
        rg.radgraph_f1(HYPS, REFS, device="cpu")


def test_argument_checks():
    with pytest.raises(ValueError, match="model_type"):
        rg.radgraph_f1(["a"], ["a"], model_type="radgraph-xxl")
    with pytest.raises(ValueError, match="reward_level"):
        rg.radgraph_f1(["a"], ["a"], reward_level="exact")
    with pytest.raises(ValueError, match="hypotheses"):
        rg.radgraph_f1(["a"], [])


def test_rl_step_with_the_radgraph_f1_reward(tiny_radgraph_xl, tiny_model, tiny_processor, xray_images, tmp_path):
    """A GRPO step on the tiny Qwen2.5-VL with this reward, through the offline checkpoint written above."""
    from harness.grpo.trainer import PromptSet
    from tests.harness.grpo.test_trainer import _trainer

    refs = ["mild cardiomegaly . small left pleural effusion .", "the lungs are clear . no pneumothorax ."]
    prompts = PromptSet(["a", "b"], [[xray_images[0]], [xray_images[1]]], ["write"] * 2, refs)
    tr = _trainer(tiny_model, tiny_processor, tmp_path / "rl", prompts, regularizer="rer", reference="static",
                  reward="radgraph_f1")
    tr.reference.on_start(tr.store)
    row = tr.train_step()
    assert 0.0 <= row["reward_min"] <= row["reward_max"] <= 1.0
    assert row["loss"] == row["loss"]  # finite, not NaN


# ---------------------------------------------------------------------------------- preflight (harness/checks/needs.py)
def test_preflight_passes_with_the_cached_archive_or_the_model_directory_and_reads_only(radgraph_env):
    """The check a command runs before it decodes or trains: a cached archive counts (the scorer extracts it when it
    loads; preflight writes nothing), an extracted directory too; an empty weights.th is refused."""
    from harness.checks.needs import check_needs
    from harness.config import ConfigError, load_config

    tmp, _, cache_dir = radgraph_env
    rl_cfg = load_config(None, ["rl.val_rg_metric=radgraph"])
    eval_cfg = load_config(None, ["eval.radgraph=required"])
    with pytest.raises(ConfigError, match="'rl.val_rg_metric' = 'radgraph' needs RadGraph radgraph-xl") as info:
        check_needs(rl_cfg, "rl")
    assert str(cache_dir / "radgraph-xl") in str(info.value) and "radgraph-xl.tar.gz" in str(info.value)
    write_archive(cache_dir, tmp, "radgraph-xl")
    check_needs(rl_cfg, "rl")
    check_needs(eval_cfg, "eval")
    assert not (cache_dir / "radgraph-xl").exists()  # read only
    rg.check_radgraph_files("radgraph-xl")  # what the scorer's load does first: extracts it
    check_needs(rl_cfg, "rl")
    assert rg._SCORERS == {}  # nothing was loaded
    (cache_dir / "radgraph-xl" / "weights.th").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"weights.th is empty .*radgraph-xl.tar.gz"):
        check_needs(eval_cfg, "eval")
