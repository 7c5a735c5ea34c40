"""reports/tables/ and reports/published.py against the fixed run records of conftest.py (checked by hand)."""

from __future__ import annotations

import io
import json
import math

import pandas as pd
import pytest

from reports.experiment import load_experiment
from reports.published import load_published, our_metric_key, published_row, published_table
from reports.stats import mdd_paired_t
from reports.tables import (
    NOISE_MARK,
    default_spec,
    differences_markdown,
    matrix_factors,
    matrix_markdown,
    mdd_by_metric,
    n_comparisons,
    published_apart_rows,
    results_frame,
    to_csv,
    to_latex,
    to_markdown,
)
from tests.reports.conftest import write_experiment


@pytest.fixture(scope="module")
def exp(experiment_dir):
    return load_experiment(experiment_dir)


@pytest.fixture(scope="module")
def frame(exp):
    spec = default_spec(exp, B=2000)
    return spec, results_frame(exp, spec)


def _cell(df, arm, metric):
    return df[(df.arm == arm) & (df.metric == metric)].iloc[0]


def test_published_numbers():
    pub = load_published()
    assert {"revapo_table1", "revapo_table2", "revapo_table3", "revapo_table4", "revapo_table_s5",
            "revapo_supp_a3", "mrg_r1"} <= set(pub["tables"])
    assert all(t["source"] for t in pub["tables"].values())
    t1 = published_table("revapo_table1", dataset="iu_xray")
    reva = [r for r in t1["rows"] if r["method"] == "REVA-PO (ours)"][0]
    assert (reva["BLEU_4"], reva["ROUGE_L"], reva["METEOR"]) == (0.199, 0.406, 0.216)
    assert published_row("revapo_table2", "STREAM")["RG"] == 0.218
    assert published_row("revapo_table3", "s1_s2")["R"] == 0.431
    assert published_row("revapo_table4", "w/ CKL, w/o RER")["F1"] == 0.484
    assert published_row("revapo_table4", "no_vapr")["BLEU_4"] == 0.134
    assert published_row("revapo_table_s5", "radgraph_f1")["RG"] == 0.259
    assert published_row("revapo_supp_a3", "before_rl")["P_top1"] == 0.619
    assert published_row("mrg_r1", "mrg_r1", dataset="mimic_cxr")["F1"] == 40.39
    assert our_metric_key("F1") == "ce_micro_f1" and our_metric_key("RG") == "radgraph_partial"
    assert our_metric_key("P", ce_average="example") == "ce_example_precision"
    with pytest.raises(KeyError):
        published_table("table99")


def test_loader(exp):
    assert exp.baseline_arm == "rer_vapr" and exp.reproduces == "revapo_table4" and exp.dataset == "phantom"
    assert [a.name for a in exp.arms] == ["rer_vapr", "ckl", "no_kl", "no_vapr"]
    assert len(exp.runs_of("no_vapr")) == 1 and len(exp.runs_of("no_vapr", complete_only=False)) == 3
    assert exp.values("ckl", "BLEU_4") == {0: 0.09, 1: 0.11, 2: 0.13}
    assert exp.factors("ckl") == {"regularizer": "constant", "reference": "vapr", "reward": "bleu4"}
    assert exp.runs_of("rer_vapr")[0].reset_steps() == [8, 24]
    assert matrix_factors(exp) is None  # 4 of the 3 x 2 regularizer x reference cells: not a matrix study
    assert matrix_factors(exp, min_fill=0.5) == ("regularizer", "reference")


T_HALF = 4.302652729911275 * 0.02 / 3**0.5  # t_{0.975, 2} x sd 0.02 / sqrt(3): BLEU-4 0.10 / 0.12 / 0.14


def test_matrix_markdown(exp, frame):
    _, df = frame
    md = matrix_markdown(exp, df, "BLEU_4", "regularizer", "reference")
    lines = md.splitlines()
    assert lines[0] == "### B-4: regularizer x reference"
    lo, hi = 0.12 - T_HALF, 0.12 + T_HALF
    assert f"| rer | 0.1200 [{lo:.4f}, {hi:.4f}] (n=3) (baseline) | 0.1100 (n=1) |" in lines
    # no decision mark: exploratory (before: "≈", within noise after Holm over the table)
    assert f"| constant | 0.1100 [{lo - 0.01:.4f}, {hi - 0.01:.4f}] (n=3) | – |" in lines


def test_results_frame_numbers(frame):
    spec, df = frame
    assert spec.published == "revapo_table4" and spec.dataset == "mimic_cxr"
    assert "radgraph_partial" in spec.metrics  # the published table has RG; ours is missing -> n = 0
    r = _cell(df, "rer_vapr", "BLEU_4")
    assert (r["mean"], r.n, r.seeds) == (pytest.approx(0.12), 3, "0 1 2")
    assert (r.ci_lo, r.ci_hi) == pytest.approx((0.12 - T_HALF, 0.12 + T_HALF))
    assert pd.isna(r.published) and pd.isna(r.published_source)  # phantom runs: no paper row beside an arm
    # -0.01 on every seed: the sign-flip p is 2/8, and three seeds cannot show more -> within noise
    r = _cell(df, "ckl", "BLEU_4")
    assert r["diff"] == pytest.approx(-0.01) and r.p_value == pytest.approx(0.25) and r.within_noise is True
    assert r.test.startswith("sign-flip")
    r = _cell(df, "no_kl", "BLEU_4")
    assert r["diff"] == pytest.approx(0.0, abs=1e-12) and r.within_noise is True and r.test == "paired t-test"
    # one shared seed: the paired bootstrap over the 30 test reports of seed 0
    r = _cell(df, "no_vapr", "BLEU_4")
    assert (r.n, r["mean"], r.n_paired, r.n_reports) == (1, 0.11, 1, 30)
    assert r.test == "paired bootstrap over test reports (B = 2000)"
    # issue 48: no within_noise flag from one seed (that was 0.158 falsely "not within noise" under a seed-level
    # null); the row says what its interval is: the report bootstrap's, excluding 0
    assert r["diff"] > 0.1 and r.p_value == pytest.approx(1 / 2001) and r.within_noise is None
    assert r.report_interval_excludes_0 is True
    assert r.diff_lo < r["diff"] < r.diff_hi
    r = _cell(df, "no_vapr", "ROUGE_L")  # equal per-report values -> no difference
    assert r["diff"] == 0.0 and r.p_value == 1.0 and r.within_noise is None and r.report_interval_excludes_0 is False
    r = _cell(df, "rer_vapr", "ROUGE_L")
    assert (r.ci_lo, r.ci_hi) == (0.30, 0.30)
    r = _cell(df, "rer_vapr", "radgraph_partial")
    assert r.n == 0 and math.isnan(r["mean"])


def test_paper_rows_sit_beside_an_arm_only_when_everything_matches(mimic_experiment_dir):
    exp = load_experiment(mimic_experiment_dir)
    exp.arm("ckl").factors["reward"] = "chexpert_f1"  # the paper's "w/ CKL, w/o RER" row used BLEU-4
    spec = default_spec(exp, B=200)
    df = results_frame(exp, spec)
    r = _cell(df, "rer_vapr", "BLEU_4")
    assert r.published == 0.143 and r.published_row == "Ours (RER+VAPR)" and r.published_source == "REVA-PO Table 4"
    assert _cell(df, "rer_vapr", "radgraph_partial").published == 0.246
    assert _cell(df, "no_vapr", "BLEU_4").published == 0.134
    r = _cell(df, "ckl", "BLEU_4")
    assert pd.isna(r.published) and r.published_unmatched == "'w/ CKL, w/o RER': reward bleu4 ≠ ours (chexpert_f1)"
    lines = to_markdown(exp, df, spec).splitlines()
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines if ln.startswith("| ")]
    names = [(r[0], r[1].split(":")[0]) for r in rows]
    # matched paper rows under their arm, by the paper's names; the unmatched one after our rows
    assert names.index(("Ours (RER+VAPR)", "paper")) == names.index(("Ours (RER+VAPR) (baseline)", "ours")) + 1
    assert names.index(("w/ CKL, w/o RER", "paper")) > names.index(("w/o VAPR", "ours"))
    assert "Named paper rows not placed beside an arm: ckl: 'w/ CKL, w/o RER': reward bleu4" in "\n".join(lines)


def test_iu_xray_studies_show_iu_xray_rows(tmp_path):
    import shutil

    root = write_experiment(tmp_path / "iu", dataset="iu_xray")
    index = json.loads((root / "index.json").read_text())
    index["reproduces"] = "revapo_table1"
    (root / "index.json").write_text(json.dumps(index))
    exp = load_experiment(root)
    spec = default_spec(exp, B=200)
    assert spec.dataset == "iu_xray"
    md = to_markdown(exp, results_frame(exp, spec), spec)
    # paper rows are labelled with their data set (issue 46)
    assert "| Clinical-BERT | paper: REVA-PO Table 1 (IU-Xray) |" in md and "RGRG" not in md  # RGRG: MIMIC only
    reva_iu = published_row("revapo_table1", "REVA-PO (ours)", dataset="iu_xray")
    assert f"| REVA-PO (ours) | paper: REVA-PO Table 1 (IU-Xray) | – | – | {reva_iu['BLEU_1']:.3f}" in md
    shutil.rmtree(root)


def test_holm_runs_over_every_comparison_of_the_table(frame):
    _, df = frame
    tested = df[df.p_value.notna()]
    assert n_comparisons(df) == len(tested) > 20
    r = _cell(df, "no_vapr", "BLEU_4")
    assert r.p_holm == pytest.approx(min(1.0, r.p_value * len(tested)))  # the smallest p: times m
    assert (tested.p_holm >= tested.p_value - 1e-15).all()


def test_mdd_row(frame):
    _, df = frame
    mdd = mdd_by_metric(df)
    sd = (((0.02**2) * 1 + 0.0) / 2) ** 0.5  # BLEU-4 paired sds: no_kl 0.02, ckl 0 -> root mean square
    assert mdd["BLEU_4"] == (pytest.approx(mdd_paired_t(3, sd)), "seeds n=3")
    assert "radgraph_partial" not in mdd


def test_markdown(exp, frame):
    spec, df = frame
    md = to_markdown(exp, df, spec, "Results")
    lines = md.splitlines()
    header = next(ln for ln in lines if ln.startswith("| Arm"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert cols[:10] == ["Arm", "Source", "n", "Tested at", "B-1", "B-2", "B-3", "B-4", "R-L", "MTR"]
    b4 = cols.index("B-4")

    def row(prefix, source):
        ln = next(ln for ln in lines if ln.startswith(f"| {prefix}") and f"| {source}" in ln)
        return [c.strip() for c in ln.strip("|").split("|")]

    lo, hi = 0.12 - T_HALF, 0.12 + T_HALF
    assert row("Ours (RER+VAPR) (baseline)", "ours")[b4] == f"0.1200 [{lo:.4f}, {hi:.4f}]"
    # The published rows (MIMIC-CXR) are not under our phantom rows but in a table of their own (issue 46).
    assert not [ln for ln in lines if "| paper" in ln]
    title, pub_header, apart = published_apart_rows(df, spec)
    pub = {r[0]: r for r in apart}
    assert "MIMIC-CXR" in title and pub["Ours (RER+VAPR)"][pub_header.index("B-4")] == "0.143"
    assert pub["w/o VAPR"][pub_header.index("B-4")] == "0.134"
    assert row("w/ CKL", "ours")[b4] == f"0.1100 [{lo - 0.01:.4f}, {hi - 0.01:.4f}]"
    assert row("w/o KL", "ours")[b4] == f"0.1200 [{lo:.4f}, {hi:.4f}]"
    no_vapr = row("w/o VAPR", "ours")
    assert no_vapr[2] == "1" and no_vapr[b4] == "0.1100"  # different from the reference (report bootstrap)
    assert row("Ours (RER+VAPR) (baseline)", "ours")[3] == "rl step 16/24 (best_val)"
    assert no_vapr[3] == "rl step 24/24 (best_val)"
    assert row("Ours (RER+VAPR) (baseline)", "ours")[cols.index("RG")] == "–"
    assert row("MDD", "seeds n=3")[b4] == f"{mdd_paired_t(3, 0.02 / 2**0.5):.4f}"
    assert "Seeds: 0, 1, 2" in md and "rer_vapr 3, ckl 3, no_kl 3, no_vapr 1" in md and "t-interval" in md
    assert "paired t-test" in md and "REVA-PO Table 4" in md and "over n = 30 test reports" in md
    assert "exploratory (raw p, no decision)" in md and NOISE_MARK not in md
    diff = differences_markdown(exp, df, spec)
    assert "| w/ CKL, w/o RER | 3 | – |" in diff
    assert "### Exploratory differences" in diff and "raw two-sided p-value" in diff
    assert "-0.0100 [-0.0100, -0.0100] p=0.250 |" in diff and "pH=" not in diff and NOISE_MARK not in diff
    assert "| w/o VAPR | 1 | 30 |" in diff and "p=5.0e-04 |" in diff


def test_latex_and_csv(exp, frame):
    spec, df = frame
    tex = to_latex(exp, df, spec, "Table 4", "tab:t4")
    assert tex.count(r"\begin{tabular}") == 1 and r"\toprule" in tex and r"\label{tab:t4}" in tex
    assert r"0.1200 [0.0703, 0.1697] &" in tex and r"$\approx$" not in tex  # no_kl row: no decision mark
    assert r"w/ CKL, w/o RER" in tex and "&" in tex and NOISE_MARK not in tex
    back = pd.read_csv(io.StringIO(to_csv(df)))
    assert len(back) == len(df) and {"arm", "metric", "mean", "ci_lo", "ci_hi", "n", "published", "p_value",
                                     "within_noise", "report_interval_excludes_0"} <= set(back.columns)
    assert back[(back.arm == "ckl") & (back.metric == "BLEU_4")]["diff"].iloc[0] == pytest.approx(-0.01)


def test_loader_without_index(tmp_path, experiment_dir):
    """A folder of RL run directories: arms from their configs, test scores from evals.jsonl test lines."""
    import shutil

    for i, reg in enumerate(("rer", "constant")):
        src = experiment_dir / "stages" / f"rl-seed0-{'rer_vapr' if reg == 'rer' else 'ckl'}"
        dst = tmp_path / f"run{i}"
        shutil.copytree(src, dst)
        with open(dst / "evals.jsonl", "a") as f:
            f.write(json.dumps({"split": "test", "BLEU_4": 0.2 + i}) + "\n")
    exp = load_experiment(tmp_path)
    assert sorted(a.name for a in exp.arms) == ["constant_vapr", "rer_vapr"]
    assert exp.values("constant_vapr", "BLEU_4") == {0: 1.2}
    with pytest.raises(FileNotFoundError):
        load_experiment(tmp_path / "nothing")


@pytest.mark.parametrize("study, dataset, shown", [("table1_iu_xray", "iu_xray", "iu_xray"),
                                                   ("table1_mimic_cxr", "phantom", "mimic_cxr"),
                                                   ("table2_mimic_cxr", "mimic_cxr", "mimic_cxr")])
def test_tables_1_and_2_pages(tmp_path, study, dataset, shown):
    """Our rows on the study's data set beside the published baselines of that data set; the paper's REVA-PO row
    sits under our full method only when the data set is the paper's."""
    from reports.build import build_report
    from tests.reports.conftest import EXPERIMENTS, write_study_experiment

    root = write_study_experiment(tmp_path / study, EXPERIMENTS / f"{study}.yaml", dataset=dataset)
    exp = load_experiment(root)
    spec = default_spec(exp, B=200)
    table = "revapo_table1" if study.startswith("table1") else "revapo_table2"
    assert (spec.published, spec.dataset) == (table, shown)
    md = to_markdown(exp, results_frame(exp, spec), spec)
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in md.splitlines() if ln.startswith("| ")]
    names = [(r[0], r[1].split(":")[0]) for r in rows]
    published = [r.get("label") or r.get("arm") for r in published_table(table, dataset=shown)["rows"]]
    # every baseline of that data set, beside ours only when ours are on it (issue 46)
    assert {n for n, src in names if src == "paper"} == (set(published) if dataset == shown else set())
    ours = [n for n, src in names if src == "ours"]
    assert ours == ["REVA-PO (this harness) (baseline)", "base model (no fine-tuning)", "stage 1 (warm-up)",
                    "stages 1+2 (SFT)"]
    beside = names[names.index(("REVA-PO (this harness) (baseline)", "ours")) + 1]
    assert (beside == ("REVA-PO (ours)", "paper")) == (dataset != "phantom")
    tested = {r[0]: r[3] for r in rows if r[1] == "ours"}
    assert tested["stage 1 (warm-up)"] == "warmup: end" and tested["base model (no fine-tuning)"] == "base model"
    if table == "revapo_table2":
        cols = next(r for r in rows if r[0] == "Arm")
        assert cols[4:8] == ["P", "R", "F1", "RG"]
    page = build_report(root, tmp_path / "report", B=200).read_text(encoding="utf-8")
    assert "Fig. 4: test reports per stage beside the reference" in page and "Clinical-BERT" in page
    assert ("not comparable with ours" in page) == (dataset != shown)
