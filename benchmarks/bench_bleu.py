"""Time `rewards.bleu.bleu4` against NLTK's per-pair `sentence_bleu` on report-length text.

    python benchmarks/bench_bleu.py --n 2000 --groups 500 --group-size 4

Two batch shapes, each timed ours vs NLTK in the same run, interleaved (NLTK, ours, NLTK, ours, ...), with
the median of the repeats reported (the machine is shared; the median of interleaved runs is the fairest
ratio). Every repeat scores fresh copies of the strings, so no cached `str` hash flatters either side.

- plain: `--n` distinct candidate/reference pairs;
- RL-shaped: `--groups` references with `--group-size` (G) candidates each, group-major (rows b*G..b*G+G-1
  share reference b), as the GRPO loop scores a batch of rollouts.

Both compute the same scores (checked here: max |ours - nltk| must be <= 1e-9, else exit status 1); the NLTK
loop includes `.split()`, as the official reward does. The pairs are synthetic radiology-style reports (~50
words): each candidate is its reference with some sentences swapped for others, the way a partly-right
generated report differs from the ground truth.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewards.bleu import bleu4  # noqa: E402

SENTENCES = (
    "the heart size is normal .",
    "the heart is mildly enlarged .",
    "the cardiomediastinal silhouette is within normal limits .",
    "there is no pleural effusion or pneumothorax .",
    "small left pleural effusion with adjacent atelectasis .",
    "moderate right pleural effusion is unchanged .",
    "no focal consolidation is seen .",
    "right lower lobe opacity may represent pneumonia in the appropriate clinical setting .",
    "the lungs are clear bilaterally .",
    "mild pulmonary vascular congestion without frank edema .",
    "there is no acute osseous abnormality .",
    "healed fracture of the left posterior sixth rib .",
    "endotracheal tube terminates 4 cm above the carina .",
    "a right internal jugular central venous catheter ends in the mid svc .",
    "bibasilar atelectasis is noted .",
    "no evidence of pneumothorax .",
    "the mediastinal contours are unremarkable .",
    "stable appearance of the chest compared to the prior study .",
)


def _report(rng: random.Random) -> list[str]:
    return rng.sample(SENTENCES, k=rng.randint(5, 8))


def _candidate(rng: random.Random, ref: list[str]) -> str:
    cand = [s if rng.random() < 0.6 else rng.choice(SENTENCES) for s in ref]
    if rng.random() < 0.3:
        cand = cand[: rng.randint(2, len(cand))]
    return " ".join(cand)


def make_pairs(n: int, seed: int) -> tuple[list[str], list[str]]:
    """n distinct pairs: a random reference and a partly-right candidate for it."""
    rng = random.Random(seed)
    candidates, references = [], []
    for _ in range(n):
        ref = _report(rng)
        references.append(" ".join(ref))
        candidates.append(_candidate(rng, ref))
    return candidates, references


def make_groups(groups: int, group_size: int, seed: int) -> tuple[list[str], list[str]]:
    """RL-shaped batch: `groups` references, each repeated for its `group_size` candidates (group-major)."""
    rng = random.Random(seed)
    candidates, references = [], []
    for _ in range(groups):
        ref = _report(rng)
        text = " ".join(ref)
        for _ in range(group_size):
            references.append(text)  # the same object G times, as a batch built from one dataset row
            candidates.append(_candidate(rng, ref))
    return candidates, references


def fresh(texts: list[str]) -> list[str]:
    """New string objects with the same contents (keeps shared references shared), so no hash is cached."""
    copies: dict[int, str] = {}
    return [copies.setdefault(id(t), (t + " ")[:-1]) for t in texts]


def nltk_scores(candidates: list[str], references: list[str]) -> np.ndarray:
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    smooth = SmoothingFunction().method1
    return np.array(
        [
            sentence_bleu([ref.split()], cand.split(), weights=(0.25,) * 4, smoothing_function=smooth)
            for cand, ref in zip(candidates, references, strict=True)
        ]
    )


def compare(candidates: list[str], references: list[str], repeats: int) -> dict[str, float]:
    """Interleaved timings of NLTK and ours on the same batch; medians, ratio and the largest difference."""
    bleu4(fresh(candidates[:8]), fresh(references[:8]))  # warm-up: numpy's first calls pay one-off costs
    times: dict[str, list[float]] = {"nltk": [], "ours": []}
    max_diff = 0.0
    for _ in range(repeats):
        results = {}
        for name, fn in (("nltk", nltk_scores), ("ours", bleu4)):
            cands, refs = fresh(candidates), fresh(references)
            start = time.perf_counter()
            results[name] = np.asarray(fn(cands, refs))
            times[name].append(time.perf_counter() - start)
        max_diff = max(max_diff, float(np.max(np.abs(results["ours"] - results["nltk"]))))
    nltk_t, ours_t = statistics.median(times["nltk"]), statistics.median(times["ours"])
    return {"nltk": nltk_t, "ours": ours_t, "ours_min": min(times["ours"]), "nltk_min": min(times["nltk"]),
            "ratio": nltk_t / ours_t, "max_diff": max_diff}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="plain case: distinct candidate/reference pairs")
    parser.add_argument("--groups", type=int, default=500, help="RL case: distinct references")
    parser.add_argument("--group-size", type=int, default=4, help="RL case: candidates per reference (G)")
    parser.add_argument("--repeats", type=int, default=11, help="interleaved runs per implementation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--block-chars", type=int, default=None,
                        help="override rewards.bleu._BLOCK_CHARS (characters per block of pairs) for this run")
    args = parser.parse_args(argv)
    if args.block_chars:
        import rewards.bleu as bleu_module

        bleu_module._BLOCK_CHARS = args.block_chars

    cases = {
        f"plain ({args.n} distinct pairs)": make_pairs(args.n, args.seed),
        f"RL ({args.groups} refs x G={args.group_size})": make_groups(args.groups, args.group_size, args.seed),
    }
    print(f"median of {args.repeats} interleaved runs each (min in brackets); fresh string copies every run")
    print(f"{'case':28s} {'pairs':>6s} {'words/ref':>9s} {'nltk ms':>17s} {'ours ms':>15s} {'us/pair ours':>12s}"
          f" {'speed-up':>8s} {'max diff':>9s}")
    worst = 0.0
    for name, (cands, refs) in cases.items():
        r = compare(cands, refs, args.repeats)
        words = np.mean([len(t.split()) for t in refs])
        print(f"{name:28s} {len(cands):6d} {words:9.1f} {r['nltk'] * 1e3:8.2f} ({r['nltk_min'] * 1e3:6.2f})"
              f" {r['ours'] * 1e3:6.2f} ({r['ours_min'] * 1e3:6.2f}) {r['ours'] / len(cands) * 1e6:12.2f}"
              f" {r['ratio']:7.1f}x {r['max_diff']:9.1e}")
        worst = max(worst, r["max_diff"])
    return 0 if worst <= 1e-9 else 1


if __name__ == "__main__":
    raise SystemExit(main())
