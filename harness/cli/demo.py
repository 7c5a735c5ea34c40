"""`regbench demo` / `make demo`: the whole tiny study end to end, then tables, figures and index.html.

It runs the study experiments/demo_rl_ablation.yaml (tiny preset, synthetic data): data synth ->
stage 0 (tiny base, cached per machine) -> stage 1 warm-up -> classifier -> stage 2 SFT -> six RL arms
(constant KL, no KL, adaptive PPO-beta, RER, EMA reference, RER + VAPR: one factor at a time) from the shared SFT
model on the first seed, the declared contrast's arms (no KL, constant KL) on every seed of the study (`demo_runs`:
3 RL seeds from the one SFT model, so the contrast is decided by harness/stats/decisions.py), each evaluated on the test
split, and the Supp. A records of the RER + VAPR arm (the study's `analyses`);
then it evaluates the base, warm-up and SFT models too, prints one table (per stage and
per RL arm: BLEU-1..4, METEOR, ROUGE-L, findings against the synthetic ground truth) and each arm's reward
curve summary into results.md. Everything lands in one folder (default runs/demo). The report (reports/) is
built afterwards by `regbench demo` in harness/cli/study_commands.py: only the CLI imports reports/.
"""

from __future__ import annotations

import time
from pathlib import Path

from harness.experiments import load_study
from harness.runs.records import RunDir, atomic_write_text, read_json
from harness.runs.schema import METRICS_FILE, IndexKey, RunKey, StageKey

DEMO_STUDY = Path(__file__).resolve().parents[2] / "experiments" / "demo_rl_ablation.yaml"
COLUMNS = ("BLEU_1", "BLEU_2", "BLEU_3", "BLEU_4", "METEOR", "ROUGE_L", "gold_f1", "gold_exact", "ce_micro_f1",
           "labeler_gold_disagree")
LEGEND = ("gold_f1 / gold_exact: the phantom's gold reader (no reward sees it) on the generated reports against "
          "what was drawn (micro-F1 / all 14 findings right); ce_micro_f1: the rule labeler that the clinical rewards "
          "share, against the stored report labels; labeler_gold_disagree: share of reports where the two read "
          "different findings")


# The demo table's first rows: the study's `stage_evals` (harness/experiments/plan.py: add_stage_eval).
STAGE_ROWS = {"base": "base (stage 0)", "warmup": "warm-up (stage 1)", "sft": "SFT (stage 2)"}


def verdict_arms(study=None) -> tuple[str, str, str, str] | None:
    """The demo's verdict contrast (no KL against the study's baseline arm) as (arm, arm label, baseline,
    baseline label); None when the study has no no-KL arm besides its baseline."""

    study = study or load_study(DEMO_STUDY)
    no_kl = next((a for a in study.arms if a.factors.get("regularizer") == "none"), None)
    if no_kl is None or no_kl.name == study.baseline:
        return None
    return no_kl.name, no_kl.label, study.baseline, study.arm(study.baseline).label


def demo_runs(study) -> list[tuple[str, int]]:
    """The (arm, seed) runs of the demo: every arm on the study's first seed, the arms of its declared contrasts
    (and the baseline) on every seed."""
    first = study.seeds[0]
    contrast_arms = {name for c in study.contrasts for name in (c["arm"], c["baseline"])}
    return [(a.name, s) for s in study.seeds for a in study.arms if s == first or a.name in contrast_arms]


def format_table(rows: list[tuple[str, dict]]) -> str:
    head = "| model | " + " | ".join(COLUMNS) + " |"
    sep = "|" + "---|" * (len(COLUMNS) + 1)
    lines = [head, sep]
    for name, scores in rows:
        cells = [f"{scores[c]:.4f}" if isinstance(scores.get(c), int | float) else "n/a" for c in COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + LEGEND


def reward_curve_summary(run: RunDir, window: int = 5) -> str:
    """Mean training reward (and KL) over the first and last `window` RL steps, plus the validation scores."""
    steps = run.steps()
    if not steps:
        return "no steps logged"

    def mean(rows, key):
        vals = [r[key] for r in rows if isinstance(r.get(key), int | float)]
        return sum(vals) / len(vals) if vals else float("nan")

    first, last = steps[:window], steps[-window:]
    vals = [e for e in run.evals() if "val_score" in e]
    resets = sum(1 for e in vals if e.get("reset"))
    val = (f"; val score {vals[0]['val_score']:.4f} -> {vals[-1]['val_score']:.4f}"
           f" ({len(vals)} validations, {resets} resets)") if len(vals) >= 2 else ""
    kl = (f"KL {mean(first, 'kl_mean'):.5f} -> {mean(last, 'kl_mean'):.5f}"
          if any(isinstance(r.get("kl_mean"), int | float) for r in steps) else "KL not computed (no reference)")
    return (f"{len(steps)} steps: reward {mean(first, 'reward_mean'):.4f} (first {len(first)}) -> "
            f"{mean(last, 'reward_mean'):.4f} (last {len(last)}); {kl}{val}")


def run_demo(out: Path, progress: bool = True, workers: int = 2) -> Path:
    """Run the demo study and write its table; returns results.md (the caller builds the report)."""
    # lazy: tests replace run_experiment at its source, read at call time
    from harness.experiments import load_study, run_experiment

    if not DEMO_STUDY.is_file():
        raise FileNotFoundError(f"{DEMO_STUDY}: the demo study is missing (run the demo from a source checkout)")
    t0 = time.time()
    out = Path(out)
    study = load_study(DEMO_STUDY)
    selected = demo_runs(study)
    seed = study.seeds[0]
    many = sorted({a for a, s in selected if s != seed})
    print(f"[demo] study {study.name}: {len(study.arms)} RL arms on seed {seed}"
          + (f", {' and '.join(many)} on seeds {study.seeds} (one shared SFT model)" if many else "")
          + f" -> {out}", flush=True)
    result = run_experiment(study, out, workers=workers, runs=selected)
    result.stop_if_preempted(f"demo {out}")  # the table needs every run
    if not result.ok:
        raise RuntimeError(f"demo: arms failed: {result.failed}; see {result.index_path}")
    index = result.index
    runs = {r[RunKey.ARM]: r for r in index[IndexKey.RUNS] if r[RunKey.SEED] == seed}
    # The base, warm-up and SFT models were tested as nodes of the study (its `stage_evals`), while the workers
    # would otherwise have waited for stage 0, the warm-up and the SFT model.
    stage_evals = index.get(IndexKey.STAGE_EVALS) or {}
    missing = [s for s in STAGE_ROWS if s not in stage_evals]
    if missing:
        raise RuntimeError(f"{DEMO_STUDY}: 'stage_evals' must list {', '.join(STAGE_ROWS)} (missing: "
                           f"{', '.join(missing)})")
    rows = [(name, read_json(out / stage_evals[s][RunKey.METRICS])) for s, name in STAGE_ROWS.items()]
    curves = []
    for arm in study.arms:
        r = runs[arm.name]
        rl_dir = out / r[RunKey.STAGES]["rl"][StageKey.DIR]
        rl_metrics = read_json(rl_dir / METRICS_FILE)
        # Every arm is tested at the policy rl.select picks (the same rule for all): say which step that was.
        where = f"step {rl_metrics.get('selected_step')}/{rl_metrics.get('final_step')}"
        rows.append((f"RL: {arm.label} @ {where}", read_json(out / r[RunKey.EVAL_DIR] / METRICS_FILE)))
        curves.append(f"- {arm.label}: {reward_curve_summary(RunDir(rl_dir))}")
    table = format_table(rows)
    curve_text = "RL reward curves (BLEU-4 reward):\n" + "\n".join(curves)
    total = time.time() - t0
    n = rows[0][1].get("n")
    text = (f"# regbench demo (tiny preset, synthetic test split, n = {n}, seed {seed})\n\n{table}\n\n"
            f"{curve_text}\n\nwall time: {total:.0f}s\n")
    atomic_write_text(out / "results.md", text)
    print()
    print(table)
    print()
    print(curve_text)
    print(f"\nwall time {total:.0f}s; table in {out / 'results.md'}; run records under {out}/")
    return out / "results.md"
