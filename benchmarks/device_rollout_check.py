"""Prepared GPU check for issue 15 (NOT RUN YET: no GPU was lent to the session that wrote it).

One command, under 8 minutes on one H200: (1) the CUDA token-equality tests of the lean loop
(tests/harness/sampling/test_lean_decode.py -k cuda), (2) tokens/s of transformers' `generate`, the lean loop and, where
vllm imports, the vLLM backend (harness/sampling/vllm_rollout.py) for a Qwen2.5-VL of the 3B's shape with random weights
(text 2048 x 36 layers, 16 heads / 2 KV heads, MLP 11008, vocabulary 151936; vision 1280 x 32 blocks), bf16,
sdpa, 64 prompts x 160 new tokens (min = max, so every row decodes 160), images 224 px, T 0.7 / top-p 0.9 /
repetition penalty 1.03. Repeats alternate the backends; the median is printed.

The lent machines run their own image (torch 2.11, transformers 5.x, no vllm) and reach no registry. regbench
pins transformers 4.57.6, so carry its wheels (prepared here, ~16 MB):

    /work/main/.venv/bin/pip download --no-deps -d wheels transformers==4.57.6 tokenizers==0.22.2 \
        huggingface_hub==0.36.2
    # device command (wheels/ travels with the working tree; add it to carry if it is git-ignored):
    pip install -q --no-deps --target /tmp/tf wheels/*.whl && export PYTHONPATH=/tmp/tf:$PWD && \
        python3 -m pytest -q -p no:cacheprovider tests/harness/sampling/test_lean_decode.py -k cuda && \
        python3 benchmarks/device_rollout_check.py --out $OUT

vLLM cannot be carried (its wheel and CUDA dependencies exceed what a run may carry), so on this workplace's
machines the vLLM leg prints "skipped: vllm not importable"; on a GPU machine with vllm installed it runs.
Printed and written to OUT/device_rollout.json: per backend the median seconds per batch and new tokens/s, and
for lean vs generate whether the greedy tokens are equal (on CUDA the lean loop keeps finished rows, see
harness/sampling/lean_decode.py).
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=160)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--image-px", type=int, default=224)
    parser.add_argument("--out", default=None)
    parser.add_argument("--smoke", action="store_true",
                        help="CPU, tiny model, 4 prompts x 8 tokens: checks this script runs (no GPU needed)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.prompts, args.new_tokens, args.repeats, args.image_px = 4, 8, 1, 112

    import numpy as np
    import torch
    import transformers
    from PIL import Image
    from transformers import Qwen2_5_VLForConditionalGeneration

    from harness.batching import END, encode_prompts, suppressed_token_ids
    from harness.data.phantom import draw_image, sample_case
    from harness.models.tiny import build_processor, tiny_model_config, train_tokenizer
    from harness.models.trainable import add_lora, set_trainable
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
    model = add_lora(model, r=32, alpha=64, dropout=0.0)
    set_trainable(model, "rl")
    model.to(device).eval()
    images = [[Image.fromarray(draw_image(sample_case(rng), rng, size=args.image_px)).convert("RGB")]
              for _ in range(args.prompts)]
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

    greedy = {b: run(b, do_sample=False) for b in ("hf", "lean")}
    report["lean_equals_generate_greedy"] = bool(torch.equal(greedy["hf"], greedy["lean"]))
    backends = ["hf", "lean"]
    try:
        if args.smoke:
            raise ImportError("smoke run")
        import vllm  # noqa: F401

        backends.append("vllm")
        with tempfile.TemporaryDirectory() as tmp:  # the engine starts from a saved base folder
            from harness.models.trainable import unwrap

            unwrap(model).save_pretrained(tmp)
            processor.save_pretrained(tmp)
            unwrap(model).config._name_or_path = tmp
            t0 = time.perf_counter()
            run("vllm")  # engine start, CUDA graphs, first weight sync
            report["vllm_start_s"] = time.perf_counter() - t0
    except ImportError:
        report["vllm"] = "skipped: vllm not importable"
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
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out, "device_rollout.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
