"""SortFreeTopP returns exactly what transformers' TopPLogitsWarper returns (harness/sampling/lean_topp.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import TopPLogitsWarper

from harness.sampling import lean_topp
from harness.sampling.lean_topp import SortFreeTopP


def _scores(rng: np.random.Generator, rows: int, vocab: int, kind: str) -> torch.Tensor:
    if kind == "logits":  # model-like logits after temperature, with suppressed tokens
        x = rng.normal(0, 2.5, (rows, vocab)).astype(np.float32) / np.float32(0.7)
        x[:, rng.choice(vocab, size=vocab // 10, replace=False)] = -np.inf
    elif kind == "ties":  # few distinct values: ties everywhere, also across the cut
        x = rng.integers(-4, 3, (rows, vocab)).astype(np.float32) * np.float32(0.3)
    else:  # peaked rows: one or two tokens carry nearly all the mass
        x = rng.normal(0, 1, (rows, vocab)).astype(np.float32)
        x[np.arange(rows), rng.integers(0, vocab, rows)] += np.float32(9.1)
    return torch.from_numpy(x)


@pytest.mark.parametrize("kind", ["logits", "ties", "peaked"])
def test_equals_the_transformers_warper(kind, monkeypatch):
    """Random rows, top_p and min_tokens_to_keep: bitwise equal outputs; the tie fallback is taken sometimes
    (kind 'ties') and the sort-free path the rest of the time."""
    calls = {"fallback": 0, "total": 0}
    original = TopPLogitsWarper.__call__

    def counting(self, input_ids, scores):
        calls["fallback"] += 1
        return original(self, input_ids, scores)

    monkeypatch.setattr(TopPLogitsWarper, "__call__", counting)
    rng = np.random.default_rng({"logits": 0, "ties": 1, "peaked": 2}[kind])
    for _ in range(60):
        rows, vocab = int(rng.integers(1, 17)), int(rng.integers(2, 900))
        top_p = float(rng.choice([0.05, 0.3, 0.6, 0.9, 0.95, 0.999]))
        keep = int(rng.choice([1, 1, 2, 5]))
        scores = _scores(rng, rows, vocab, kind)
        ids = torch.zeros(rows, 3, dtype=torch.long)
        want = original(TopPLogitsWarper(top_p, min_tokens_to_keep=keep), ids, scores.clone())
        got = SortFreeTopP(top_p, min_tokens_to_keep=keep)(ids, scores.clone())
        calls["total"] += 1
        assert torch.equal(got, want), (rows, vocab, top_p, keep)
        assert torch.isinf(got).sum() >= torch.isinf(scores).sum()
    if kind == "ties":
        assert 0 < calls["fallback"] < calls["total"]
    else:
        assert calls["fallback"] == 0


def test_tie_across_the_cut_is_left_to_torch_sort():
    """Three equal values where the cut falls between them: which copies go is torch.sort's order, so the
    warper decides; the result still equals it."""
    scores = torch.tensor([[0.1, 0.1, 0.1, 2.3]])
    ids = torch.zeros(1, 1, dtype=torch.long)
    for top_p in (0.7, 0.8, 0.9):
        want = TopPLogitsWarper(top_p)(ids, scores.clone())
        assert torch.equal(SortFreeTopP(top_p)(ids, scores.clone()), want)
    removed = torch.isinf(TopPLogitsWarper(0.8)(ids, scores.clone())[0, :3]).sum()
    assert 0 < int(removed) < 3  # the cut really splits the tie


def test_nan_and_non_cpu_inputs_go_to_the_warper(monkeypatch):
    scores = torch.tensor([[0.3, float("nan"), 1.7, -0.2]])
    ids = torch.zeros(1, 1, dtype=torch.long)
    want = TopPLogitsWarper(0.5)(ids, scores.clone())
    got = SortFreeTopP(0.5)(ids, scores.clone())
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))
    monkeypatch.setattr(lean_topp.np, "sort", lambda *a, **k: pytest.fail("sorted on the sort-free path"))
    half = torch.tensor([[0.3, 1.1, 1.7, -0.2]], dtype=torch.float16)
    assert torch.equal(SortFreeTopP(0.5)(ids, half), TopPLogitsWarper(0.5)(ids, half))
