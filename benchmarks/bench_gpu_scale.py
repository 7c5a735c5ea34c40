"""3B- and 7B-shaped Qwen2.5-VL on one GPU: rollout and update tokens/s, peak memory, MFU (issue 14).

NOT RUN YET on a GPU (no device was lent to the session that wrote it); `--smoke` ran on the CPU. One command
of under 8 minutes on one H200 (141 GB): for each shape, full depth (3B: 36 layers / 32 vision blocks, 3.75 B
parameters, 7.5 GB in bf16; 7B: 28 layers / 32 blocks, 8.3 B, 16.6 GB; both fit with room for activations, so
no layer is cut), random weights in bfloat16 (the presets' dtype; LoRA r = alpha = 32 and the merger in fp32
as stage 3 trains them), sdpa attention, 336 px phantom chest X-rays (the presets' image size):

1. bf16 matmul rate: an 8192^3 product timed on the same GPU (the MFU denominator);
2. rollout tokens/s of the project's rollout call (harness.grpo.rollout.sample_rollout: encoding + decoding),
   backends "lean" (harness/sampling/lean_decode.py) and "hf" (transformers' generate), alternated, medians;
   8 prompts x G = 4 = 32 responses x 160 new tokens (min = max, so every row decodes 160);
3. one RL step (harness.grpo.trainer.GRPOTrainer.train_step; rer, static reference, bleu4 reward, lean
   rollouts, RLConfig's defaults otherwise: 8 prompts x G = 4, 80..160 new tokens): update tokens/s = tokens
   of the sequences (prompt + response) through the current policy's pass / (step time - rollout time);
   the old and reference passes run (LoRA B is moved off the snapshots first, as mid-run);
4. peak memory (torch.cuda.max_memory_allocated) of the rollout and of the step;
5. MFU = model FLOPs / time / the measured matmul rate. Model FLOPs count matrix products only: 2 x weights
   per token through the decoder layers, per logit position through lm_head, per patch through the vision
   blocks (per merged token through the merger); a backward with frozen weights costs one more forward
   (input gradients). Attention scores and the LoRA weight gradients are left out, so MFU is a lower bound.

The device machine runs Python 3.12 with transformers 5.x; regbench pins transformers 5.20.2, so carry its
wheels. Once, here, in the repository root (pure-Python / abi3 wheels):

    echo /.whl/ >> .git/info/exclude
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl transformers==5.20.2 tokenizers==0.23.3 huggingface_hub==2.4.0 peft==0.21.2

Then the device call (carry [".whl"], timeout_s 540):

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 || exit; \
        python3 benchmarks/bench_gpu_scale.py --out $OUT

Printed, and written to OUT/gpu_scale.json as each shape ends (merged into the file, atomically: an out-of-memory or
a kill at 7B keeps the 3B result; a shape that fails records its error, `out_of_memory` flagged, as its result, and
the script then exits 1). On the CPU, with tiny shapes (checks that the script runs):

    PYTHONPATH=$PWD python benchmarks/bench_gpu_scale.py --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def matmul_rate(device, dtype, n: int, repeats: int = 10) -> float:
    """Measured matmul rate (TFLOP/s) of an n x n x n product: 3 warm-ups, the mean of `repeats` timed."""
    import torch

    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync(device)
    return 2 * n ** 3 * repeats / (time.perf_counter() - t0) / 1e12


def sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def weights(model) -> dict:
    """Matrix-product weights by where they act: decoder layers (per token), lm_head (per logit position),
    vision blocks + patch embedding (per patch), merger (per merged token). LoRA matrices included."""
    from harness.models.trainable import unwrap

    hf = unwrap(model)
    out = {"text": 0, "lm_head": hf.lm_head.weight.numel(), "vision": 0, "merger": 0}
    for name, p in hf.named_parameters():
        if p.ndim < 2:
            continue
        if name.startswith("model.language_model.layers."):
            out["text"] += p.numel()
        elif name.startswith("model.visual.merger."):
            out["merger"] += p.numel()
        elif name.startswith("model.visual."):
            out["vision"] += p.numel()
    return out


def forward_flops(w: dict, tokens: int, logit_positions: int, patches: int) -> float:
    return 2.0 * (w["text"] * tokens + w["lm_head"] * logit_positions + w["vision"] * patches
                  + w["merger"] * patches / 4)


def build(shape: str, smoke: bool, device, dtype, image_px: int):
    import numpy as np
    import torch
    from qwen_shapes import build_model, parameter_count, qwen_config

    from harness.config import ModelConfig
    from harness.data.phantom import sample_case, write_report
    from harness.models.tiny import build_processor, tiny_model_config, train_tokenizer
    from harness.models.trainable import add_lora, set_trainable

    rng = np.random.default_rng(1)
    tokenizer = train_tokenizer([write_report(sample_case(rng), rng) for _ in range(500)], vocab_size=1200)
    processor = build_processor(tokenizer, image_px)
    torch.manual_seed(0)
    config = tiny_model_config(tokenizer, image_size=image_px) if smoke else qwen_config(shape, tokenizer)
    model = build_model(config, dtype, device)
    m = ModelConfig()  # stage 3's LoRA (REVA-PO Supp. D.2: r = alpha = 32; dropout is off in the RL loop)
    model = add_lora(model, r=m.lora_r, alpha=m.lora_alpha, dropout=m.lora_dropout)
    set_trainable(model, "rl")
    return model.to(device), processor, parameter_count(model)


def phantom_prompts(n: int, image_px: int):
    import numpy as np
    from PIL import Image

    from harness.config import PromptConfig
    from harness.data.phantom import draw_image, sample_case, write_report
    from harness.prompting.samples import PromptSet

    rng = np.random.default_rng(0)
    images, reports = [], []
    for _ in range(n):
        case = sample_case(rng)
        images.append([Image.fromarray(draw_image(case, rng, size=image_px)).convert("RGB")])
        reports.append(write_report(case, rng))
    return PromptSet([f"s{i}" for i in range(n)], images, [PromptConfig().instruction] * n, reports)


def peak_gb(device) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if torch.device(device).type == "cuda" else None


def reset_peak(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def bench_rollout(model, processor, prompts, rl, w, device, repeats: int) -> dict:
    import torch

    from harness.grpo.rollout import sample_rollout

    kw = dict(group_size=rl.group_size, temperature=rl.temperature, top_p=rl.top_p, top_k=rl.top_k,
              max_new_tokens=rl.max_new_tokens, min_new_tokens=rl.max_new_tokens,
              repetition_penalty=rl.repetition_penalty)
    n = len(prompts)
    out = {}
    times = {"lean": [], "hf": []}
    for r in range(repeats + 1):  # the first round warms up (kernels, allocator)
        for backend in ("lean", "hf") if r % 2 == 0 else ("hf", "lean"):
            torch.manual_seed(r)
            reset_peak(device)
            sync(device)
            t0 = time.perf_counter()
            ro = sample_rollout(model, processor, prompts.images, prompts.instructions, backend=backend, **kw)
            sync(device)
            if r:
                times[backend].append(time.perf_counter() - t0)
                out[f"{backend}_peak_gb"] = max(out.get(f"{backend}_peak_gb") or 0, peak_gb(device) or 0) or None
    rows, new = ro.sequences.shape[0], rl.max_new_tokens
    prompt_len = ro.prompt_mask.shape[1]
    patches = int(ro.image_grid_thw[:n * rl.group_size:rl.group_size].prod(dim=1).sum())  # one per prompt image
    flops = forward_flops(w, rows * (prompt_len + new), rows * new, patches)
    for backend, ts in times.items():
        med = statistics.median(ts)
        out[backend] = {"median_s": med, "new_tokens_per_s": rows * new / med, "times_s": ts,
                        "model_tflop": flops / 1e12, "achieved_tflops": flops / med / 1e12}
    out.update(rows=rows, prompt_tokens=prompt_len, new_tokens=new)
    return out


def bench_step(model, processor, prompts, rl, w, device, steps: int, tmp: Path) -> dict:
    import torch

    from harness.config import TrainConfig
    from harness.grpo.trainer import GRPOTrainer
    from harness.models.trainable import unwrap
    from harness.runs.records import RunDir

    tc = TrainConfig(epochs=1000, lr=3e-6, scheduler="constant", checkpoint_every=0)
    trainer = GRPOTrainer(model, processor, rl, tc, RunDir(tmp), prompts, None, seed=0, progress=False)
    trainer.reference.on_start(trainer.store)
    parts: dict = {}
    rollout, frozen = trainer._rollout, trainer._frozen_pass

    def timed_rollout(idx):
        sync(device)
        t0 = time.perf_counter()
        ro = rollout(idx)
        sync(device)
        parts["rollout_s"] = time.perf_counter() - t0
        parts["rollout"] = ro
        return ro

    def counted_frozen(*a, **k):
        parts["frozen_passes"] = parts.get("frozen_passes", 0) + 1
        return frozen(*a, **k)

    trainer._rollout, trainer._frozen_pass = timed_rollout, counted_frozen
    rows = []
    for i in range(steps + 1):  # the first step warms up
        trainer.store.capture("old")
        with torch.no_grad():  # live LoRA != old and reference snapshots: both frozen passes run (mid-run)
            for name, p in unwrap(model).named_parameters():
                if "lora_B" in name:
                    p.add_(1e-4)
        parts.clear()
        reset_peak(device)
        sync(device)
        t0 = time.perf_counter()
        trainer.train_step()
        sync(device)
        total = time.perf_counter() - t0
        ro = parts["rollout"]
        seq_tokens = int(ro.prompt_mask.sum()) + int(ro.response_mask.sum())
        resp_tokens = int(ro.response_mask.sum())
        n_rows, width = ro.response_mask.shape
        patches = int(ro.image_grid_thw.prod(dim=1).sum())  # the passes over sequences encode every row's image
        one = forward_flops(w, n_rows * ro.sequences.shape[1], n_rows * (width + 1), patches)
        update_s = total - parts["rollout_s"]
        flops = one * (parts.get("frozen_passes", 0) + 2)  # frozen passes + current forward + backward
        if i:
            rows.append({"step_s": total, "rollout_s": parts["rollout_s"], "update_s": update_s,
                         "sequence_tokens": seq_tokens, "response_tokens": resp_tokens,
                         "update_tokens_per_s": seq_tokens / update_s, "frozen_passes": parts.get("frozen_passes", 0),
                         "update_tflop": flops / 1e12, "update_achieved_tflops": flops / update_s / 1e12,
                         "step_peak_gb": peak_gb(device)})
    return {"steps": rows, "median_update_tokens_per_s": statistics.median(r["update_tokens_per_s"] for r in rows),
            "median_update_achieved_tflops": statistics.median(r["update_achieved_tflops"] for r in rows)}


def merge_json(path: Path, update: dict) -> dict:
    """Merge `update` into the JSON object in `path` (created if absent or unreadable) and write it atomically (a
    temporary file beside it, then os.replace): what was written before survives a crash, an OOM or a kill."""
    try:
        current = json.loads(path.read_text())
    except (OSError, ValueError):
        current = {}
    current = {**(current if isinstance(current, dict) else {}), **update}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(current, indent=1))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return current


def failure(error: BaseException) -> dict:
    """A shape's result when it failed: the error, and whether it was an out-of-memory."""
    text = str(error)
    oom = type(error).__name__ == "OutOfMemoryError" or "out of memory" in text.lower()
    return {"failed": True, "error": type(error).__name__, "out_of_memory": oom, "message": text[:4000]}


def run_shapes(shapes, run_shape, report: dict, out: Path | None, cleanup=lambda: None) -> dict:
    """`report[shape] = run_shape(shape)` for each shape, each result written into `out` (merge_json) as soon as
    it exists; a shape that fails (an out-of-memory at 7B) records its failure as its result and the next shape
    still runs, so no result is lost. `cleanup()` runs after each shape (frees the GPU's cache)."""
    if out is not None:
        merge_json(out, report)
    for shape in shapes:
        try:
            result = run_shape(shape)
        except Exception as e:  # noqa: BLE001 - recorded as the shape's result; the other shapes keep theirs
            traceback.print_exc()
            result = failure(e)
            print(f"{shape}: failed, {result['error']}{' (out of memory)' if result['out_of_memory'] else ''}",
                  flush=True)
        cleanup()
        report[shape] = result
        if out is not None:
            merge_json(out, {shape: result})
    return report


def measure_shape(shape: str, args, device, dtype, image_px: int, rl, rate: float) -> dict:
    import torch

    t0 = time.perf_counter()
    model, processor, n_params = build(shape, args.smoke, device, dtype, image_px)
    w = weights(model)
    prompts = phantom_prompts(rl.prompts_per_step, image_px)
    res = {"params": n_params, "weights": w, "build_s": time.perf_counter() - t0,
           "model_gb": torch.cuda.memory_allocated() / 2**30 if device == "cuda" else None}
    res["rollout"] = bench_rollout(model, processor, prompts, rl, w, device, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        res["rl_step"] = bench_step(model, processor, prompts, rl, w, device, args.steps, Path(tmp))
    for b in ("lean", "hf"):
        res["rollout"][b]["mfu"] = res["rollout"][b]["achieved_tflops"] / rate
    res["rl_step"]["update_mfu"] = res["rl_step"]["median_update_achieved_tflops"] / rate
    ro, st = res["rollout"], res["rl_step"]
    print(f"{shape}: {n_params / 1e9:.2f} B params, built in {res['build_s']:.0f} s; rollout "
          f"{ro['rows']} x {ro['new_tokens']} new tokens: lean {ro['lean']['new_tokens_per_s']:.0f} tok/s "
          f"(MFU {ro['lean']['mfu']:.3f}), hf {ro['hf']['new_tokens_per_s']:.0f} tok/s (MFU "
          f"{ro['hf']['mfu']:.3f}); RL step update {st['median_update_tokens_per_s']:.0f} tok/s (MFU "
          f"{st['update_mfu']:.3f}); peaks GB: rollout lean {ro.get('lean_peak_gb')}, hf {ro.get('hf_peak_gb')}, "
          f"step {st['steps'][-1]['step_peak_gb']}", flush=True)
    return res


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["3b", "7b"], choices=["3b", "7b"])
    parser.add_argument("--repeats", type=int, default=2, help="measured rollouts per backend")
    parser.add_argument("--steps", type=int, default=2, help="measured RL steps (after one warm-up step)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, 2 prompts x G 2 x 8 tokens")
    args = parser.parse_args(argv)

    import gc

    import torch
    import transformers

    from harness.config import RLConfig

    device, dtype, image_px = ("cpu", torch.float32, 112) if args.smoke else ("cuda", torch.bfloat16, 336)
    if not args.smoke and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: run with --smoke on a CPU")
    rl = RLConfig(regularizer="rer", reference="static", reward="bleu4", samples_every=0)
    if args.smoke:
        rl = RLConfig(regularizer="rer", reference="static", reward="bleu4", samples_every=0, prompts_per_step=2,
                      group_size=2, max_new_tokens=8, min_new_tokens=4)
        args.shapes, args.repeats, args.steps = ["3b"], 1, 1
    rate = matmul_rate(device, dtype, 512 if args.smoke else 8192)
    report = {"torch": torch.__version__, "transformers": transformers.__version__,
              "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (smoke: tiny shapes)",
              "matmul_tflops": rate, "prompts": rl.prompts_per_step, "group_size": rl.group_size,
              "max_new_tokens": rl.max_new_tokens, "image_px": image_px}
    print(f"{report['device']}: measured {'bf16' if device == 'cuda' else 'fp32'} matmul {rate:.1f} TFLOP/s",
          flush=True)

    def cleanup() -> None:  # the failed or finished shape's model and activations
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()

    out = Path(args.out, "gpu_scale.json") if args.out else None
    run_shapes(args.shapes, lambda shape: measure_shape(shape, args, device, dtype, image_px, rl, rate), report,
               out, cleanup)
    print(json.dumps(report, indent=1))
    return 1 if any(report[shape].get("failed") for shape in args.shapes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
