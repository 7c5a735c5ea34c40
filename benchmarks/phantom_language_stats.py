"""How close the phantom's report language comes to real reports (issue 44), per data.report_variation level.

    python benchmarks/phantom_language_stats.py [--n 4000] [--seed 0]

Draws the reports (not the images) of `n` studies per level and prints, beside the real IU-Xray figures (3,826
reports, measured in issue 44 with the same definitions): the share of sentence occurrences covered by the 50 most
common sentences, distinct words over the `n` reports, mean words per report. A sentence is a piece of the cleaned
report between its " . " marks; a word is a whitespace token other than "." (tokens/report counts the "." too: the
issue's phantom figure, 37.5, is that count). Also the gold readers' agreement
with the stored labels on these reports (v1 reads only the plain grammar; v2 reads every level), and the share of
reports whose positives the rewards' rule labeler (rewards/chexpert.py) reads exactly.
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from harness.data.phantom import PhantomConfig, case_and_report
from harness.data.phantom.gold_reader import read_reports
from harness.data.phantom.phrasings import VARIATIONS

IU_XRAY = {"top50_share": 0.30, "distinct_words": 3132, "mean_words": 38.0, "reports": 3826}


def language_stats(reports: list[str]) -> dict[str, float]:
    sentences = Counter(s for r in reports for s in (p.strip() for p in r.split(" . ")) if s and s != ".")
    words = [[w for w in r.split() if w != "."] for r in reports]
    return {"top50_share": sum(c for _, c in sentences.most_common(50)) / sum(sentences.values()),
            "distinct_words": len({w for ws in words for w in ws}),
            "distinct_sentences": len(sentences),
            "mean_words": float(np.mean([len(ws) for ws in words])),
            "mean_tokens": float(np.mean([len(r.split()) for r in reports]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("| language | reports | top-50 sentence share | distinct words | distinct sentences | words/report "
          "| tokens/report (with \".\") | v1 exact | v2 exact "
          "| labeler positives exact |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(f"| IU-Xray (real) | {IU_XRAY['reports']} | {IU_XRAY['top50_share']:.0%} | {IU_XRAY['distinct_words']} "
          f"| | {IU_XRAY['mean_words']:.1f} (issue 44; definition not recorded) | | | | |")
    for level in VARIATIONS:
        cfg = PhantomConfig(n=args.n, seed=args.seed, report_variation=level)
        pairs = [case_and_report(cfg, i)[1] for i in range(cfg.n)]
        texts = [r.text for r in pairs]
        stored = np.array([[np.nan if v is None else v for v in r.labels] for r in pairs], dtype=np.float64)
        exact = {v: float(np.mean([np.array_equal(a, b, equal_nan=True)
                                   for a, b in zip(read_reports(texts, v), stored, strict=True)]))
                 for v in ("v1", "v2")}
        from rewards.chexpert import label_report  # the rule labeler the rewards share (not a gold reader)

        labeler = np.stack([np.asarray(label_report(t), dtype=np.float64) for t in texts])
        exact["labeler"] = float(np.mean(np.all((labeler == 1) == (stored == 1), axis=1)))
        s = language_stats(texts)
        print(f"| phantom, report_variation {level} | {args.n} | {s['top50_share']:.0%} | {s['distinct_words']} "
              f"| {s['distinct_sentences']} | {s['mean_words']:.1f} | {s['mean_tokens']:.1f} "
              f"| {exact['v1']:.3f} | {exact['v2']:.3f} | {exact['labeler']:.3f} |")


if __name__ == "__main__":
    main()
