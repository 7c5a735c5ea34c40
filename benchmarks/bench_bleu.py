"""Time `rewards.bleu.bleu4` against NLTK's per-pair `sentence_bleu` on report-length text.

    python benchmarks/bench_bleu.py --n 2000

Both compute the same scores (checked here); the NLTK loop includes `.split()`, as the official reward does.
The pairs are synthetic radiology-style reports (~50 words): each candidate is its reference with some
sentences swapped for others, the way a partly-right generated report differs from the ground truth.
"""

from __future__ import annotations

import argparse
import random
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


def make_pairs(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    candidates, references = [], []
    for _ in range(n):
        ref = rng.sample(SENTENCES, k=rng.randint(5, 8))
        cand = [s if rng.random() < 0.6 else rng.choice(SENTENCES) for s in ref]
        if rng.random() < 0.3:
            cand = cand[: rng.randint(2, len(cand))]
        references.append(" ".join(ref))
        candidates.append(" ".join(cand))
    return candidates, references


def nltk_scores(candidates: list[str], references: list[str]) -> np.ndarray:
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    smooth = SmoothingFunction().method1
    return np.array(
        [
            sentence_bleu([ref.split()], cand.split(), weights=(0.25,) * 4, smoothing_function=smooth)
            for cand, ref in zip(candidates, references, strict=True)
        ]
    )


def best_time(fn, repeats: int) -> tuple[float, object]:
    """Fastest of `repeats` runs: the least disturbed by other work on a shared machine."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="number of candidate/reference pairs")
    parser.add_argument("--repeats", type=int, default=5, help="runs per implementation; the fastest counts")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    candidates, references = make_pairs(args.n, args.seed)
    words = np.mean([len(r.split()) for r in references])
    bleu4(candidates[:8], references[:8])  # warm-up: numpy's first calls pay one-off costs
    t_nltk, expected = best_time(lambda: nltk_scores(candidates, references), args.repeats)
    t_ours, ours = best_time(lambda: bleu4(candidates, references), args.repeats)
    max_diff = float(np.max(np.abs(np.asarray(ours) - np.asarray(expected))))

    print(f"pairs: {args.n}, mean reference length: {words:.1f} words, best of {args.repeats} runs")
    print(f"nltk sentence_bleu: {t_nltk * 1e3:9.2f} ms ({t_nltk / args.n * 1e6:7.2f} us/pair)")
    print(f"rewards.bleu.bleu4: {t_ours * 1e3:9.2f} ms ({t_ours / args.n * 1e6:7.2f} us/pair)")
    print(f"speed-up: {t_nltk / t_ours:.1f}x   max |ours - nltk|: {max_diff:.2e}")
    return 0 if max_diff <= 1e-9 else 1


if __name__ == "__main__":
    raise SystemExit(main())
