"""CheXbert and RadGraph give the same numbers on transformers 4.x and 5.x (rewards/hf_compat.py).

The expected values (tests/rewards/data/hf_compat_expected.json) were computed with transformers 4.57.6, whose
``encode_plus`` and slow ``BertTokenizer`` the packages were written against, by running this file with
``REGBENCH_WRITE_HF_COMPAT=<path>`` there. The stand-in weights are drawn here from a seeded generator, parameter
by parameter in name order, so they do not depend on how a transformers version initialises a model; a checksum
of them is stored with the values, so a change of weights is told apart from a change of computation.

What is compared, each through the packages' own entry points on the packages' on-disk layout:
- f1chexbert: the token ids of its ``tokenize`` (which calls ``encode_plus`` on a list of tokens), its
  ``F1CheXbert.get_label`` and ``F1CheXbert()(hyps, refs)`` (accuracy, per-example accuracy, both classification
  reports), and ``label_reports_chexbert``;
- radgraph: its tokenizer's ``tokenize`` / ``intra_word_tokenize`` (``encode_plus`` on a text, a pair and words),
  the annotations of ``F1RadGraph.radgraph``, ``F1RadGraph(...)(refs=, hyps=)`` and ``radgraph_f1``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path

import numpy as np
import pytest

from rewards import chexbert, hf_compat
from rewards import radgraph as rg
from tests.rewards.test_chexbert import offline_caches, tiny_bert_files, write_hub_repo  # noqa: F401 (fixture)
from tests.rewards.test_radgraph import ENCODER, build_model_files, radgraph_env  # noqa: F401 (fixture)

EXPECTED = Path(__file__).parent / "data" / "hf_compat_expected.json"
WRITE = os.environ.get("REGBENCH_WRITE_HF_COMPAT")

# Accents, upper case, CJK, punctuation runs, words outside the vocab, control characters and a report over 512
# word pieces (f1chexbert's truncation branch): the inputs where the Python and Rust BERT tokenizers could part.
LONG = " ".join(["mild cardiomegaly . small left pleural effusion ."] * 70)
HYPS = ["The heart size is NORMAL. There is no pleural effusion or pneumothorax.",
        "mild cardiomégaly ;; small left pleural effusion -- 3.5 cm",
        "",
        "lungs are clear 肺 . no acute osseous abnormality\t\n(see prior)",
        "right lower lobe opacity may represent pneumonia. ETT tube in place\x00.",
        LONG]
REFS = ["mild cardiomegaly. small left pleural effusion.",
        "mild cardiomegaly . small left pleural effusion .",
        "the lungs are clear .",
        "Lungs are clear. No acute osseous abnormality.",
        "  ",
        "no pleural effusion or pneumothorax . mild edema , consolidation , atelectasis , fracture ."]


def seeded_parameters(named, seed: int, head_std: float = 1.0) -> dict:
    """Every floating tensor replaced by a draw of a seeded generator, in name order (version-independent)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, value in sorted(named):
        if value.is_floating_point():
            std = head_std if "linear_heads" in name else 0.5
            value = torch.randn(value.shape, generator=generator, dtype=torch.float32) * std
        out[name] = value.detach().clone()
    return out


def checksum(state: dict) -> float:
    return float(sum(v.double().abs().sum() for v in state.values() if v.is_floating_point()))


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return None if np.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


TOKENIZER_KEYS = {"tokenizer_class", "token_ids", "special_tokens", "tokens", "intra_word"}
TRANSFORMERS_4 = int(importlib.metadata.version("transformers").split(".")[0]) < 5


def _check_or_write(section: str, observed: dict) -> None:
    import transformers

    observed = _jsonable(observed)
    if WRITE:
        path = Path(WRITE)
        data = json.loads(path.read_text()) if path.exists() else {}
        data["transformers"] = transformers.__version__
        data[section] = observed
        path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        pytest.skip(f"wrote {section} to {path}")
    expected = json.loads(EXPECTED.read_text())
    assert expected["transformers"] == "4.57.6"
    assert observed["weights_checksum"] == pytest.approx(expected[section]["weights_checksum"], rel=1e-12)
    # The stored outputs were computed on one CPU. Tokenization is exact everywhere; the models' outputs (labels
    # from an argmax over random stand-in weights) may round otherwise on another CPU's kernels, so they are
    # compared where the comparison is the point: under transformers 5.x, beside the 4.57 outputs of this machine.
    compare = [k for k in expected[section] if k != "weights_checksum" and (k in TOKENIZER_KEYS or not TRANSFORMERS_4)]
    for key in compare:
        assert observed[key] == expected[section][key], key


# ------------------------------------------------------------------------------------------ CheXbert
@pytest.fixture
def seeded_chexbert(offline_caches):  # noqa: F811
    import torch
    from f1chexbert.f1chexbert import bert_labeler

    hub, cache_dir = offline_caches
    write_hub_repo(hub, "bert-base-uncased", tiny_bert_files())
    state = seeded_parameters(bert_labeler(inference=True).named_parameters(), seed=11, head_std=3.0)
    cache_dir.mkdir(parents=True, exist_ok=True)
    torch.save({"model_state_dict": {f"module.{k}": v for k, v in state.items()}}, cache_dir / "chexbert.pth")
    return checksum(state)


def test_chexbert_matches_transformers_4(seeded_chexbert):
    import pandas as pd
    from f1chexbert.f1chexbert import tokenize

    labels = chexbert.label_reports_chexbert(HYPS + REFS, mode="paper", batch_size=4)  # installs the compat layer
    scorer = chexbert._MODELS["cpu"]
    from f1chexbert import F1CheXbert

    package = F1CheXbert(device="cpu")  # the package's own constructor and forward
    accuracy, per_example, report, report_5 = package(HYPS, REFS)
    observed = {
        "weights_checksum": seeded_chexbert,
        "tokenizer_class": type(scorer.tokenizer).__name__.replace("Legacy", ""),
        "token_ids": tokenize(pd.Series(HYPS + REFS, dtype=object), scorer.tokenizer),
        "get_label": [package.get_label(t.strip(), mode="classification") for t in HYPS + REFS],
        "labels": labels.tolist(),
        "accuracy": accuracy,
        "per_example_accuracy": per_example.tolist(),
        "classification_report": report,
        "classification_report_5": report_5,
    }
    assert len(observed["token_ids"][HYPS.index(LONG)]) == 512  # the truncation branch ran
    _check_or_write("chexbert", observed)


# ------------------------------------------------------------------------------------------ RadGraph
@pytest.fixture
def seeded_radgraph(radgraph_env):  # noqa: F811
    import torch

    _, _, cache_dir = radgraph_env
    folder = cache_dir / "radgraph-xl"
    build_model_files(folder, "radgraph-xl")  # the package's classes and layout; weights replaced below
    state = torch.load(folder / "weights.th", map_location="cpu", weights_only=True)
    state = seeded_parameters(state.items(), seed=12)
    torch.save(state, folder / "weights.th")
    return checksum(state)


def test_radgraph_matches_transformers_4(seeded_radgraph):
    from radgraph.allennlp.data.tokenizers.pretrained_transformer_tokenizer import PretrainedTransformerTokenizer

    hyps, refs = HYPS[:-1], REFS[:-1]  # without the long report: DyGIE's spans and pairs make it slow
    per_pair = rg.radgraph_f1(hyps, refs, reward_level="all", device="cpu")  # installs the compat layer
    scorer = rg._SCORERS[("radgraph-xl", "cpu")]
    texts = [t for t in hyps + refs if t.strip()]
    tokenizer = PretrainedTransformerTokenizer(ENCODER)  # the pair encode_plus runs in its constructor
    tokens = [[(t.text_id, t.idx, t.idx_end) for t in tokenizer.tokenize(text)] for text in texts]
    words = [[t.text_id for t in tokenizer.intra_word_tokenize(text.split())[0]] for text in texts]
    hyps = ["" if not h.strip() else h for h in hyps]
    refs = ["" if not r.strip() else r for r in refs]
    mean, pairs, _, _ = scorer(refs=refs, hyps=hyps)
    observed = {
        "weights_checksum": seeded_radgraph,
        "special_tokens": [[t.text_id for t in tokenizer.sequence_pair_start_tokens],
                           [t.text_id for t in tokenizer.sequence_pair_mid_tokens],
                           [t.text_id for t in tokenizer.sequence_pair_end_tokens]],
        "tokens": tokens,
        "intra_word": words,
        "annotations": scorer.radgraph(texts),
        "per_pair": per_pair.tolist(),
        "package_mean": list(mean),
        "package_per_pair": np.array(pairs).T.tolist(),
    }
    assert any(0 < s < 1 for s in np.ravel(per_pair)), "the stand-in should give scores strictly between 0 and 1"
    _check_or_write("radgraph", observed)


def test_install_is_a_no_op_where_encode_plus_exists():
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    before = PreTrainedTokenizerBase.__dict__.get("encode_plus")
    hf_compat.install()
    hf_compat.install()  # idempotent
    after = PreTrainedTokenizerBase.__dict__.get("encode_plus")
    if before is not None and before is not hf_compat.encode_plus:  # transformers 4.x
        assert after is before
    else:  # transformers 5.x
        assert after is hf_compat.encode_plus
