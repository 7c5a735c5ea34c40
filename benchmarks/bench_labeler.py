"""Speed of the rule-based CheXpert-style labeler (``rewards.chexpert.label_reports``).

Run on purpose, never in the test suite::

    python benchmarks/bench_labeler.py [--n 5000] [--repeats 3] [--seed 0]

Reports are assembled from varied sentences (normal statements, findings with severity and laterality,
negation lists, uncertainty, devices) in the R2Gen-cleaned style; a tenth are written as raw text.
"""

from __future__ import annotations

import argparse
import random
import time

from rewards.chexpert import label_reports

_SIDES = ("left", "right", "bilateral", "left basilar", "right basilar", "bibasilar", "right upper lobe",
          "left lower lobe", "retrocardiac", "perihilar")
_SEVERITY = ("", "small ", "mild ", "moderate ", "large ", "trace ", "minimal ", "severe ")
_NORMAL = (
    "the heart size is normal",
    "heart size is within normal limits",
    "the cardiomediastinal silhouette is within normal limits",
    "normal cardiomediastinal silhouette",
    "the lungs are clear",
    "lungs are well expanded and clear",
    "no acute cardiopulmonary process",
    "no acute osseous abnormality",
    "the mediastinal and hilar contours are unremarkable",
    "pulmonary vascularity is normal",
    "the costophrenic angles are sharp",
    "there is no pneumothorax",
)
_NEG_ITEMS = ("pleural effusion", "pneumothorax", "focal consolidation", "pulmonary edema", "pneumonia",
              "fracture", "nodule", "vascular congestion", "effusion", "focal airspace disease")
_FINDINGS = (
    "{sev}{side} pleural effusion",
    "{sev}cardiomegaly",
    "the heart is {sev}enlarged",
    "{sev}{side} pneumothorax",
    "{sev}{side} atelectasis",
    "{side} opacity",
    "patchy {side} airspace opacities",
    "{sev}pulmonary edema",
    "{sev}interstitial edema",
    "{side} consolidation",
    "{side} pneumonia",
    "a {side} pulmonary nodule",
    "old healed {side} rib fractures",
    "{side} pleural thickening",
    "widened mediastinum",
    "enlarged cardiomediastinal silhouette",
)
_UNCERTAIN = (
    "{side} opacity may represent atelectasis or pneumonia",
    "{finding} cannot be excluded",
    "possible {finding}",
    "findings could reflect {finding}",
    "{finding} is likely",
    "{side} opacity concerning for pneumonia",
    "atelectasis versus consolidation at the {side} base",
)
_DEVICES = (
    "endotracheal tube terminates 4 cm above the carina",
    "right picc line tip in the low svc",
    "left chest wall pacemaker with leads in the right atrium and ventricle",
    "nasogastric tube courses below the diaphragm",
    "median sternotomy wires are intact",
    "right internal jugular central venous catheter tip at the cavoatrial junction",
    "surgical clips in the right upper quadrant",
)
_CHANGE = ("unchanged", "stable", "improved", "decreased", "increased", "new", "no change in the")


def _finding(rng: random.Random) -> str:
    return rng.choice(_FINDINGS).format(sev=rng.choice(_SEVERITY), side=rng.choice(_SIDES))


def _negation_list(rng: random.Random) -> str:
    items = rng.sample(_NEG_ITEMS, rng.randint(1, 4))
    body = items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]
    return rng.choice(("no ", "there is no ", "no evidence of ", "without ", "negative for ")) + body


def make_report(rng: random.Random) -> str:
    sentences: list[str] = []
    for _ in range(rng.randint(0, 2)):
        sentences.append(_finding(rng) + rng.choice(("", " is " + rng.choice(_CHANGE[:5]))))
    for _ in range(rng.randint(0, 1)):
        sentences.append(rng.choice(_UNCERTAIN).format(side=rng.choice(_SIDES), finding=_finding(rng)))
    for _ in range(rng.randint(0, 2)):
        sentences.append(rng.choice(_DEVICES))
    for _ in range(rng.randint(1, 3)):
        sentences.append(_negation_list(rng))
    sentences.extend(rng.sample(_NORMAL, rng.randint(1, 4)))
    rng.shuffle(sentences)
    if rng.random() < 0.1:  # raw style
        return " ".join(s[0].upper() + s[1:] + "." for s in sentences)
    return " . ".join(sentences) + " ."


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    reports = [make_report(rng) for _ in range(args.n)]
    words = sum(len(r.split()) for r in reports) / max(len(reports), 1)
    label_reports(reports[:50])  # warm-up (regex compilation happens at import)
    best = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        labels = label_reports(reports)
        best = min(best, time.perf_counter() - t0)
    print(f"reports: {len(reports)} (mean {words:.1f} words), labels {labels.shape}")
    print(f"best of {args.repeats}: {best:.3f} s -> {len(reports) / best:,.0f} reports/s on one core")


if __name__ == "__main__":
    main()
