"""The demo's verdict: one contrast of the over-optimisation study (no KL vs constant KL) on the test split.

Gold findings micro-F1 (rule-labeled generated reports against the phantom's labels, which no reward sees) and
BLEU-4 (the proxy the arms optimise) get the within-seed paired bootstrap over test reports (reports/bootstrap.py:
95% interval and p); the KL to the SFT policy is each arm's value at its tested (selected) validation, nats per
report, as logged by the RL stage. The text says what came out, whichever way.
"""

from __future__ import annotations

import json
from pathlib import Path

from reports.bootstrap import paired_bootstrap, report_data_from_rows

METRICS = (("ce_micro_f1", "gold findings micro-F1"), ("BLEU_4", "BLEU-4 (proxy reward)"))


def _rows(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: test predictions missing (the arm's eval stage writes them)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def selected_kl(rl_dir: Path) -> float | None:
    """KL to the SFT policy (nats per report) at the validation of the step the arm was tested at."""
    metrics = json.loads((rl_dir / "metrics.json").read_text())
    evals = rl_dir / "evals.jsonl"
    rows = [json.loads(line) for line in evals.read_text().splitlines() if line.strip()] if evals.is_file() else []
    step = metrics.get("selected_step")
    hits = [r for r in rows if r.get("step") == step and "kl_start_seq" in r]
    return float(hits[-1]["kl_start_seq"]) if hits else None


def contrast_text(arm_eval: Path, ref_eval: Path, arm_rl: Path, ref_rl: Path, arm_label: str, ref_label: str,
                  B: int = 2000) -> str:
    """Markdown lines: arm - baseline on the test split, with interval and p, and both arms' KL to SFT."""
    name = "predictions_final_test.jsonl"
    arm = report_data_from_rows(_rows(arm_eval / name), str(arm_eval / name))
    ref = report_data_from_rows(_rows(ref_eval / name), str(ref_eval / name))
    boot = paired_bootstrap(arm, ref, [m for m, _ in METRICS], B=B)
    lines = [f"Verdict, {arm_label} - {ref_label} (test split, n = {boot[METRICS[0][0]].n_reports}, one seed; "
             "paired bootstrap over reports):"]
    for key, label in METRICS:
        r = boot[key]
        verdict = "differ" if r.p < 0.05 else "not distinguishable"
        lines.append(f"- {label}: {r.diff:+.4f} [{r.lo:+.4f}, {r.hi:+.4f}], p = {r.p:.3g} ({verdict} at 0.05)")
    kls = [selected_kl(arm_rl), selected_kl(ref_rl)]
    fmt = ["not logged" if k is None else f"{k:.2f}" for k in kls]
    lines.append(f"- KL to the SFT policy at the tested step (nats per report): {arm_label} {fmt[0]}, "
                 f"{ref_label} {fmt[1]}")
    return "\n".join(lines)


def demo_verdict(out: Path, arm: str, arm_label: str, baseline: str, baseline_label: str) -> str:
    """The verdict of a finished demo folder: arm `arm` against arm `baseline` (the harness names them: the demo's
    no-KL arm and its study's baseline), read from the folder's index.json and run records."""
    from harness.runs.records import read_json
    from harness.runs.schema import IndexKey, RunKey, StageKey

    runs = {r[RunKey.ARM]: r for r in read_json(out / "index.json")[IndexKey.RUNS]}
    a, b = runs[arm], runs[baseline]
    return contrast_text(out / a[RunKey.EVAL_DIR], out / b[RunKey.EVAL_DIR],
                         out / a[RunKey.STAGES]["rl"][StageKey.DIR], out / b[RunKey.STAGES]["rl"][StageKey.DIR],
                         arm_label, baseline_label)
