"""reports/figures/: the RER mapping of Fig. 2 and the files of every figure (non-empty PNG and PDF)."""

from __future__ import annotations

import pytest

from reports import figures as F
from reports.experiment import load_experiment


def test_rer_curves_endpoints():
    x, pos, neg = F.rer_curves(0.05, 0.10, 0.12, k=11)
    assert x[0] == 0.0 and x[-1] == pytest.approx(1.0, abs=1e-5)
    assert pos[0] == pytest.approx(0.10) and pos[-1] == pytest.approx(0.05, abs=1e-6)  # A > 0: toward beta_min
    assert neg[0] == pytest.approx(0.10) and neg[-1] == pytest.approx(0.12, abs=1e-6)  # A < 0: toward beta_max
    assert (pos[1:] <= pos[:-1]).all() and (neg[1:] >= neg[:-1]).all()


def test_kl_pressure_and_panels(experiment_dir):
    assert F.kl_pressure({"kl_loss": 0.3, "beta_mean": 1, "kl_mean": 2}) == 0.3
    assert F.kl_pressure({"beta_mean": 0.1, "kl_mean": 2.0}) == pytest.approx(0.2)
    assert F.kl_pressure({"kl_mean": 2.0}) is None
    exp = load_experiment(experiment_dir)
    panels = F.fig3_panels(exp)
    assert set(panels) == {"a", "b", "c", "d"}
    assert panels["a"][0] == [("RER (vapr)", ["rer_vapr"]), ("constant KL (vapr)", ["ckl"])]
    assert panels["c"][0] == [("RER + VAPR", ["rer_vapr"]), ("RER, static reference", ["no_vapr"])]
    frame, w = F.band(exp.runs_of("rer_vapr"), "reward_mean", window=1)
    assert w == 1 and len(frame) == 24 and (frame.n == 3).all()


def _is_png(p):
    return p.stat().st_size > 1000 and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _is_pdf(p):
    return p.stat().st_size > 1000 and p.read_bytes()[:5] == b"%PDF-"


def test_report_figure_files(built_report):
    figs = built_report.parent / "figures"
    names = ["fig2_rer_beta", "fig3a", "fig3b", "fig3c", "fig3d", "fig_reward_all", "fig_kl_all", "fig_val_score",
             "fig_s5_reward_std", "fig_a3_alignment"]
    for name in names:
        assert _is_png(figs / f"{name}.png"), name
        assert _is_pdf(figs / f"{name}.pdf"), name
    tables = built_report.parent / "tables"
    for name in ("results.md", "results.tex", "results.csv", "differences.md", "supp_a.md", "supp_a.csv"):
        assert (tables / name).stat().st_size > 100, name


def test_missing_panels_are_skipped(experiment_dir, tmp_path):
    import json
    import shutil

    src = json.loads((experiment_dir / "index.json").read_text())
    shutil.copytree(experiment_dir, tmp_path / "e", symlinks=True)
    src["arms"] = [a for a in src["arms"] if a["name"] == "rer_vapr"]
    src["runs"] = [r for r in src["runs"] if r["arm"] == "rer_vapr"]
    (tmp_path / "e" / "index.json").write_text(json.dumps(src))
    exp = load_experiment(tmp_path / "e")
    assert set(F.fig3_panels(exp)) == {"d"}


def test_optuna_history(tmp_path):
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="demo")  # in memory: reports/ draws a study it is handed
    assert F.fig_optuna(study, tmp_path / "figs") == []  # no complete trial: nothing drawn
    study.optimize(lambda t: (t.suggest_float("x", -1, 1) - 0.2) ** 2, n_trials=5)
    out = F.fig_optuna(study, tmp_path / "figs")
    assert _is_png(out[0]) and _is_pdf(out[1]) and out[0].name == "fig_optuna_demo.png"


def test_an_arm_that_never_measured_kl_is_named_not_drawn_as_zero(experiment_dir, tmp_path, monkeypatch):
    import json

    # The no-KL arm logs no kl_mean (no reference pass): it must not appear as a flat 0 curve.
    for steps in experiment_dir.glob("stages/rl-seed*-no_kl/steps.jsonl"):
        rows = [json.loads(line) for line in steps.read_text().splitlines()]
        steps.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "kl_mean"}) + "\n" for r in rows))
    seen = {}

    def fake_curves(exp, groups, key, ylabel, title, window, resets=False):
        seen.update(groups=[g for g, _ in groups], title=title)
        return F.plt.figure()

    monkeypatch.setattr(F.curves, "curves_figure", fake_curves)  # the module fig_all_arms looks it up in
    exp = load_experiment(experiment_dir)
    F.fig_all_arms(exp, tmp_path, "kl_mean", "fig_kl_all", "mean KL", "KL to the reference")
    assert "w/o KL" not in seen["groups"] and "not computed: w/o KL" in seen["title"]
