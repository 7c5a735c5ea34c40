"""experiments/overoptimization.yaml on a reduced setting, end to end, and its report section (issue 12)."""

from __future__ import annotations

import contextlib
import io
import math
import re
from pathlib import Path

import pytest

from harness.cli import main
from harness.runs.records import read_json
from harness.runs.schema import analysis_file
from harness.stages.analyze import KINDS
from reports.experiment import load_experiment, read_jsonl
from reports.labeler_credit import credit_count
from reports.overoptimization import END_METRICS, contrast_arm, disagreement_table, end_table, final_values
from reports.stats import holm, paired_comparison, summarize
from tests.tiny_sizes import TINY

STUDY = Path(__file__).resolve().parents[2] / "experiments" / "overoptimization.yaml"
REDUCED = [
    "stages.warmup.train.max_steps=2", "stages.warmup.train.batch_size=4",
    "stages.classifier.classifier.epochs=1", "stages.classifier.classifier.batch_size=8",
    "stages.classifier.classifier.img_size=32",
    "stages.sft.train.max_steps=2", "stages.sft.train.batch_size=4", "stages.sft.model.lora_r=4",
    "stages.sft.model.lora_alpha=8", "stages.rl.data.max_train=4",
    "stages.rl.train.max_steps=4", "stages.rl.train.epochs=2", "stages.rl.rl.prompts_per_step=2",
    "stages.rl.rl.group_size=2", "stages.rl.rl.max_new_tokens=8", "stages.rl.rl.min_new_tokens=2",
    "stages.rl.rl.val_max_samples=4", "analyses.n_prompts=2",
    "stages.eval.data.synth_n=40",  # the preset's 20,000-study test set, cut back to the tiny data set
]


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("oo")
    out = tmp / "out"
    argv = ["experiment", "run", str(STUDY), "--workers", "1", "--out", str(out), "--seeds", "0,1",
            "--arms", "no_kl_bleu4,ckl_bleu4,no_kl_entity"]
    for s in [f"common.{x}" for x in TINY] + [f"common.cache_dir={tmp / 'cache'}"] + REDUCED:
        argv += ["--set", s]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0
    (out / "stdout.txt").write_text(buf.getvalue())
    return out


def test_reduced_study_runs_and_logs_gold_proxy_and_kl(study_dir):
    index = read_json(study_dir / "index.json")
    assert index["summary"]["complete"] == 6 and index["study"] == "overoptimization"
    done = [r for r in index["runs"] if r["status"] == "complete"]  # the index lists the whole study
    assert sorted((r["arm"], r["seed"]) for r in done) == [(a, s) for a in ("ckl_bleu4", "no_kl_bleu4",
                                                                             "no_kl_entity") for s in (0, 1)]
    for r in done:
        rows = read_jsonl(study_dir / r["dir"] / "rl" / "evals.jsonl")
        assert [e["step"] for e in rows] == [0, 2, 4]  # one validation per epoch of 2 steps, and the start
        for e in rows:
            assert 0 <= e["gold_f1"] <= 1 and 0 <= e["gold_exact"] <= 1 and math.isfinite(e["proxy_reward"])
            # the gold reader's gold, the rule labeler's agreement beside it, and how often the two disagree
            assert 0 <= e["labeler_f1"] <= 1 and 0 <= e["labeler_exact"] <= 1
            assert 0 <= e["labeler_gold_disagree"] <= 1
        scores = read_json(study_dir / r["eval_dir"] / "metrics.json")
        assert {"gold_f1", "gold_report_f1", "ce_micro_f1", "labeler_gold_disagree"} <= set(scores)
        assert rows[0]["kl_start_seq"] == pytest.approx(0.0, abs=1e-6)  # the start policy is the SFT policy
        assert rows[-1]["kl_start_seq"] > 0  # RL moved it (lr 1e-3, 4 steps)
        rl_cfg = read_json(study_dir / r["dir"] / "rl" / "manifest.json")["config"]["rl"]
        assert rl_cfg["reward"] == ("entity_f1" if r["arm"].endswith("entity") else "bleu4")
        assert rl_cfg["select"] == "final"
        # Supp. A before vs after RL for the arms the study lists (the BLEU-4 contrast and REVA-PO), not the others
        analysed = r["arm"] in ("no_kl_bleu4", "ckl_bleu4")
        for kind in KINDS:
            assert (study_dir / r["dir"] / "rl" / analysis_file(kind)).is_file() == analysed


def test_report_section_equals_the_statistics_of_the_logged_values(study_dir):
    assert main(["report", str(study_dir)]) == 0
    report = study_dir / "report"
    assert (report / "figures" / "fig_overoptimization.png").is_file()
    md = (report / "tables" / "overoptimization.md").read_text()
    assert "no_kl_bleu4" in md and "ckl_bleu4" in md
    # Supp. A before vs after RL: one A.3 and one A.1 table per analysed arm, the baseline arm first
    supp = (report / "tables" / "supp_a.md").read_text()
    titles = re.findall(r"^### (Supp\. A\.[13]).*\(arm (\w+)\)$", supp, flags=re.M)
    assert titles == [("Supp. A.3", "ckl_bleu4"), ("Supp. A.3", "no_kl_bleu4"),
                      ("Supp. A.1", "ckl_bleu4"), ("Supp. A.1", "no_kl_bleu4")]
    # stage_seeds: both seeds start RL from one SFT model, so "before RL" is one policy (n=1), "after" two
    before = re.findall(r"^\| before RL \| [^|]*\((n=\d)\)", supp, flags=re.M)
    after = re.findall(r"^\| after RL \| [^|]*\((n=\d)\)", supp, flags=re.M)
    assert before == ["n=1"] * 2 and after == ["n=2"] * 2
    exp = load_experiment(study_dir)
    # Contrast: constant KL with the same reward; none exists in this reduced set for the entity reward, so
    # the study's baseline arm.
    assert contrast_arm(exp, "no_kl_bleu4") == "ckl_bleu4" and contrast_arm(exp, "no_kl_entity") == "ckl_bleu4"
    table = end_table(exp, digits=4)
    rows = {r[0]: r for r in table.rows}
    vals = {a: {r.seed: final_values(r) for r in exp.runs_of(a)} for a in ("no_kl_bleu4", "ckl_bleu4", "no_kl_entity")}
    s = summarize([v["gold_f1"] for v in vals["no_kl_bleu4"].values()])
    assert rows["no_kl_bleu4"][3 + END_METRICS.index("gold_f1")] == f"{s.mean:.4f} [{s.lo:.4f}, {s.hi:.4f}]"
    comps = [paired_comparison({k: v[m] for k, v in vals[a].items()}, {k: v[m] for k, v in vals["ckl_bleu4"].items()})
             for a in ("no_kl_bleu4", "no_kl_entity") for m in END_METRICS]
    p_adj = holm([c.p for c in comps])
    c, p = comps[END_METRICS.index(KL := "kl_start_seq")], p_adj[END_METRICS.index("kl_start_seq")]
    assert rows["no_kl_bleu4"][3 + len(END_METRICS) + END_METRICS.index(KL)] == \
        f"{c.diff:+.4f} [{c.lo:+.4f}, {c.hi:+.4f}] p={p:.3g}"
    assert rows["ckl_bleu4"][-1] == "–"  # no contrast with itself
    # Rule labeler vs gold reader before RL (step 0), after RL (last validation) and on the test split
    dis = disagreement_table(exp, digits=4)
    drow = {r[0]: r for r in dis.rows}
    for arm in ("no_kl_bleu4", "ckl_bleu4", "no_kl_entity"):
        runs = exp.runs_of(arm)
        first = summarize([r.val_evals[0]["labeler_gold_disagree"] for r in runs])
        last = summarize([r.val_evals[-1]["labeler_gold_disagree"] for r in runs])
        test = summarize([r.scores["labeler_gold_disagree"] for r in runs])
        assert drow[arm][3:] == [f"{x.mean:.4f} [{x.lo:.4f}, {x.hi:.4f}]" for x in (first, last, test)]
    assert "Rule labeler vs gold reader" in (report / "index.html").read_text()
    # The labeler's credit that the gold reader rejects: one row per run, counted from its test predictions
    credit = (report / "tables" / "labeler_credit.md").read_text()
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in credit.splitlines() if ln.startswith("| ")]
    for arm in ("no_kl_bleu4", "ckl_bleu4", "no_kl_entity"):
        for run in exp.runs_of(arm):  # seeds with equal counts share a row
            c = credit_count(read_jsonl(run.predictions_path))
            row = next(r for r in cells if r[0] == arm and str(run.seed) in r[2].split(", "))
            assert row[1] == exp.factors(arm)["reward"] and row[3:5] == [str(c.credited), str(c.unread)]
    assert "labeler_credit" not in (report / "results.md").read_text()


def test_rl_runs_print_progress_lines(study_dir):
    lines = [ln for ln in (study_dir / "stdout.txt").read_text().splitlines() if ln.startswith("[rl ")]
    # One line per validation of each of the 6 RL runs (steps 0, 2, 4), with step, reward, KL, gold and ETA. A KL of
    # two nearly equal policies, summed in float, can land a hair below 0 and print as -0.0000 (on some CPUs).
    pat = re.compile(r"^\[rl rl-seed\d-\w+\] step (\d)/4 reward (n/a|-?[\d.]+) kl (n/a|-?[\d.]+) gold_f1 [\d.]+ "
                     r"kl_sft -?[\d.]+ val [\d.]+ ETA ([\d.]+ min|\?)$")
    assert len(lines) == 18 and all(pat.match(ln) for ln in lines), lines[:3]
    assert sorted(int(pat.match(ln).group(1)) for ln in lines) == [0] * 6 + [2] * 6 + [4] * 6


def test_alignment_figure_counts_the_shared_sft_policy_once(study_dir, monkeypatch):
    import reports.figures.supplement as supplement

    captured = []
    monkeypatch.setattr(supplement, "save_figure", lambda fig, out_dir, name: captured.append(fig) or [])
    supplement.fig_a3_alignment(load_experiment(study_dir), study_dir / "unused")
    labels = [t.get_text() for t in captured[0].axes[0].get_legend().get_texts()]
    assert "ours, before RL (n=1)" in labels and "ours, after RL (n=2)" in labels
