"""The memory plan's activation model (harness/checks/memory_plan.py) against measured peaks at the 7B's widths
(issue 43).

A Qwen2.5-VL with the published 7B widths (benchmarks/qwen_shapes.py: text hidden 3584, MLP 18944, 28 heads / 4
key-value heads; vision hidden 1280, MLP 3420, 16 heads) but 1-2 decoder layers and 1-2 vision blocks, the
offline tokenizer's vocabulary (the embedding and lm_head are no part of the per-layer figures), bf16 base,
LoRA r = 32 on every linear as stage 2 adds it (harness.models.trainable), one SFT forward + backward of
harness.stages.lm_loss on phantom 336 px images and reports (harness.prompting.batching.encode_sft). Each setting runs
in a fresh process with MALLOC_MMAP_THRESHOLD_=65536 (every large tensor its own mapping, returned when freed, so the
resident set follows the live tensors); the step's peak is VmHWM (reset after the model is built) minus the RSS
before the step.

The per-layer cost is the difference of two settings that differ by one layer (or block): the model's weights,
the logits and everything else cancel. What is measured is the resident memory the forward pass leaves for the
backward (RSS after the loss minus before the step; the forward's temporaries are freed by then), against
`text_layer_bytes` / `vision_block_bytes` x the tokens (patches) of the batch, with the CPU's dropout mask (an
fp32 noise tensor: MASK_BYTES["cpu"]), plus autocast's bf16 copies of the extra layer's LoRA weights. The step's
peak (VmHWM) is printed too: on the CPU it may come at the end of the backward pass, when the gradients of the
fp32 merger (44.6M parameters at 7B) exist and the activations are gone.

    PYTHONPATH=$PWD python benchmarks/memory_plan_check.py            # the table of RESULTS.md (~5 CPU-min)
    PYTHONPATH=$PWD python benchmarks/memory_plan_check.py --child 2 1 1 0.1 0   # LAYERS BLOCKS BATCH DROPOUT GC

Never part of the test suite (tests/harness/checks/test_memory_plan.py runs a small measured case with a loose bound).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

IMAGE_PX = 336
TOLERANCE = 0.15  # |measured - predicted| / predicted per layer, the bound RESULTS.md states
# (text layers, vision blocks, batch, lora dropout, gradient checkpointing)
SETTINGS = [(1, 1, 1, 0.1, 0), (2, 1, 1, 0.1, 0), (1, 2, 1, 0.1, 0), (1, 1, 1, 0.0, 0), (2, 1, 1, 0.0, 0),
            (1, 1, 2, 0.1, 0), (2, 1, 2, 0.1, 0)]


def scaled(config, scale: int):
    """The config with every width / head count divided by `scale` (head sizes kept), for a quick small case."""
    t, v = config.text_config, config.vision_config
    t.hidden_size //= scale
    t.intermediate_size //= scale
    t.num_attention_heads //= scale
    t.num_key_value_heads = max(1, t.num_key_value_heads // scale)
    v.hidden_size //= scale
    v.intermediate_size //= scale
    v.num_heads //= scale
    v.out_hidden_size = t.hidden_size
    return config


def child(text_layers: int, vision_depth: int, batch: int, dropout: float, gc: bool, scale: int = 1) -> dict:
    import numpy as np
    import torch
    from bench_memory_3b import phantom
    from proc_status import status_kb
    from qwen_shapes import build_model, qwen_config

    from harness.config import PromptConfig
    from harness.data.phantom import sample_case, write_report
    from harness.models.tiny import build_processor, train_tokenizer
    from harness.models.trainable import add_lora, set_trainable
    from harness.prompting.batching import IGNORE, encode_sft
    from harness.stages.lm_loss import lm_loss
    from harness.stages.loading import enable_gradient_checkpointing

    torch.set_num_threads(1)
    rng = np.random.default_rng(1)
    tokenizer = train_tokenizer([write_report(sample_case(rng), rng) for _ in range(500)], vocab_size=1200)
    processor = build_processor(tokenizer, IMAGE_PX)
    config = qwen_config("7b", tokenizer, text_layers=text_layers, vision_depth=vision_depth)
    config.text_config.vocab_size = len(tokenizer)
    config = scaled(config, scale) if scale > 1 else config
    torch.manual_seed(0)
    model = build_model(config, torch.bfloat16)
    if gc:
        enable_gradient_checkpointing(model)
    model = add_lora(model, r=32, alpha=32, dropout=dropout)
    set_trainable(model, "sft")
    model.train()
    images, reports = phantom(batch, seed=0)
    enc = encode_sft(processor, images, [PromptConfig().instruction] * batch, reports, 100)
    before = status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux)
    loss, _ = lm_loss(model, enc)
    forward = status_kb("VmRSS")  # what the forward keeps for the backward (its temporaries are freed)
    loss.backward()
    peak = status_kb("VmHWM")
    lora_per_layer = sum(p.numel() for n, p in model.named_parameters()
                         if "lora_" in n and ".language_model.layers.0." in n)
    lora_per_block = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n and ".blocks.0." in n)
    return {"layers": text_layers, "blocks": vision_depth, "batch": batch, "dropout": dropout, "gc": bool(gc),
            "tokens": int(enc["input_ids"].numel()), "report_tokens": int((enc["labels"] != IGNORE).sum()),
            "patches": int(enc["pixel_values"].shape[0]), "forward_mib": (forward - before) / 1024,
            "step_peak_mib": (peak - before) / 1024,
            "lora_per_layer": lora_per_layer, "lora_per_block": lora_per_block, "config": config.to_dict()}


def run_child(setting, scale: int = 1) -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, __file__, "--child", *map(str, setting), "--scale", str(scale)],
                         capture_output=True, text=True, env=env)
    if out.returncode:
        sys.exit(f"setting {setting} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def predictions(row: dict) -> dict:
    """Per-layer / per-block bytes the plan predicts for the batch of `row` (CPU dropout mask)."""
    from transformers import Qwen2_5_VLConfig

    from harness.checks.memory_plan import MASK_BYTES, text_layer_bytes, vision_block_bytes

    config = Qwen2_5_VLConfig(**row["config"])
    drop = row["dropout"] > 0
    layer = text_layer_bytes(config, 32, drop, True, 2, MASK_BYTES["cpu"], repeat_kv=row["batch"] > 1)
    block = vision_block_bytes(config, 32, drop, True, 2, MASK_BYTES["cpu"])
    # plus autocast's bf16 copies of the layer's fp32 LoRA weights
    return {"layer_mib": (layer * row["tokens"] + 2 * row["lora_per_layer"]) / 2**20,
            "block_mib": (block * row["patches"] + 2 * row["lora_per_block"]) / 2**20}


def compare(rows: list[dict]) -> list[dict]:
    """Pairs that differ by one text layer or one vision block: measured vs predicted MiB."""
    out = []
    for a in rows:
        for b in rows:
            same = all(a[k] == b[k] for k in ("batch", "dropout", "gc"))
            if not same:
                continue
            if b["layers"] == a["layers"] + 1 and b["blocks"] == a["blocks"]:
                what, pred = "text layer", predictions(b)["layer_mib"]
            elif b["blocks"] == a["blocks"] + 1 and b["layers"] == a["layers"]:
                what, pred = "vision block", predictions(b)["block_mib"]
            else:
                continue
            measured = b["forward_mib"] - a["forward_mib"]
            out.append({"what": what, "batch": b["batch"], "dropout": b["dropout"], "tokens": b["tokens"],
                        "patches": b["patches"], "measured_mib": measured, "predicted_mib": pred,
                        "ratio": measured / pred})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=5, metavar=("LAYERS", "BLOCKS", "BATCH", "DROPOUT", "GC"))
    ap.add_argument("--scale", type=int, default=1, help="widths divided by this (the unit test's small case)")
    args = ap.parse_args()
    if args.child:
        layers, blocks, batch, dropout, gc = args.child
        print(json.dumps(child(int(layers), int(blocks), int(batch), float(dropout), bool(int(gc)), args.scale)))
        return
    rows = []
    for setting in SETTINGS:
        row = run_child(setting)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "config"}), flush=True)
    print("\n| extra | batch | LoRA dropout | tokens | patches | measured MiB | predicted MiB | measured / "
          "predicted |\n|---|---|---|---|---|---|---|---|")
    results = compare(rows)
    for r in results:
        print(f"| {r['what']} | {r['batch']} | {r['dropout']} | {r['tokens']} | {r['patches']} | "
              f"{r['measured_mib']:.1f} | {r['predicted_mib']:.1f} | {r['ratio']:.2f} |")
    bad = [r for r in results if abs(r["ratio"] - 1) > TOLERANCE]
    print(f"\n{len(results) - len(bad)} of {len(results)} within +-{TOLERANCE:.0%}")


if __name__ == "__main__":
    main()
