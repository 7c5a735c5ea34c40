"""`regbench demo` / `make demo`: the tiny pipeline end to end on the synthetic set, then a results table.

data synth -> stage 0 (tiny base, cached) -> stage 1 warm-up -> classifier -> stage 2 SFT -> stage 3 RL
(one arm: constant KL, static reference) -> test evaluation of the base, warm-up, SFT and RL models.
Everything lands in one folder (default runs/demo); the table is also written to results.md there. The
settings are the embedded defaults of harness/config.py plus the small per-stage schedule below.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from harness.config import RunConfig, load_config
from harness.records import RunDir, atomic_write_text

COLUMNS = ("BLEU_1", "BLEU_2", "BLEU_3", "BLEU_4", "METEOR", "ROUGE_L", "findings_acc", "findings_exact",
           "ce_micro_f1")

# Per-stage schedules for the tiny preset (the paper's are in experiments/*-qwen2.5vl-7b.yaml).
DEMO_OVERRIDES = {
    "warmup": ["train.epochs=2", "train.batch_size=16", "train.lr=1e-3", "train.scheduler=cosine"],
    "classifier": ["classifier.epochs=60", "classifier.batch_size=32", "classifier.lr=1e-3"],
    "sft": ["train.epochs=3", "train.batch_size=16", "train.lr=1e-3", "train.scheduler=cosine",
            "model.lora_r=8", "model.lora_alpha=16"],
    # One RL arm: constant KL with a static reference (the classic GRPO + KL baseline), BLEU-4 reward.
    "rl": ["rl.regularizer=constant", "rl.reference=static", "rl.reward=bleu4", "train.max_steps=30",
           "train.lr=1e-4", "train.scheduler=constant", "train.weight_decay=0.001", "rl.prompts_per_step=8",
           "rl.group_size=4", "rl.max_new_tokens=80", "rl.min_new_tokens=0", "rl.old_sync_every=4",
           "rl.val_max_samples=60", "rl.samples_every=5"],
}


def stage_config(out: Path, stage: str, extra: list[str] | None = None) -> RunConfig:
    common = [f"out_dir={out / stage}", f"data.synth_dir={out / 'data'}"]
    return load_config(None, common + DEMO_OVERRIDES.get(stage, []) + list(extra or []))


def format_table(rows: list[tuple[str, dict]]) -> str:
    head = "| stage | " + " | ".join(COLUMNS) + " |"
    sep = "|" + "---|" * (len(COLUMNS) + 1)
    lines = [head, sep]
    for name, scores in rows:
        cells = [f"{scores[c]:.4f}" if isinstance(scores.get(c), int | float) else "n/a" for c in COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def reward_curve_summary(run: RunDir, window: int = 5) -> str:
    """Mean training reward (and KL) over the first and last `window` RL steps, plus the validation scores."""
    steps = run.steps()
    if not steps:
        return "RL: no steps logged"

    def mean(rows, key):
        vals = [r[key] for r in rows if isinstance(r.get(key), int | float)]
        return sum(vals) / len(vals) if vals else float("nan")

    first, last = steps[:window], steps[-window:]
    vals = [e for e in run.evals() if "val_score" in e]
    val = (f"; validation score {vals[0]['val_score']:.4f} (step {vals[0]['step']}) -> {vals[-1]['val_score']:.4f} "
           f"(step {vals[-1]['step']})") if len(vals) >= 2 else ""
    return (f"RL reward curve ({len(steps)} steps, BLEU-4 reward): mean reward {mean(first, 'reward_mean'):.4f} "
            f"(first {len(first)}) -> {mean(last, 'reward_mean'):.4f} (last {len(last)}); mean KL "
            f"{mean(first, 'kl_mean'):.5f} -> {mean(last, 'kl_mean'):.5f}{val}")


def run_demo(out: Path, progress: bool = True) -> str:
    from harness.stages.classifier import run_classifier_training
    from harness.stages.evaluate import evaluate_model
    from harness.stages.loading import base_path
    from harness.stages.rl import run_rl
    from harness.stages.sft import run_sft
    from harness.stages.warmup import run_warmup

    t0 = time.time()
    out = Path(out)
    timings = {}

    def step(name, fn):
        print(f"[demo] {name} ...", flush=True)
        t = time.time()
        result = fn()
        timings[name] = time.time() - t
        print(f"[demo] {name} done in {timings[name]:.0f}s", flush=True)
        return result

    base = step("stage 0: tiny base (cached after the first run)",
                lambda: base_path(stage_config(out, "warmup"), progress))
    warm = step("stage 1: warm-up", lambda: run_warmup(stage_config(out, "warmup"), progress))
    clf = step("classifier", lambda: run_classifier_training(stage_config(out, "classifier"), progress))
    sft = step("stage 2: classifier-guided SFT",
               lambda: run_sft(stage_config(out, "sft", [f"init_from={warm}", f"classifier.dir={clf}"]), progress))
    rl = step("stage 3: RL (constant KL, static reference)",
              lambda: run_rl(stage_config(out, "rl", [f"init_from={sft}"]), progress))
    eval_run = RunDir(out / "eval")
    rows = []
    for name, model_dir in (("base (stage 0)", base), ("warm-up (stage 1)", warm), ("SFT (stage 2)", sft),
                            ("RL (stage 3)", rl)):
        cfg = dataclasses.replace(stage_config(out, "eval"))
        scores = step(f"evaluate {name}", lambda c=cfg, m=model_dir, n=name: evaluate_model(
            c, m, "test", run=eval_run, label=n.split()[0], progress=progress))
        rows.append((name, scores))
    table = format_table(rows)
    curve = reward_curve_summary(RunDir(out / "rl"))
    total = time.time() - t0
    text = (f"# regbench demo (tiny preset, synthetic test split, n = {rows[0][1]['n']})\n\n{table}\n\n"
            f"{curve}\n\nwall time: {total:.0f}s\n")
    atomic_write_text(out / "results.md", text)
    print()
    print(table)
    print()
    print(curve)
    print(f"\nwall time {total:.0f}s; results in {out / 'results.md'}; run records under {out}/")
    return table
