"""Prepared GPU check for issues 15 and 43 (NOT RUN YET: no GPU with vLLM was lent to the sessions that wrote it).

One command, under 8 minutes on one H200: (1) the CUDA token-equality tests of the lean loop
(tests/harness/sampling/test_lean_decode.py -k cuda), (2) tokens/s of transformers' `generate`, the lean loop and, where
vllm imports, the vLLM backend (harness/sampling/vllm_rollout.py) for a Qwen2.5-VL of the 3B's shape with random weights
(text 2048 x 36 layers, 16 heads / 2 KV heads, MLP 11008, vocabulary 151936; vision 1280 x 32 blocks), bf16,
sdpa, 64 prompts x 160 new tokens (min = max, so every row decodes 160), images 224 px, prompt i with 1 + i % 2
views (`--max-views`), T 0.7 / top-p 0.9 / repetition penalty 1.03. The policy is the base with LoRA (r = 64) and
the merger perturbed (as after RL steps); the vLLM engine starts from the saved plain base, so its first decoding
syncs the policy's weights. Repeats alternate the backends; the median is printed.

The vLLM leg (issue 43) runs the backend as a stage does (`start_engine` with the prompts, sleep mode level 1,
generation.vllm_gpu_memory_utilization `--vllm-memory`) and shows what only a GPU can:
- the engine starts at all under the external launcher on this torch / vLLM (world of one), and how long it takes
  (`vllm.start_s`: load, memory profile, compilation, CUDA graphs);
- the weights reach it: its greedy tokens against the lean loop's on the same (merged) weights
  (`vllm.greedy_vs_lean`: share of rows equal, of first tokens equal, mean common prefix), and against the lean
  loop's on the base before LoRA (`vllm.greedy_vs_base`: must be far lower, else the sync did nothing);
- the time of a full sync of the merged model through the workers' in-place reload (`vllm.sync_s`) and of
  sleep / wake (`vllm.sleep_s`, `vllm.wake_s`);
- GPU memory (allocated / reserved by torch, free on the device) before the start, asleep, awake, asleep again,
  and the process's host memory (the level-1 sleep keeps the weights there): `vllm.memory`;
- multi-image prompts through vLLM's processor (the views per prompt of `vllm.spec.max_images`);
- a second engine in the same process after the first is dropped (what an experiment run without a launcher does
  between stages): `vllm.restart_s` and its greedy tokens against the first engine's (`--no-restart` skips it);
- sampled tokens/s of the engine next to generate and lean (`vllm` in the timings).
Nothing of this can run on a CPU: vLLM's engine needs CUDA (the CPU tests use a stand-in of its declared API,
tests/harness/sampling/test_vllm_rollout.py; the declared API is checked against an installed vLLM by
tests/harness/sampling/test_vllm_contract.py).

The lent machines run their own image (torch 2.11, transformers 5.x, no vllm) and reach no registry. regbench
pins transformers 5.20.2, so carry its wheels (prepared here):

    .venv/bin/pip download --no-deps -d wheels transformers==5.20.2 tokenizers==0.23.3 \
        huggingface_hub==2.4.0
    # device command (wheels/ travels with the working tree; add it to carry if it is git-ignored):
    pip install -q --no-deps --target /tmp/tf wheels/*.whl && export PYTHONPATH=/tmp/tf:$PWD && \
        python3 -m pytest -q -p no:cacheprovider tests/harness/sampling/test_lean_decode.py -k cuda && \
        python3 benchmarks/device_rollout_check.py --out $OUT

vLLM cannot be carried (its wheel and CUDA dependencies exceed what a run may carry), so on this workplace's
machines the vLLM leg prints "skipped: vllm not importable"; on a GPU machine with `regbench[vllm]` installed (vLLM
0.33: torch 2.14.0, transformers 5.16-5.20, see pyproject.toml) it runs. Printed and written to
OUT/device_rollout.json: per backend the median seconds per batch and new tokens/s, for lean vs generate whether
the greedy tokens are equal (on CUDA the lean loop keeps finished rows, see harness/sampling/lean_decode.py), and
the vLLM leg above (`vllm_leg`). Read: `greedy_vs_lean.first_token_equal` near 1 and far above
`greedy_vs_base.first_token_equal` (random weights have near-tied logits, so whole rows may part later in bf16).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def model_3b_shape(tokenizer):
    """Qwen2.5-VL-3B's shape (its published config) with the tiny tokenizer's special-token ids."""
    from transformers import Qwen2_5_VLConfig

    from harness.models.tiny import tiny_model_config

    ids = tiny_model_config(tokenizer).to_dict()
    return Qwen2_5_VLConfig(
        text_config=dict(vocab_size=151936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                         num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=4096,
                         rope_theta=1000000.0, rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]},
                         rms_norm_eps=1e-6, tie_word_embeddings=True, eos_token_id=ids["eos_token_id"],
                         pad_token_id=ids["pad_token_id"], bos_token_id=ids["pad_token_id"]),
        vision_config=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=2048,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                           fullatt_block_indexes=[7, 15, 23, 31]),
        image_token_id=ids["image_token_id"], video_token_id=ids["video_token_id"],
        vision_start_token_id=ids["vision_start_token_id"], vision_end_token_id=ids["vision_end_token_id"],
        tie_word_embeddings=True, eos_token_id=ids["eos_token_id"], pad_token_id=ids["pad_token_id"])


def agreement(a, b) -> dict:
    """How far two [rows, L] token tensors agree: rows equal, first tokens equal, mean common prefix (share of L)."""
    L = max(a.shape[1], b.shape[1])
    a = torch_pad(a, L)
    b = torch_pad(b, L)
    same = (a == b).int()
    prefix = same.cumprod(dim=1).sum(dim=1).float()
    return {"rows_equal": float(same.all(dim=1).float().mean()), "first_token_equal": float(same[:, 0].float().mean()),
            "mean_common_prefix": float((prefix / L).mean())}


def torch_pad(t, L: int, value: int = -1):
    import torch

    return torch.cat([t, torch.full((t.shape[0], L - t.shape[1]), value, dtype=t.dtype, device=t.device)], dim=1)


def memory() -> dict:
    """GPU memory torch holds and the device's free memory (GiB), and this process's resident host memory now."""
    import torch

    free, total = torch.cuda.mem_get_info()
    rss = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
               if line.startswith("VmRSS:"))
    return {"allocated_gib": torch.cuda.memory_allocated() / 2**30,
            "reserved_gib": torch.cuda.memory_reserved() / 2**30, "device_free_gib": free / 2**30,
            "device_total_gib": total / 2**30, "host_rss_gib": rss / 2**20}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=160)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--image-px", type=int, default=224)
    parser.add_argument("--max-views", type=int, default=2, help="prompt i has 1 + i %% max_views views")
    parser.add_argument("--vllm-memory", type=float, default=0.3, help="generation.vllm_gpu_memory_utilization")
    parser.add_argument("--no-restart", action="store_true",
                        help="skip the second engine start in the same process (about a minute at 3B)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--smoke", action="store_true",
                        help="CPU, tiny model, 4 prompts x 8 tokens: checks this script runs (no GPU needed)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.prompts, args.new_tokens, args.repeats, args.image_px = 4, 8, 1, 112

    import importlib.util

    import numpy as np
    import torch
    import transformers
    from PIL import Image
    from transformers import Qwen2_5_VLForConditionalGeneration

    from harness.config import load_config
    from harness.data.phantom import draw_image, sample_case
    from harness.models.tiny import build_processor, tiny_model_config, train_tokenizer
    from harness.models.trainable import add_lora, set_trainable
    from harness.prompting.batching import END, encode_prompts, suppressed_token_ids
    from harness.sampling.decoding import decode_tokens

    device, dtype = ("cpu", torch.float32) if args.smoke else ("cuda", torch.bfloat16)
    report: dict = {"torch": torch.__version__, "transformers": transformers.__version__,
                    "gpu": torch.cuda.get_device_name(0) if device == "cuda" else "none (smoke run)",
                    "prompts": args.prompts, "new_tokens": args.new_tokens}
    rng = np.random.default_rng(0)
    tokenizer = train_tokenizer(["no acute cardiopulmonary process . heart size is normal ."] * 50, vocab_size=400)
    processor = build_processor(tokenizer, args.image_px)
    torch.manual_seed(0)
    config = tiny_model_config(tokenizer, image_size=args.image_px) if args.smoke else model_3b_shape(tokenizer)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration(config).to(dtype)
    model.set_attn_implementation("sdpa")
    images = [[Image.fromarray(draw_image(sample_case(rng), rng, size=args.image_px)).convert("RGB")
               for _ in range(1 + i % args.max_views)] for i in range(args.prompts)]
    instructions = ["Write the findings section of the chest x-ray report."] * args.prompts
    batch = {k: v.to(device) for k, v in encode_prompts(processor, images, instructions).items()}
    tok = processor.tokenizer
    common = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, repetition_penalty=1.03,
                  temperature=0.7, top_p=0.9, top_k=0, suppress_tokens=suppressed_token_ids(tok),
                  pad_token_id=tok.pad_token_id, eos_token_id=tok.convert_tokens_to_ids(END),
                  prompts=(processor, images, instructions))

    def run(backend: str, do_sample: bool = True):
        torch.manual_seed(1)
        with torch.no_grad(), torch.autocast(device, dtype=dtype, enabled=device == "cuda"):
            return decode_tokens(model, batch, backend=backend, do_sample=do_sample, **common)

    use_vllm = not args.smoke and importlib.util.find_spec("vllm") is not None
    base_dir = tempfile.TemporaryDirectory() if use_vllm else None
    if use_vllm:  # the engine starts from the plain base; the policy's weights reach it by the first sync
        model.save_pretrained(base_dir.name)
        processor.save_pretrained(base_dir.name)
    greedy_base = run("lean", do_sample=False)  # the base before LoRA: what an engine never synced would decode
    model = add_lora(model, r=64, alpha=64, dropout=0.0)
    set_trainable(model, "rl")
    gen = torch.Generator(device="cpu").manual_seed(2)
    with torch.no_grad():  # LoRA B != 0 and a changed merger, as after RL steps
        for p in model.parameters():
            if p.requires_grad:
                p.add_((torch.randn(p.shape, generator=gen) * 0.02).to(p.device, p.dtype))
    model.to(device).eval()

    greedy = {b: run(b, do_sample=False) for b in ("hf", "lean")}
    report["lean_equals_generate_greedy"] = bool(torch.equal(greedy["hf"], greedy["lean"]))
    P = batch["input_ids"].shape[1]
    report["lean_policy_vs_base_greedy"] = agreement(greedy["lean"][:, P:], greedy_base[:, P:])
    backends = ["hf", "lean"]
    if use_vllm:
        from dataclasses import asdict

        from harness.sampling import vllm_rollout

        backends.append("vllm")
        gcfg = load_config(None, [f"generation.vllm_gpu_memory_utilization={args.vllm_memory}",
                                  "generation.vllm_sleep_level=1"]).generation
        leg: dict = {"memory": {"before_start": memory()}}
        t0 = time.perf_counter()
        engine = vllm_rollout.start_engine(model, processor, gcfg, [(images, instructions, args.new_tokens)],
                                           seed=0, model_path=base_dir.name)
        leg["start_s"] = time.perf_counter() - t0  # load, profile, compile, CUDA graphs, then asleep
        leg["spec"] = asdict(engine.spec)
        leg["memory"]["asleep_after_start"] = memory()  # the level-1 sleep: weights in host memory
        t0 = time.perf_counter()
        engine.ready(model)  # wake the weights, the first sync (the whole merged model), wake the KV cache
        leg["wake_and_first_sync_s"] = time.perf_counter() - t0
        leg["memory"]["awake"] = memory()
        greedy["vllm"] = run("vllm", do_sample=False)
        leg["greedy_vs_lean"] = agreement(greedy["vllm"][:, P:], greedy["lean"][:, P:])
        leg["greedy_vs_base"] = agreement(greedy["vllm"][:, P:], greedy_base[:, P:])
        t0 = time.perf_counter()
        engine.sleep()
        leg["sleep_s"] = time.perf_counter() - t0
        leg["memory"]["asleep"] = memory()
        t0 = time.perf_counter()
        engine.ready(model)  # unchanged weights: no sync
        leg["wake_s"] = time.perf_counter() - t0
        with torch.no_grad():
            next(p for p in model.parameters() if p.requires_grad).add_(1e-3)
        t0 = time.perf_counter()
        engine.ready(model)  # awake, changed weights: one full sync
        torch.cuda.synchronize()
        leg["sync_s"] = time.perf_counter() - t0
        with torch.no_grad():
            next(p for p in model.parameters() if p.requires_grad).sub_(1e-3)
        run("vllm")  # back to the measured weights (a sync) before the timings
        report["vllm_leg"] = leg
    else:
        report["vllm"] = "skipped: smoke run" if args.smoke else "skipped: vllm not importable"
    times: dict = {b: [] for b in backends}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for r in range(args.repeats):
        for b in backends if r % 2 == 0 else backends[::-1]:
            sync()
            t0 = time.perf_counter()
            run(b)
            sync()
            times[b].append(time.perf_counter() - t0)
    for b in backends:
        med = statistics.median(times[b])
        report[b] = {"median_s": med, "tokens_per_s": args.prompts * args.new_tokens / med, "times": times[b]}
    if use_vllm and not args.no_restart:  # a later stage in the same process: the old engine goes, a new one starts
        from harness.sampling import vllm_rollout

        t0 = time.perf_counter()
        engine = vllm_rollout.start_engine(model, processor, gcfg, [(images, instructions, args.new_tokens + 1)],
                                           seed=0, model_path=base_dir.name)
        again = run("vllm", do_sample=False)
        report["vllm_leg"]["restart_s"] = time.perf_counter() - t0
        report["vllm_leg"]["restart_greedy_vs_first_engine"] = agreement(again[:, P:], greedy["vllm"][:, P:])
        report["vllm_leg"]["memory"]["after_restart"] = memory()
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out, "device_rollout.json").write_text(json.dumps(report, indent=1))
    if base_dir is not None:
        base_dir.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
