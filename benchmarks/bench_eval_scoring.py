"""What a test evaluation repeats, side by side on the same inputs (issue 27, sixth session), one thread:

- NLG scoring of a stored evaluation's reports: `nlg_scores` + `nlg_report_scores` (each scorer run twice, as
  before) against `nlg_scores_and_reports` (once), alternating; both must return the same numbers;
- the split's images: decoded from PNG every time against read back from the pixel cache (harness/data/pixel_cache.py);
- METEOR alone (eighth session): pycocoevalcap's `Meteor.compute_score`, one round trip per report, against
  `pipelined_meteor` (the same lines, a chunk written before its replies are read), alternating on one JVM; both
  must return the same numbers;
- BLEU, ROUGE-L and CIDEr-D alone (tenth session): pycocoevalcap (`Bleu(4).compute_score`, each report's
  statistics cooked again with `cook_test` for the per-report rows, `Rouge().compute_score`,
  `Cider().compute_score`) against harness/scoring/coco_scores.py (`bleu_statistics` once, `corpus_bleu`, `rouge_l`,
  `cider_d`), the latter with CIDEr's reference side built ("first arm": a worker's first evaluation of the split)
  and read back ("further arms"), alternating; all must return the same numbers.

    python benchmarks/bench_eval_scoring.py RUN/eval/predictions_final_test.jsonl --annotation DATA/annotation.json
    python benchmarks/bench_eval_scoring.py PRED.jsonl --rounds 5

Printed: median seconds of each side and their ratio.
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predictions", help="a test evaluation's predictions_*.jsonl (reference and generated texts)")
    parser.add_argument("--annotation", help="the phantom split's annotation.json (times its test images too)")
    parser.add_argument("--image-size", type=int, default=112)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    import torch

    from harness.scoring.evaluation import meteor_scorer, nlg_report_scores, nlg_scores, nlg_scores_and_reports

    torch.set_num_threads(1)
    path = Path(args.predictions)
    if not path.is_file():
        parser.error(f"{path}: no such predictions file")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        parser.error(f"{path}: no reports in it")
    refs = {r["id"]: r["reference"] for r in rows}
    hyps = {r["id"]: r["generated"] for r in rows}
    meteor_scorer()  # the JVM started before timing
    times: dict[str, list[float]] = {"twice": [], "once": []}
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        want = (nlg_scores(refs, hyps), nlg_report_scores(refs, hyps))
        times["twice"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        got = nlg_scores_and_reports(refs, hyps)
        times["once"].append(time.perf_counter() - t0)
        if got != want:
            print("the two differ; not timing", file=sys.stderr)
            return 1
    twice, once = (statistics.median(times[k]) for k in ("twice", "once"))
    print(f"NLG of {len(rows)} reports: each scorer twice {twice:.2f} s, once {once:.2f} s, ratio {once / twice:.3f}")
    gts, res = {k: [v] for k, v in refs.items()}, {k: [v] for k, v in hyps.items()}
    from harness.scoring import coco_scores

    times = {"library": [], "first arm": [], "further arms": []}
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        want = _pycocoevalcap_bleu_rouge_cider(gts, res)
        times["library"].append(time.perf_counter() - t0)
        coco_scores._CIDER_CACHE.clear()
        for name in ("first arm", "further arms"):
            t0 = time.perf_counter()
            got = _coco_scores_bleu_rouge_cider(gts, res)
            times[name].append(time.perf_counter() - t0)
            if got != want:
                print("BLEU/ROUGE-L/CIDEr: the two differ; not timing", file=sys.stderr)
                return 1
    lib, first, further = (statistics.median(times[k]) for k in ("library", "first arm", "further arms"))
    print(f"BLEU + ROUGE-L + CIDEr-D of {len(rows)} reports: pycocoevalcap {lib:.2f} s, harness/scoring/coco_scores.py "
          f"{first:.2f} s on a worker's first arm (ratio {first / lib:.3f}), {further:.2f} s on further arms "
          f"(ratio {further / lib:.3f})")
    from harness.scoring.evaluation import _normalized, pipelined_meteor

    gts, res = _normalized({k: [v] for k, v in refs.items()}), _normalized({k: [v] for k, v in hyps.items()})
    scorer = meteor_scorer()
    times = {"library": [], "pipelined": []}
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        want = scorer.compute_score(gts, res)
        times["library"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        got = pipelined_meteor(scorer, gts, res)
        times["pipelined"].append(time.perf_counter() - t0)
        if got != want:
            print("METEOR: the two differ; not timing", file=sys.stderr)
            return 1
    lib, piped = (statistics.median(times[k]) for k in ("library", "pipelined"))
    print(f"METEOR of {len(rows)} reports: one round trip each {lib:.2f} s, pipelined {piped:.2f} s, "
          f"ratio {piped / lib:.3f}")
    if args.annotation:
        from harness.data.datasets import load_annotation
        from harness.data.streaming import LazyViews

        samples = load_annotation(args.annotation, "phantom", splits=("test",))["test"]
        with tempfile.TemporaryDirectory() as folder:
            filled = LazyViews(samples, args.image_size, cache_dir=folder)
            for i in range(len(samples)):
                filled[i]
            times = {"png": [], "cache": []}
            for _ in range(args.rounds):
                for name, views in (("png", LazyViews(samples, args.image_size)),
                                    ("cache", LazyViews(samples, args.image_size, cache_dir=folder))):
                    t0 = time.perf_counter()
                    for i in range(len(samples)):
                        views[i]
                    times[name].append(time.perf_counter() - t0)
        png, cache = (statistics.median(times[k]) for k in ("png", "cache"))
        print(f"{len(samples)} test images: from PNG {png:.2f} s, from the pixel cache {cache:.2f} s, "
              f"ratio {cache / png:.3f}")
    return 0


def _pycocoevalcap_bleu_rouge_cider(gts: dict, res: dict) -> tuple:
    """What a test evaluation computed before coco_scores.py: corpus BLEU, every report's cooked statistics,
    ROUGE-L and CIDEr-D, corpus and per report."""
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.bleu.bleu_scorer import cook_refs, cook_test
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    rows = []
    for key in gts:
        c = cook_test(res[key][0], cook_refs(gts[key]), eff="closest")
        rows.append([*c["correct"], *c["guess"], c["testlen"], c["reflen"]])
    rouge, rouge_each = Rouge().compute_score(gts, res)
    cider, cider_each = Cider().compute_score(gts, res)
    return list(bleu), rows, float(rouge), rouge_each.tolist(), float(cider), cider_each.tolist()


def _coco_scores_bleu_rouge_cider(gts: dict, res: dict) -> tuple:
    from harness.scoring.coco_scores import bleu_statistics, cider_d, corpus_bleu, rouge_l

    stats = bleu_statistics(gts, res)
    rouge, rouge_each = rouge_l(gts, res)
    cider, cider_each = cider_d(gts, res)
    return corpus_bleu(stats), stats.tolist(), float(rouge), rouge_each.tolist(), float(cider), cider_each.tolist()


if __name__ == "__main__":
    raise SystemExit(main())
