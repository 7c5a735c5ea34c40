"""Peak memory of one SFT step and one RL step of a 3B-wide Qwen2.5-VL on the CPU, against micro-batch size (issue 14).

The model: Qwen2_5_VLForConditionalGeneration with the published Qwen2.5-VL-3B widths and vocabulary (151,936;
benchmarks/qwen_shapes.py cites the config) but 2 LLM layers and 2 vision blocks, random weights, in the 3B
preset's dtype (bfloat16 base, fp32 LoRA + merger: harness/models/precision.py) with sdpa attention, 336 px
images (the preset's size). Each setting runs in a fresh subprocess (peak RSS = the child's VmHWM, reset with
/proc/self/clear_refs after the model is built, so the figure is the step's own high-water mark, model
included), through the project's code paths:

- sft: LoRA as stage 2 adds it (harness.models.trainable.add_lora with ModelConfig's r / alpha / dropout),
  set_trainable("sft"), and one optimizer step of harness.stages.lm_train.train_lm (train.batch_size = the
  global batch, train.micro_batch_size = the micro-batch), reports of up to 100 tokens (PromptConfig);
- rl: the same LoRA, set_trainable("rl"), one GRPOTrainer.train_step (regularizer rer with a static reference:
  old and reference passes both run, since the LoRA weights are moved off the snapshots first; reward bleu4,
  lean decoding, 1-2 prompts x G = 2 responses of exactly 32 new tokens, rl.micro_batch_size = the micro-batch
  in responses);
- gc: model.gradient_checkpointing as the stages switch it on (harness.stages.loading).

    PYTHONPATH=$PWD python benchmarks/bench_memory_3b.py --jobs 2         # the table of RESULTS.md (~12 CPU-min)
    PYTHONPATH=$PWD python benchmarks/bench_memory_3b.py --only sft      # one stage
    PYTHONPATH=$PWD python benchmarks/bench_memory_3b.py --child sft 4 2 0   # one setting: global micro gc

Never part of the test suite. Expect: peak flat in the global batch at a fixed micro-batch, growing with the
micro-batch, and lower with gradient checkpointing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

IMAGE_PX = 336  # the 3B / 7B presets' image size (harness/config/presets.py)
# (stage, global batch, micro-batch, gradient checkpointing). SFT counts samples, RL responses (prompts x G).
SETTINGS = [
    ("sft", 4, 1, False), ("sft", 4, 2, False), ("sft", 4, 4, False), ("sft", 2, 2, False), ("sft", 8, 2, False),
    ("sft", 4, 4, True),
    ("rl", 4, 1, False), ("rl", 4, 2, False), ("rl", 4, 4, False), ("rl", 2, 1, False), ("rl", 8, 2, False),
    ("rl", 4, 4, True),
]
GROUP = 2  # candidates per prompt in the RL setting (the smallest group; keeps the run short on one core)
NEW_TOKENS = 32  # RL: every response decodes exactly this many tokens


def phantom(n: int, seed: int):
    """n synthetic chest X-rays (336 px, RGB) and their reports (harness.data.phantom)."""
    import numpy as np
    from PIL import Image

    from harness.data.phantom import draw_image, sample_case, write_report

    rng = np.random.default_rng(seed)
    images, reports = [], []
    for _ in range(n):
        case = sample_case(rng)
        images.append([Image.fromarray(draw_image(case, rng, size=IMAGE_PX)).convert("RGB")])
        reports.append(write_report(case, rng))
    return images, reports


def build(gc: bool, stage: str):
    import numpy as np
    import torch
    from qwen_shapes import build_model, parameter_count, qwen_config

    from harness.config import ModelConfig
    from harness.data.phantom import sample_case, write_report
    from harness.models.tiny import build_processor, train_tokenizer
    from harness.models.trainable import add_lora, set_trainable
    from harness.stages.loading import enable_gradient_checkpointing

    rng = np.random.default_rng(1)
    tokenizer = train_tokenizer([write_report(sample_case(rng), rng) for _ in range(500)], vocab_size=1200)
    processor = build_processor(tokenizer, IMAGE_PX)
    torch.manual_seed(0)
    model = build_model(qwen_config("3b", tokenizer, text_layers=2, vision_depth=2), torch.bfloat16)
    if gc:
        enable_gradient_checkpointing(model)
    m = ModelConfig()  # stage 2/3 LoRA: r = alpha = 32, dropout 0.1 (REVA-PO Supp. D.2)
    model = add_lora(model, r=m.lora_r, alpha=m.lora_alpha, dropout=m.lora_dropout)
    set_trainable(model, stage)
    return model, processor, parameter_count(model)


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux)


def prepare(stage: str, global_batch: int, micro: int, gc: bool, out: Path):
    """The model and one step of `stage` ready to run: (step function, trainable + frozen parameter count).
    `out` holds the step's run records."""
    import torch

    from harness.config import PromptConfig, RLConfig, TrainConfig
    from harness.runs.records import RunDir

    model, processor, n_params = build(gc, stage)
    n_samples = global_batch if stage == "sft" else global_batch // GROUP
    images, reports = phantom(n_samples, seed=0)
    instruction = PromptConfig().instruction
    run = RunDir(out)
    if stage == "sft":
        from harness.stages.lm_train import LMData, train_lm

        data = LMData(images, [instruction] * n_samples, reports)
        cfg = TrainConfig(epochs=1, batch_size=global_batch, micro_batch_size=micro, lr=1e-4, max_steps=1,
                          checkpoint_every=0, scheduler="constant")
        return (lambda: train_lm(model, processor, data, None, cfg, run, seed=0,
                                 max_report_tokens=PromptConfig().max_report_tokens, progress=False)), n_params
    from harness.grpo.trainer import GRPOTrainer
    from harness.models.trainable import unwrap
    from harness.prompting.samples import PromptSet

    prompts = PromptSet([f"s{i}" for i in range(n_samples)], images, [instruction] * n_samples, reports)
    rl = RLConfig(regularizer="rer", reference="static", reward="bleu4", group_size=GROUP,
                  prompts_per_step=n_samples, micro_batch_size=micro, max_new_tokens=NEW_TOKENS,
                  min_new_tokens=NEW_TOKENS, samples_every=0)
    tc = TrainConfig(epochs=1, lr=3e-6, scheduler="constant", checkpoint_every=0)
    trainer = GRPOTrainer(model, processor, rl, tc, run, prompts, None, seed=0, progress=False)
    trainer.reference.on_start(trainer.store)
    trainer.store.capture("old")
    with torch.no_grad():  # live LoRA != snapshots, so the old and reference passes both run (mid-run)
        for name, p in unwrap(model).named_parameters():
            if "lora_B" in name:
                p.add_(1e-3)
    return trainer.train_step, n_params


def child(stage: str, global_batch: int, micro: int, gc: bool) -> dict:
    import torch
    from proc_status import status_kb

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as out:
        step, n_params = prepare(stage, global_batch, micro, gc, Path(out))
        rss_before = status_kb("VmRSS")
        reset_peak()
        t0 = time.perf_counter()
        step()
        step_s = time.perf_counter() - t0
        tokens = sft_step_tokens(Path(out)) if stage == "sft" else None
    peak = status_kb("VmHWM")
    cpu_s = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    return {"stage": stage, "global": global_batch, "micro": micro, "gc": gc, "params": n_params,
            "rss_before_mb": rss_before / 1024, "peak_rss_mb": peak / 1024,
            "step_peak_minus_before_mb": (peak - rss_before) / 1024, "step_s": step_s, "child_cpu_s": cpu_s,
            "report_tokens": tokens}


def sft_step_tokens(out: Path) -> int:
    """Report tokens of the SFT step (its steps.jsonl record)."""
    from harness.runs.records import RunDir

    return RunDir(out).steps()[-1]["tokens"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["sft", "rl"])
    ap.add_argument("--child", nargs=4, metavar=("STAGE", "GLOBAL", "MICRO", "GC"))
    ap.add_argument("--settings", help="comma-separated STAGE:GLOBAL:MICRO:GC settings instead of the table's, "
                    "e.g. sft:2:2:0,sft:4:2:0")
    ap.add_argument("--jobs", type=int, default=1, help="settings run at the same time (each its own process; "
                    "the peak RSS of each is its own, so only the wall time changes)")
    args = ap.parse_args()
    if args.child:
        stage, g, m, gc = args.child
        print(json.dumps(child(stage, int(g), int(m), bool(int(gc)))))
        return
    t0 = time.time()
    settings = SETTINGS
    if args.settings:
        settings = []
        for item in args.settings.split(","):
            parts = item.split(":")
            if len(parts) != 4 or parts[0] not in ("sft", "rl") or not all(p.isdigit() for p in parts[1:]):
                ap.error(f"--settings: '{item}' is not STAGE:GLOBAL:MICRO:GC (e.g. sft:4:2:0)")
            settings.append((parts[0], int(parts[1]), int(parts[2]), bool(int(parts[3]))))
    todo = [s for s in settings if not args.only or s[0] == args.only]

    def run(setting) -> dict:
        stage, g, m, gc = setting
        out = subprocess.run([sys.executable, __file__, "--child", stage, str(g), str(m), str(int(gc))],
                             capture_output=True, text=True)
        if out.returncode:
            sys.exit(f"setting {stage} {g} {m} {gc} failed:\n{out.stderr[-3000:]}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps(row), flush=True)
        return row

    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(run, todo))
    # glibc keeps freed heap memory in the process, so RSS also counts memory no tensor holds any more; with
    # MALLOC_MMAP_THRESHOLD_ set (e.g. 65536), every large tensor is its own mapping, returned when freed, and the
    # peak RSS follows the live tensors (RESULTS.md reports both).
    print(f"\nMALLOC_MMAP_THRESHOLD_={os.environ.get('MALLOC_MMAP_THRESHOLD_', 'unset (glibc default)')}")
    print(f"{len(rows)} settings in {time.time() - t0:.0f} s wall ({args.jobs} at a time), "
          f"{sum(r['child_cpu_s'] for r in rows):.0f} s CPU; peak RSS of the step (model included), MB")
    print("| stage | global batch | micro-batch | grad. checkpointing | RSS before step | peak RSS "
          "| step peak - before | step wall (s) | child CPU (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        unit = "samples" if r["stage"] == "sft" else "responses"
        print(f"| {r['stage']} | {r['global']} {unit} | {r['micro']} | {'on' if r['gc'] else 'off'} | "
              f"{r['rss_before_mb']:,.0f} | {r['peak_rss_mb']:,.0f} | {r['step_peak_minus_before_mb']:,.0f} | "
              f"{r['step_s']:.1f} | {r['child_cpu_s']:.0f} |")


if __name__ == "__main__":
    main()
