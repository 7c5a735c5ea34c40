"""Does `generation.backend = fused` sample what `lean` samples, on a trained model? (issue 27)

tests/harness/sampling/test_fused_step.py checks the fused sampler's token distribution on a small random model.
This check does the same on a real study's model with its RL sampling settings, measured where a study feels it:
the rewards of the candidates. The policy an RL run starts from (its init_from, the SFT model) samples G
candidates for each of the first n validation prompts, several times:

- `lean` with seeds 0..k-1 and again with seeds k..2k-1 (the null: two samples of one sampler);
- `fused` with seeds 0..k-1;
- `lean` with the temperature times `--planted` (a planted change of the distribution, to show the check's power).

For each prompt, the mean over its candidates of the BLEU-4 reward, the CheXpert-F1 reward and the length in
words; each contrast (`lean` vs the other sample) is a paired t-test over prompts. Expected: lean vs lean and lean
vs fused not rejected, the planted temperature rejected.

    python benchmarks/check_fused_distribution.py RUNS/stages/rl-seed0-xxxx [--n-prompts 400] [--seeds 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="an RL stage run (manifest.json with init_from)")
    parser.add_argument("--n-prompts", type=int, default=400, help="first n validation prompts")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=2, help="k: samples per sampler (seeds)")
    parser.add_argument("--planted", type=float, default=1.15, help="temperature factor of the planted sampler")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    import dataclasses

    import numpy as np
    import torch
    from scipy import stats

    from harness.stages.analyze import _load_policy, _policies, _run_config, _sample, _score
    from harness.stages.common import load_splits
    from harness.stages.prompts import prompt_set

    torch.set_num_threads(args.threads)
    run = Path(args.run)
    cfg = _run_config(run)
    start = _policies(cfg, run)["before"]
    samples = load_splits(cfg, progress=False)["val"][:args.n_prompts]
    model, processor, spec = _load_policy(start, cfg, "cpu")
    prompts = prompt_set(cfg.prompt, cfg.model, samples, spec)
    g, k = args.group_size, args.seeds
    planted_t = cfg.rl.temperature * args.planted
    arms = {"lean": ("lean", cfg.rl.temperature, range(k)), "lean, other seeds": ("lean", cfg.rl.temperature,
            range(k, 2 * k)), "fused": ("fused", cfg.rl.temperature, range(k)),
            f"lean, T x {args.planted}": ("lean", planted_t, range(k))}
    per_prompt: dict[str, dict[str, np.ndarray]] = {}
    print(f"{start}: {len(samples)} prompts x G = {g} x {k} seeds per sampler; T {cfg.rl.temperature}, "
          f"top-p {cfg.rl.top_p}, repetition penalty {cfg.rl.repetition_penalty}, "
          f"{cfg.rl.max_new_tokens} new tokens at most", flush=True)
    for name, (backend, temperature, seeds) in arms.items():
        run_cfg = dataclasses.replace(cfg, generation=dataclasses.replace(cfg.generation, backend=backend),
                                      rl=dataclasses.replace(cfg.rl, temperature=temperature))
        sums: dict[str, np.ndarray] = {}
        t0 = time.perf_counter()
        for seed in seeds:
            cands = _sample(model, processor, prompts, run_cfg, g, seed, batch_prompts=8)
            scores = _score(["bleu4", "chexpert_f1"], cands, prompts.references, g)
            scores["words"] = np.array([len(c.split()) for c in cands], dtype=float).reshape(-1, g)
            for key, v in scores.items():
                sums[key] = sums.get(key, 0.0) + v.mean(axis=1) / len(seeds)
        per_prompt[name] = sums
        print(f"  sampled {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    print("\n| sample | mean BLEU-4 | mean CheXpert F1 | mean words | vs lean: paired t p (BLEU-4 / F1 / words) |")
    print("|---|---|---|---|---|")
    ref = per_prompt["lean"]
    for name, sums in per_prompt.items():
        cells = [f"{sums[m].mean():.4f}" for m in ("bleu4", "chexpert_f1", "words")]
        ps = "-" if name == "lean" else " / ".join(
            f"{stats.ttest_rel(sums[m], ref[m]).pvalue:.3g}" for m in ("bleu4", "chexpert_f1", "words"))
        print(f"| {name} | {' | '.join(cells)} | {ps} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
