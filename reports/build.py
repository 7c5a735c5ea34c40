"""`build_report(experiment_dir, out_dir)`: every table and figure of one experiment, and index.html.

Reads only the experiment's index.json and the run records it points to (reports/experiment.py). Writes
  <out>/tables/results.{md,tex,csv}      our numbers beside the published ones (reports/tables/)
  <out>/tables/differences.{md,csv}      arm - baseline arm, paired test, within-noise flag
  <out>/tables/matrix_<metric>.md        matrix studies (two factors varied)
  <out>/tables/supp_a.{md,csv}           Supp. A.1 / A.3 statistics when analysis_*.json files exist
  <out>/figures/*.png, *.pdf             reports/figures/
  <out>/results.md                       all Markdown tables
  <out>/index.html                       one self-contained page (reports/html.py)
Defaults: <out> = <experiment_dir>/report.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from harness.runs.schema import IndexKey
from reports import figures as F
from reports import labeler_credit as LC
from reports import overoptimization as OO
from reports.analyses import within_group_std
from reports.bootstrap import DEFAULT_B
from reports.examples import STAGE_NAMES, fig4_table, find_inversion, inversion_rows, text_figure
from reports.experiment import Experiment, load_experiment
from reports.figures.verdicts import fig_verdicts
from reports.html import Figure, Table, write_page
from reports.published import published_table
from reports.stages import stage_table
from reports.stats import summarize
from reports.tables import (
    DIFFERENCES_NOTE,
    TableSpec,
    default_spec,
    differences_markdown,
    differences_rows,
    matrix_factors,
    matrix_markdown,
    notes,
    published_apart_rows,
    results_frame,
    to_csv,
    to_latex,
    to_markdown,
    wide_rows,
)
from reports.tables.cells import md_table
from reports.verdicts import rule_text, study_verdicts, verdict_rows


def _fmt_ci(s, digits: int = 3) -> str:
    if s.n == 0:
        return "–"
    return f"{s.mean:.{digits}f}" + (f" [{s.lo:.{digits}f}, {s.hi:.{digits}f}]" if s.n > 1 else "") + f" (n={s.n})"


SHARED_POLICY_NOTE = ("A policy that several seeds share (the SFT model before RL, when a study's stage_seeds gives "
                      "every seed one SFT model) counts once: its n is the number of distinct models.")


def supp_a_tables(exp: Experiment, B: int = DEFAULT_B, seed: int = 0) -> tuple[list[Table], pd.DataFrame]:
    """Supp. A.3 (P_sign, P_top1) and A.1 (mean within-group std) over the seeds of each analysed arm (the
    baseline arm first): a study may analyse several arms, e.g. each side of a contrast."""
    tables, records = [], []
    for arm in F.analysis_arms(exp, "sign-alignment"):
        vals = F.alignment_values(exp, arm)
        per_seed = F.alignment_stats(exp, arm)
        pub = {r["arm"]: r for r in published_table("revapo_supp_a3")["rows"]}
        rows = []
        for pol in ("before", "after"):
            cells = [pol + " RL"]
            own = F.distinct_policy_seeds(exp, "sign-alignment", arm, pol)
            for stat, pkey in (("p_sign", "P_sign"), ("p_sign_nonzero", None), ("p_top1", "P_top1")):
                by_seed = {k: v for k, v in vals.get(pol, {}).get(stat, {}).items() if k in own}
                s = summarize(list(by_seed.values()))
                cells.append(_fmt_ci(s))
                published = pub[f"{pol}_rl"][pkey] if pkey else None
                if pkey:
                    cells.append(f"{published:.3f}")
                records.append({"table": "supp_a3", "arm": arm, "policy": pol, "stat": stat, "mean": s.mean,
                                "ci_lo": s.lo, "ci_hi": s.hi, "n": s.n,
                                "seeds": " ".join(map(str, sorted(by_seed))), "published": published})
            stats = [st for k, st in per_seed.get(pol, {}).items() if k in own]
            used = sum(int(st.get("p_top1", {}).get("n_groups_used", 0)) for st in stats)
            total = sum(int(st.get("p_top1", {}).get("n_groups", 0)) for st in stats)
            cands = sum(int(st.get("p_sign", {}).get("n_counted", 0)) for st in stats)
            cells += [str(cands), f"{used} of {total}"]
            rows.append(cells)
        seeds = sorted({s for p in vals.values() for st in p.values() for s in st})
        tables.append(Table(
            f"Supp. A.3: BLEU-4 / CheXpert-F1 agreement (arm {arm})",
            ["Policy", "P_sign (ours)", "P_sign (paper)", "variant: P_sign, non-zero advantages only",
             "P_top1 (ours)", "P_top1 (paper)", "P_sign candidates", "P_top1 groups used"], rows,
            [f"Seeds {seeds} (n = {len(seeds)}): mean [95% t-interval over seeds]. P_sign is REVA-PO Supp. A.3's "
             "formula: sign agreement of the two Eq. 2 advantages averaged over all |D_val| x G candidates "
             "(sign(0) = 0, so two zero advantages agree). The variant counts only candidates whose two "
             "advantages are both non-zero. P_top1 (no formula in the paper): share of groups whose BLEU-4-best "
             "candidate is also F1-best, ties scored fractionally; its denominator is the groups where both "
             "rewards vary (the counts are summed over seeds; reports/analyses.py). Paper: MIMIC-CXR "
             "validation set, |D_val| = 2130, G = 4.", SHARED_POLICY_NOTE]))
    for arm in F.analysis_arms(exp, "reward-variance"):
        found = [(r, r.analysis("reward-variance")) for r in exp.runs_of(arm)]
        found = [(r, d) for r, d in found if d]
        names = list(dict.fromkeys(k for _, d in found for p in d["policies"].values() for k in p["rewards"]))
        rows = []
        for name in names:
            cells = [name]
            for pol in ("before", "after"):
                own = F.distinct_policy_seeds(exp, "reward-variance", arm, pol)
                # recomputed from the stored rewards (reports/analyses.py), not from any summary in the file
                by_seed = {r.seed: float(within_group_std(d["policies"][pol]["rewards"][name]).mean()) for r, d in found
                           if name in d["policies"].get(pol, {}).get("rewards", {}) and r.seed in own}
                s = summarize(list(by_seed.values()))
                cells.append(_fmt_ci(s, 4))
                records.append({"table": "supp_a1", "arm": arm, "policy": pol, "stat": f"mean_std_{name}",
                                "mean": s.mean, "ci_lo": s.lo, "ci_hi": s.hi, "n": s.n,
                                "seeds": " ".join(map(str, sorted(by_seed))), "published": None})
            rows.append(cells)
        seeds = sorted(r.seed for r, _ in found)
        tables.append(Table(
            f"Supp. A.1 / Fig. S5: mean within-group reward std (arm {arm})", ["Reward", "before RL", "after RL"],
            rows, [f"Seeds {seeds} (n = {len(seeds)}): per seed, the mean over validation prompts of the population "
                   f"std of the G rewards of a prompt; then mean [95% t-interval] over seeds.", SHARED_POLICY_NOTE]))
    return tables, pd.DataFrame.from_records(records)


def _table_md(t: Table) -> str:
    cells = [[c.replace("|", "\\|").replace("\n", " ") for c in r] for r in [t.header, *t.rows]]
    return (f"### {t.title}\n\n| " + " | ".join(cells[0]) + " |\n|" + "---|" * len(t.header) + "\n"
            + "\n".join("| " + " | ".join(r) + " |" for r in cells[1:]) + "\n\n"
            + "\n".join(f"- {n}" for n in t.notes) + "\n")


def example_sections(exp: Experiment, fdir: Path) -> tuple[list[Table], list[Figure], list[str]]:
    """Fig. 4 and Fig. S6 as tables (the texts) and as figures; what could not be drawn, and why."""
    tables, figs, skipped = [], [], []
    fig4 = fig4_table(exp)
    if fig4:
        columns, rows = fig4
        seed = columns[0].seed
        title = "Fig. 4: test reports per stage beside the reference"
        tables.append(Table(title, ["Report", "Source", "Findings", "Text"], rows, [
            f"Test split, seed {seed}; columns: {'; '.join(c.label for c in columns)}. Findings: the eval stage's "
            "labels (positive = 1) of each text; '+' = also a ground-truth finding, '(FP)' = not one, 'missed' = "
            "ground-truth findings the text lacks. Ground truth: the reference report's labels (the synthetic "
            "ground truth on phantom data). Reports chosen: a positive ground-truth finding first, then where the "
            "stages disagree most (reports/examples.py)."], ["paper" if r[1] == "Reference" else "" for r in rows]))
        blocks = [(f"[{r[0]}] {r[1]} — {r[2]}", r[3], "#1f4e79" if r[1] == "Reference" else "#7a3b00")
                  for r in rows]
        figs.append(Figure(title, text_figure(title, blocks, fdir, "fig4_examples")[0],
                           "The texts of the table 'Fig. 4' (reference, then each stage's report)."))
    else:
        need = ", ".join(STAGE_NAMES.values())
        skipped.append(f"Fig. 4: no test report decoded by every column ({need}); the eval stage writes them to "
                       "predictions_final_test.jsonl")
    inv = find_inversion(exp)
    if inv:
        opposite = ("opposite orders" if inv.tau <= -1 + 1e-9
                    else f"the most discordant orders found (tau {inv.tau:.2f})")
        title = f"Fig. S6: reward inversion, BLEU-4 vs {inv.clinical}"
        tables.append(Table(title, ["Text", "BLEU-4 (rank)", f"{inv.clinical} (rank)", "Report"],
                            inversion_rows(inv), [
            f"Validation report {inv.report_id}, arm {inv.arm}, seed {inv.seed}, {inv.policy} RL "
            f"(analysis_{inv.kind}.json): the G = {len(inv.candidates)} sampled candidates, ranked in {opposite} "
            f"by BLEU-4 and {inv.clinical} (Kendall's tau-b = {inv.tau:.2f}). REVA-PO's Fig. S6 shows RadGraph "
            "F1 preferring a less readable candidate; the clinical reward here is the first of radgraph_f1, "
            "entity_f1, chexpert_f1 that the records hold."]))
        blocks = [("Reference", r[3], "#1f4e79") if r[0] == "Reference" else
                  (f"{r[0]}: BLEU-4 {r[1]}, {inv.clinical} {r[2]}", r[3], "#7a3b00") for r in inversion_rows(inv)]
        figs.append(Figure(title, text_figure(title, blocks, fdir, "fig_s6_reward_inversion")[0],
                           f"Candidates of one validation group; tau-b {inv.tau:.2f}."))
    else:
        skipped.append("Fig. S6: no analysis record with candidates that BLEU-4 and a clinical reward both rank "
                       "(add `analyses: [reward_variance]` to the study)")
    return tables, figs, skipped


def _fig2_bounds(exp: Experiment) -> list[tuple[str, float, float, float]]:
    out = [("MIMIC-CXR (0.05/0.10/0.12)", 0.05, 0.10, 0.12), ("IU-Xray (0.05/0.10/0.15)", 0.05, 0.10, 0.15)]
    for a in exp.arms:
        rl = exp.rl_config(a.name)
        if rl.get("regularizer") == "rer" and all(k in rl for k in ("beta_min", "beta_base", "beta_max")):
            b = (float(rl["beta_min"]), float(rl["beta_base"]), float(rl["beta_max"]))
            if b not in {x[1:] for x in out}:
                out.append((f"this experiment ({b[0]:g}/{b[1]:g}/{b[2]:g})", *b))
            break
    return out


def test_reports_line(exp: Experiment) -> str:
    """What the test reports are: one shared split (verdicts are about that split) or a fresh draw per seed."""
    if exp.index.get(IndexKey.TEST_REPORTS) == "per_seed":
        return ("Test reports: a fresh draw of phantom studies per seed, none trained on (test_reports: per_seed): "
                "seed-level results are about the testbed's population.")
    return ("Test reports: one shared test split for every seed (test_reports: shared): seed-level results are about "
            "this split; a persistent arm x report effect of it is not averaged out by more seeds.")


def verdict_items(exp: Experiment, tdir: Path, fdir: Path, md_parts: list[str]) -> list[Table | Figure]:
    """The page's lead: the declared primary contrasts decided (reports/verdicts.py), as a forest plot and a
    table; [] when the study declares no contrasts."""
    verdicts = study_verdicts(exp)
    if verdicts is None:
        return []
    labels = {a.name: a.label for a in exp.arms}
    header, rows = verdict_rows(verdicts, labels)
    note = rule_text(verdicts)
    md = "## Verdicts\n\n" + md_table(header, rows) + f"\n\n- {note}\n"
    (tdir / "verdicts.md").write_text(md, encoding="utf-8")
    md_parts.append(md)
    png = fig_verdicts(verdicts.decisions, fdir, labels)[0]
    return [Figure("Verdicts: each declared contrast", png, "Difference arm - baseline and its interval in units "
                   "of the contrast's delta; the shaded band is ± delta; the word is the rule's outcome."),
            Table("Verdicts (declared primary contrasts)", header, rows, [note])]


def build_report(experiment_dir: str | Path, out_dir: str | Path | None = None, *, B: int = DEFAULT_B,
                 seed: int = 0, window: int | None = None, metrics: list[str] | None = None,
                 optuna_studies: list[tuple[Path, object]] = ()) -> Path:
    """Write tables, figures and index.html for the experiment; return the path of index.html.
    `optuna_studies`: (storage file, optuna.Study) pairs the caller opened (harness/search/stored.py), drawn as
    optimisation histories."""
    exp = load_experiment(experiment_dir)
    out = Path(out_dir) if out_dir else Path(experiment_dir) / "report"
    tdir, fdir = out / "tables", out / "figures"
    tdir.mkdir(parents=True, exist_ok=True)
    fdir.mkdir(parents=True, exist_ok=True)

    spec: TableSpec = default_spec(exp, metrics, B=B, seed=seed)
    df = results_frame(exp, spec)
    md_parts = [f"# {exp.title}\n"]
    verdict_section = verdict_items(exp, tdir, fdir, md_parts)
    html_tables: list[Table] = []
    texts: list[str] = []
    if not len(df) or not (df.n > 0).any():
        texts.append("No test scores found: no run has eval/metrics.json (or a test line in its evals.jsonl) yet.")
        md_parts.append(texts[-1] + "\n")
    if len(df):
        md = to_markdown(exp, df, spec, "Results (test split)")
        (tdir / "results.md").write_text(md, encoding="utf-8")
        (tdir / "results.tex").write_text(to_latex(exp, df, spec, exp.title, f"tab:{exp.study}"), encoding="utf-8")
        to_csv(df, tdir / "results.csv")
        md_parts.append(md)
        header, rows = wide_rows(df, spec)
        html_tables.append(Table("Results (test split)", header, rows, notes(exp, df, spec),
                                 ["paper" if r[1].startswith("paper") else "" for r in rows]))
        apart = published_apart_rows(df, spec)
        if apart:  # published rows of another data set: a table of their own, labelled with it
            html_tables.append(Table(apart[0], apart[1], apart[2], [], ["paper"] * len(apart[2])))
            md_parts.append(_table_md(html_tables[-1]))
        diff_md = differences_markdown(exp, df, spec)
        if diff_md:
            (tdir / "differences.md").write_text(diff_md, encoding="utf-8")
            to_csv(df[df.baseline_arm.notna() & (df.arm != df.baseline_arm)], tdir / "differences.csv")
            md_parts.append(diff_md)
            header, rows = differences_rows(df, spec.digits)
            html_tables.append(Table(f"Exploratory differences to the baseline arm {exp.baseline_arm}", header, rows,
                                     [DIFFERENCES_NOTE]))
        fac = matrix_factors(exp)
        if fac:
            for metric in [m for m in ("BLEU_4", "ce_micro_f1", "entity_f1") if m in spec.metrics]:
                mm = matrix_markdown(exp, df, metric, *fac, digits=spec.digits)
                (tdir / f"matrix_{metric}.md").write_text(mm, encoding="utf-8")
                md_parts.append(mm)
                lines = [ln for ln in mm.splitlines() if ln.startswith("|")]
                cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
                html_tables.append(Table(mm.splitlines()[0].lstrip("# "), cells[0], cells[2:]))

    a_tables, a_frame = supp_a_tables(exp, B, seed)
    if len(a_frame):
        to_csv(a_frame, tdir / "supp_a.csv")
        a_md = [_table_md(t) for t in a_tables]
        (tdir / "supp_a.md").write_text("\n".join(a_md), encoding="utf-8")
        md_parts += a_md

    figs: list[Figure] = []
    skipped: list[str] = []
    if OO.has_gold(exp):  # validations that log gold, proxy and KL to the SFT policy (issue 12)
        oo_table = OO.end_table(exp)
        (tdir / "overoptimization.md").write_text(OO.table_markdown(oo_table), encoding="utf-8")
        md_parts.append(OO.table_markdown(oo_table))
        html_tables.append(oo_table)
        if OO.has_disagreement(exp):
            dis_table = OO.disagreement_table(exp)
            (tdir / "labeler_gold_disagreement.md").write_text(OO.table_markdown(dis_table), encoding="utf-8")
            md_parts.append(OO.table_markdown(dis_table))
            html_tables.append(dis_table)
        credits = LC.credit_counts(exp)
        # The clinical rewards' credit that the gold reader rejects, with examples (issue 44); its own file, so
        # results.md keeps its tables.
        if credits:
            credit_table = LC.credit_table(exp, credits)
            credit_md = OO.table_markdown(credit_table) + "\n" + LC.examples_markdown(credits)
            (tdir / "labeler_credit.md").write_text(credit_md, encoding="utf-8")
            html_tables.append(credit_table)
        figs.append(Figure("Over-optimisation: gold and proxy against sqrt(KL to the SFT policy)",
                           OO.fig_frontier(exp, fdir)[0], "RL validations (evals.jsonl); reports/overoptimization.py."))
    png = F.fig2_rer_beta(fdir, _fig2_bounds(exp))[0]
    figs.append(Figure("Fig. 2(a,b): RER beta vs normalised reference entropy", png,
                       "Computed with regularizers.rer.rer_betas over one group whose entropies span [0, 1]."))
    panels = F.fig3_curves(exp, fdir, window)
    titles = {"a": "Fig. 3(a): reward, RER vs constant KL", "b": "Fig. 3(b): reward, no KL vs KL",
              "c": "Fig. 3(c): reward, with vs without VAPR", "d": "Fig. 3(d): KL pressure with VAPR resets"}
    need = {"a": "arms with regularizer rer and constant under one reference strategy",
            "b": "an arm with regularizer none and an RER arm", "c": "RER arms with vapr and with static references",
            "d": "an RER arm with the vapr reference"}
    for p in "abcd":
        if p in panels:
            figs.append(Figure(titles[p], panels[p][0], "Mean over seeds ± 1 std across seeds (n in the legend); "
                               "steps.jsonl of each arm's RL run."))
        else:
            skipped.append(f"{titles[p]}: needs {need[p]}")
    for key, name, ylabel, title in (("reward_mean", "fig_reward_all", "mean sampling reward", "Sampling reward"),
                                     ("kl_mean", "fig_kl_all", "mean KL to the reference", "KL to the reference"),
                                     ("entropy_mean", "fig_entropy_all", "mean token entropy", "Policy entropy")):
        paths = F.fig_all_arms(exp, fdir, key, name, ylabel, f"{title}, every arm", window)
        if paths:
            figs.append(Figure(f"{title}, every arm", paths[0], "Mean over seeds ± 1 std across seeds."))
    paths = F.fig_val_scores(exp, fdir)
    if paths:
        figs.append(Figure("Validation score per arm", paths[0], "evals.jsonl val_score; dotted lines: VAPR resets."))
    paths = F.fig_s5_reward_std(exp, fdir)
    if paths:
        figs.append(Figure("Fig. S5: within-group reward std before / after RL", paths[0],
                           "From analysis_reward-variance.json (the study's `analyses`, or `regbench analyze "
                           "reward-variance RUN`)."))
    else:
        skipped.append("Fig. S5: no usable analysis_reward-variance.json in any RL run (add `analyses: "
                       "[reward_variance]` to the study, or run `regbench analyze reward-variance RUN`)")
    paths = F.fig_a3_alignment(exp, fdir)
    if paths:
        figs.append(Figure("Supp. A.3: P_sign and P_top1 before / after RL", paths[0],
                           "From analysis_sign-alignment.json; black diamonds: REVA-PO Supp. A.3."))
    else:
        skipped.append("Supp. A.3: no analysis_sign-alignment.json with a countable P_sign / P_top1 in any RL "
                       "run (add `analyses: [sign_alignment]` to the study, or run `regbench analyze "
                       "sign-alignment RUN`)")
    ex_tables, ex_figs, ex_skipped = example_sections(exp, fdir)
    figs += ex_figs
    skipped += ex_skipped
    md_parts += [_table_md(t) for t in ex_tables]
    for db, study in optuna_studies:
        paths = F.fig_optuna(study, fdir)
        if paths:
            name = paths[0].stem.removeprefix("fig_optuna_")
            figs.append(Figure(f"Optuna: {name}", paths[0], f"optimisation history; study file {db}"))

    md_parts.append("## Figures\n\n" + "\n".join(f"- {f.title}: figures/{f.png.name} (and .pdf)" for f in figs))
    if skipped:
        md_parts.append("\nNot drawn:\n\n" + "\n".join(f"- {s}" for s in skipped))
    (out / "results.md").write_text("\n\n".join(md_parts) + "\n", encoding="utf-8")

    n_by_arm = {a.name: len(exp.runs_of(a.name)) for a in exp.arms}
    status = pd.Series([r.status for r in exp.runs]).value_counts().to_dict() if exp.runs else {}
    meta = [f"Study: {exp.study} — preset: {exp.preset or 'n/a'} — data set: {exp.dataset or 'n/a'} — "
            f"reproduces: {exp.reproduces or 'nothing published'}",
            f"Seeds: {', '.join(map(str, exp.seeds))}; complete runs (n) per arm: "
            + ", ".join(f"{k} {v}" for k, v in n_by_arm.items()),
            "Runs by status: " + ", ".join(f"{k} {v}" for k, v in status.items())
            + ("; pending runs were asked for and have not ended yet" if status.get("pending") else "")
            + (f"; this page shows {len(exp.arms)} of the study file's {exp.study_arms} arms: its other "
               f"{len(exp.not_requested)} arm x seed runs were not requested (`regbench experiment run` of the study "
               "file runs them)" if exp.not_requested else ""),
            f"Baseline arm: {exp.baseline_arm or 'none'}; intervals: 95% t-interval over seeds; paired t-test over "
            f"shared seeds, or the paired bootstrap over test reports (B = {B}) for one shared seed (reports/stats.py, "
            f"reports/bootstrap.py); differences are exploratory except the declared contrasts (Verdicts).",
            test_reports_line(exp),
            f"Source: {Path(experiment_dir).resolve()}; built {time.strftime('%Y-%m-%d %H:%M:%S')}."]
    failed = [f"{r.arm} seed {r.seed}: {r.error}" for r in exp.runs if r.status == "failed"]
    stages = stage_table(exp)
    sections = [*([("Verdicts", verdict_section)] if verdict_section else []),
                ("Tables", texts + html_tables + a_tables + ([stages] if stages else [])), ("Figures", figs),
                ("Examples (Fig. 4, Fig. S6: the texts)", ex_tables),
                ("Not drawn", skipped), ("Failed runs", failed)]
    return write_page(out / "index.html", exp.title, meta, sections)
