"""How a generated report is scored at evaluation: the NLG metrics (coco_scores: BLEU, ROUGE-L, CIDEr-D as
pycocoevalcap computes them) and the clinical-efficacy metrics over the 14 labels (evaluation).
May import harness.constants and rewards only; the evaluation stages and the reports read it."""
