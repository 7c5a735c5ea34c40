"""benchmarks/bench_vs_trl.py compares like for like by default (issue 46): TRL's training pass runs in train mode,
regbench's passes in eval mode (rl.policy_dropout false), so the two do the same work only when the policies'
LoRA dropout is 0; both sides, and TRL's reference, run the same attention (sdpa). Before issue 46 the policies
kept the model's 0.1 LoRA dropout, which only TRL's step drew. Both trainers are built here on the tiny model;
nothing is timed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    path = list(sys.path)
    spec = importlib.util.spec_from_file_location("bench_vs_trl", ROOT / "benchmarks" / "bench_vs_trl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # puts benchmarks/ on sys.path, as the script does
    yield module
    sys.path[:] = path


@pytest.fixture(scope="module")
def saved_tiny(bench, tmp_path_factory):  # bench: benchmarks/ on sys.path for bench_rl_step
    from bench_rl_step import build_model_and_processor, build_prompts

    from harness.config import ModelConfig

    torch.manual_seed(0)
    model, processor, _ = build_model_and_processor(0, corpus_size=200)
    folder = tmp_path_factory.mktemp("bench_vs_trl") / "tiny"
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder, processor, build_prompts(4, ModelConfig().image_size, 0)


def _build_both(bench, saved_tiny, tmp_path, argv):
    from transformers import TrainerCallback

    folder, processor, prompts = saved_tiny
    args = bench.parse_args(argv)
    rb = bench.regbench_trainer(folder, processor, prompts, args, tmp_path / "rb")
    trl = bench.trl_trainer(folder, processor, prompts, args, tmp_path / "trl", TrainerCallback())
    return args, rb, trl


def _dropout_ps(model) -> set[float]:
    return {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)}


def test_by_default_neither_side_draws_dropout_and_both_run_sdpa(bench, saved_tiny, tmp_path):
    args, rb, trl = _build_both(bench, saved_tiny, tmp_path, [])
    assert args.lora_dropout == 0 and args.attn == "sdpa"
    assert not rb.rl.policy_dropout  # regbench's passes: eval mode
    assert _dropout_ps(trl.model) <= {0.0} and _dropout_ps(rb.model) <= {0.0}  # TRL's pass: train mode, p 0
    assert {m.config._attn_implementation for m in (rb.model, trl.model, trl.ref_model)} == {"sdpa"}


def test_the_old_setting_is_a_flag_and_gives_trl_the_dropout(bench, saved_tiny, tmp_path):
    args, rb, trl = _build_both(bench, saved_tiny, tmp_path, ["--lora-dropout", "0.1", "--attn", "eager"])
    assert _dropout_ps(trl.model) == {0.1} and _dropout_ps(rb.model) == {0.1} and not rb.rl.policy_dropout
    assert {m.config._attn_implementation for m in (rb.model, trl.model, trl.ref_model)} == {"eager"}
    with pytest.raises(SystemExit):
        bench.parse_args(["--lora-dropout", "1"])
