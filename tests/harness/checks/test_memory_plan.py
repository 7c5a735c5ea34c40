"""The per-GPU memory plan (harness/checks/memory_plan.py) and `regbench doctor PRESET` (issue 43).

Parameter counts: the 7B built on the meta device through the project's own code, against counts written out by
hand from the published widths. The plan's arithmetic: each term from those counts. The activation model: one
measured case at a quarter of the 7B's widths (benchmarks/memory_plan_check.py --scale 4), a loose bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.checks.memory_plan import GIB, memory_plan, model_config, parameter_counts, text_layer_bytes
from harness.cli import main
from harness.config import load_config

ROOT = Path(__file__).resolve().parents[3]
PRESET_7B = ROOT / "experiments" / "presets" / "mimic-qwen2.5vl-7b.yaml"


def _lora_by_hand(r: int) -> tuple[int, int]:
    """LoRA parameters of the 7B's decoder layers and vision blocks: r x (in + out) per adapted linear."""
    h, kv, i, layers = 3584, 4 * 128, 18944, 28
    hv, iv, blocks = 1280, 3420, 32
    text = layers * r * ((h + h) + 2 * (h + kv) + (h + h) + 2 * (h + i) + (i + h))
    vision = blocks * r * ((hv + 3 * hv) + (hv + hv) + 2 * (hv + iv) + (iv + hv))
    return text, vision


def test_7b_parameter_counts_on_the_meta_device_are_exact():
    cfg = load_config(PRESET_7B, stage="sft")
    config = model_config(cfg)
    merger = 1280 + (5120 * 5120 + 5120) + (5120 * 3584 + 3584)  # ln_q, mlp.0, mlp.2 (4 x 1280 merged in)
    text, vision = _lora_by_hand(32)
    warm = parameter_counts(config, "warmup", 32)
    sft = parameter_counts(config, "sft", 32)
    assert warm["trained"] == merger and warm["lora"] == 0
    assert warm["total"] == 8_292_166_656  # Qwen2.5-VL-7B-Instruct's model card: 8.29B
    assert sft["lora"] == text + vision
    assert sft["trained"] == merger + text + vision
    assert sft["total"] == warm["total"] + text + vision


def test_the_plan_adds_its_terms_from_the_counts():
    overrides = ["train.deepspeed=experiments/deepspeed/zero1.json", "rl.micro_batch_size=2",
                 "model.gradient_checkpointing=false"]
    cfg = load_config(PRESET_7B, overrides, stage="rl")
    counts = parameter_counts(model_config(cfg), "rl", 32)
    t, f = counts["trained"], counts["total"] - counts["trained"]
    plan = memory_plan(cfg, "rl", 8)
    assert plan["weights"] == pytest.approx((2 * f + 4 * t) / GIB)
    assert plan["grads"] == pytest.approx(4 * t / GIB)           # ZeRO-1: full fp32 grads, no DDP buckets
    assert plan["optimizer"] == pytest.approx(8 * t / 8 / GIB)   # AdamW moments, a 1/8 share each
    assert plan["snapshots"] == pytest.approx(4 * 4 * t / GIB)   # old, ref, best, start
    assert (plan["batch"], plan["patches"], plan["prompt"], plan["report"]) == (2, 576, 144 + 64, 160)
    layer = text_layer_bytes(model_config(cfg), 32, True, True)  # bf16 autocast, CUDA's bool dropout mask
    h, i = 3584, 18944
    assert layer == 2 * 4 * h + 2 * (4 * h + 3 * i) + 4 * 28 + sum(2 * (n + 32) + n for n in [h] * 6 + [i])
    ddp = memory_plan(load_config(PRESET_7B, ["train.deepspeed=", "rl.micro_batch_size=2"], stage="rl"), "rl", 8)
    assert ddp["optimizer"] == pytest.approx(8 * t / GIB) and ddp["grads"] == pytest.approx(8 * t / GIB)
    assert ddp["activations"] == pytest.approx(plan["activations"])
    # Gradient checkpointing keeps each layer's input and one layer's saved tensors: far less.
    gc = memory_plan(load_config(PRESET_7B, [*overrides[:2], "model.gradient_checkpointing=true"], stage="rl"),
                     "rl", 8)
    assert gc["activations"] < plan["activations"] / 5
    # A micro-batch of 1 about halves the activations of 2 (one sample, no repeated key/value heads; autocast's
    # weight copies stay).
    one = memory_plan(load_config(PRESET_7B, [overrides[0], "rl.micro_batch_size=1"], stage="rl"), "rl", 8)
    assert 0.45 < one["activations"] / plan["activations"] < 0.55


@pytest.mark.parametrize("preset", ["mimic-qwen2.5vl-7b", "mimic-qwen2.5vl-3b", "iuxray-qwen2.5vl-7b",
                                    "iuxray-qwen2.5vl-3b"])
def test_doctor_prints_a_memory_plan_that_fits_80_gb_for_the_paper_presets(preset, capsys):
    path = ROOT / "experiments" / "presets" / f"{preset}.yaml"
    rc = main(["doctor", str(path), "--json", "--gpu-mem-gib", "79.1"])
    plan = json.loads(capsys.readouterr().out)["memory_plan"]
    assert set(plan["stages"]) == {"warmup", "sft", "rl", "classifier", "eval"}
    model_stages = {s: p for s, p in plan["stages"].items() if s != "classifier"}
    assert all(p["fits"] for p in model_stages.values()), {s: p["total"] for s, p in model_stages.items()}
    assert plan["stages"]["rl"]["zero"] == 1 and plan["stages"]["rl"]["world_size"] in (4, 8)  # resources.rl.gpus
    assert rc == (0 if plan["stages"]["classifier"]["fits"] else 1)


def test_doctor_refuses_a_plan_on_a_small_gpu(capsys):
    rc = main(["doctor", str(PRESET_7B), "--gpu-mem-gib", "32"])
    out = capsys.readouterr().out
    assert rc == 1 and "Memory plan per GPU" in out and "NO" in out.split("Memory plan per GPU")[1]


@pytest.mark.slow  # ~100 s on 2 loaded cores (2026-12-04): two fresh processes, each one SFT step
def test_a_measured_step_at_a_quarter_width_is_near_the_model(tmp_path):
    """One more decoder layer costs what text_layer_bytes says, within a loose bound (RSS on a loaded CPU)."""
    script = ROOT / "benchmarks" / "memory_plan_check.py"
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    rows = []
    for layers in (1, 2):
        out = subprocess.run([sys.executable, str(script), "--child", str(layers), "1", "2", "0.1", "0", "--scale",
                              "4"], capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    sys.path.insert(0, str(script.parent))
    try:
        from memory_plan_check import compare
    finally:
        sys.path.remove(str(script.parent))
    (pair,) = compare(rows)
    assert pair["what"] == "text layer" and 0.5 < pair["ratio"] < 1.5, pair


def test_doctor_takes_the_tiny_experiments_preset_without_a_plan_and_checks_its_flags(capsys):
    """Before issue 43 `regbench doctor experiments/presets/tiny.yaml` was refused (an experiments preset)."""
    assert main(["doctor", str(ROOT / "experiments" / "presets" / "tiny.yaml")]) == 0
    out = capsys.readouterr().out
    assert "Presets that can run here" in out and "Memory plan" not in out
    assert main(["doctor", str(PRESET_7B), "--world-size", "0"]) == 2
    assert "doctor --world-size must be > 0, got 0" in capsys.readouterr().err


def test_classifier_micro_batches_hold_the_mimic_batch_on_one_gpu():
    """The MIMIC-CXR presets' classifier batch of 1,600 in passes of 200: the plan counts one pass's activations,
    and the stage hands the micro-batch to the trainer (it accumulates up to the batch)."""
    from harness.checks.memory_plan import memory_plan
    from harness.config import load_config
    from harness.stages.classifier import classifier_config

    cfg = load_config("experiments/presets/mimic-qwen2.5vl-7b.yaml", stage="classifier")
    assert (cfg.classifier.batch_size, cfg.classifier.micro_batch_size) == (1600, 200)
    whole = load_config("experiments/presets/mimic-qwen2.5vl-7b.yaml", ["classifier.micro_batch_size=null"],
                        stage="classifier")
    planned, one_pass = memory_plan(cfg, "classifier", 1), memory_plan(whole, "classifier", 1)
    assert planned["batch"] == 200 and one_pass["batch"] == 1600
    assert planned["activations"] * 8 == pytest.approx(one_pass["activations"])
    assert planned["total"] < 0.9 * 79.1 < one_pass["total"]
    assert classifier_config(cfg).micro_batch_size == 200 and classifier_config(whole).micro_batch_size is None
