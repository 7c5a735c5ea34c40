"""The tiny base's vision patch embedding: transformers' Conv3d against one matrix product, side by side (issue 27).

    python benchmarks/bench_patch_embed.py                 # 6 measured rounds, 1 thread
    python benchmarks/bench_patch_embed.py --rounds 10

Two workloads, each timed for both forms in alternating order (conv, matmul, matmul, conv, ...) so that both see
the same machine load; the ratio matmul / conv is the figure to read:
- `patch_embed`: forward and weight gradient of the patch embedding alone on a stage-0 batch (32 images of the
  tiny preset: 2,048 patches of 1,176 values);
- `lm_step`: one full-parameter stage-0 training step (32 samples, AdamW; bench_attention.py's `lm_step`, sdpa).
Both forms start from the same weights; the script first checks that they agree to float rounding
(harness/models/patch_embed.py; tests/harness/models/test_patch_embed.py).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_attention import lm_stepper  # noqa: E402
from bench_rl_step import build_model_and_processor, build_prompts  # noqa: E402

FORMS = ("conv", "matmul")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="measured rounds (each times both forms)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch

    from harness.config import ModelConfig
    from harness.models.patch_embed import use_patch_embed
    from harness.prompting.batching import encode_sft

    torch.set_num_threads(1)  # as the experiment runner's workers
    prompts = build_prompts(32, ModelConfig().image_size, args.seed)
    model, processor, _ = build_model_and_processor(args.seed)
    models = {}
    for form in FORMS:
        models[form] = copy.deepcopy(model)
        use_patch_embed(models[form], form)
    patches = encode_sft(processor, prompts.images, prompts.instructions, prompts.references,
                         max_report_tokens=100)["pixel_values"]
    upstream = torch.randn(patches.shape[0], ModelConfig().tiny_vision_hidden,
                           generator=torch.Generator().manual_seed(args.seed))

    def embed_stepper(form: str):
        module = models[form].model.visual.patch_embed

        def step() -> torch.Tensor:
            out = module(patches)
            (grad,) = torch.autograd.grad((out * upstream).sum(), module.proj.weight)
            return out.detach()
        return step

    steppers = {("patch_embed", f): embed_stepper(f) for f in FORMS}
    first = {f: steppers[("patch_embed", f)]() for f in FORMS}
    diff = float((first["conv"] - first["matmul"]).abs().max())
    print(f"patch embedding max |conv - matmul| {diff:.2e} (outputs up to {float(first['conv'].abs().max()):.2f})",
          flush=True)
    if not torch.allclose(first["conv"], first["matmul"], rtol=1e-5, atol=1e-5):
        raise SystemExit("the two forms disagree beyond float rounding")
    steppers |= {("lm_step", f): lm_stepper(models[f], processor, prompts, "sdpa") for f in FORMS}
    for fn in steppers.values():  # warm-up, not timed
        fn()
    times: dict = {key: [] for key in steppers}
    for r in range(args.rounds):
        order = FORMS if r % 2 == 0 else FORMS[::-1]
        for work in ("patch_embed", "lm_step"):
            for f in order:
                t0 = time.perf_counter()
                steppers[(work, f)]()
                times[(work, f)].append(time.perf_counter() - t0)
    print("| workload | conv median (ms) | matmul median (ms) | matmul / conv |")
    print("|---|---|---|---|")
    for work in ("patch_embed", "lm_step"):
        c, m = statistics.median(times[(work, "conv")]), statistics.median(times[(work, "matmul")])
        print(f"| {work} | {1000 * c:.1f} | {1000 * m:.1f} | {m / c:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
