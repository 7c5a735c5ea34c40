"""reports/verdicts.py: the page leads with the declared primary contrasts, decided; with none declared there is
no verdict section (every difference is exploratory)."""

from __future__ import annotations

import json
import math

from harness.cli.report_commands import build_experiment_report
from reports.experiment import load_experiment
from reports.verdicts import current_look, paired_differences, rule_text, study_verdicts
from tests.reports.conftest import write_experiment

CONTRASTS = [{"arm": "ckl", "baseline": "rer_vapr", "metric": "BLEU_4", "delta": 0.02},
             {"arm": "no_kl", "baseline": "rer_vapr", "metric": "BLEU_4", "delta": 0.005},
             {"arm": "no_kl", "baseline": "rer_vapr", "metric": "ce_micro_f1", "delta": 0.01}]


def _declared(tmp_path, decide=None):
    root = write_experiment(tmp_path / "e")
    index = json.loads((root / "index.json").read_text())
    index.update(contrasts=CONTRASTS, decide=decide or {"alpha": 0.05, "looks": None, "spending": "obrien_fleming",
                                                                   "rule": "fixed_n"})
    (root / "index.json").write_text(json.dumps(index))
    return root


def test_the_declared_contrasts_are_decided_from_the_seeds_paired_differences(tmp_path):
    exp = load_experiment(_declared(tmp_path))
    seeds, diffs = paired_differences(exp, "no_kl", "rer_vapr", "BLEU_4")
    assert seeds == [0, 1, 2] and diffs == [0.12 - 0.10, 0.10 - 0.12, 0.14 - 0.14]
    v = study_verdicts(exp)
    got = [(d.contrast.arm, d.contrast.metric, d.outcome, d.n) for d in v.decisions]
    # ckl - rer_vapr = -0.01 on every seed: inside +-0.02 -> equivalent; no_kl: +-0.02 around 0 with a 0.005 band
    # -> undecided; ce_micro_f1 is the same for every arm -> equivalent.
    assert got == [("ckl", "BLEU_4", "equivalent", 3), ("no_kl", "BLEU_4", "undecided", 3),
                   ("no_kl", "ce_micro_f1", "equivalent", 3)]
    undecided = v.decisions[1]
    assert undecided.seeds_needed is not None and undecided.seeds_needed > 3
    assert math.isclose(undecided.diff, 0.0, abs_tol=1e-12) and undecided.lo < -0.005 < 0.005 < undecided.hi


def test_a_sequential_rule_decides_at_the_look_the_seeds_reached():
    assert current_look(3, [3, 5, 8]) == 1 and current_look(6, [3, 5, 8]) == 2 and current_look(2, [3, 5]) == 0
    assert current_look(4, None) is None


def test_before_the_first_look_nothing_is_decided(tmp_path):
    exp = load_experiment(_declared(tmp_path, {"alpha": 0.05, "looks": [5, 8], "spending": "obrien_fleming"}))
    assert [d.outcome for d in study_verdicts(exp).decisions] == ["undecided"] * 3


def test_the_page_leads_with_the_verdicts_and_a_forest_plot(tmp_path):
    page = build_experiment_report(_declared(tmp_path), tmp_path / "report", B=200)
    md = (tmp_path / "report" / "results.md").read_text()
    assert md.index("## Verdicts") < md.index("Results (test split)")
    assert "no_kl" in md and "undecided (about" in md and "two one-sided tests" in md
    assert (tmp_path / "report" / "figures" / "fig_verdicts.png").stat().st_size > 5000
    text = page.read_text()
    assert text.index("<h2>Verdicts</h2>") < text.index("<h2>Tables</h2>")


def test_no_declared_contrasts_no_verdict_section(tmp_path):
    root = write_experiment(tmp_path / "e")
    assert study_verdicts(load_experiment(root)) is None
    build_experiment_report(root, tmp_path / "report", B=200)
    assert "## Verdicts" not in (tmp_path / "report" / "results.md").read_text()


def test_the_rule_says_which_guarantee_its_outcomes_have(tmp_path):
    # issue 48: a study folder without a rule (seeds possibly added by hand) is decided by the anytime rule and says
    # so; a fixed-n study says its guarantee needs n fixed in advance
    anytime = study_verdicts(load_experiment(_declared(tmp_path / "a", {"alpha": 0.05, "looks": None})))
    assert anytime.rule == "anytime" and all(d.rule == "anytime" for d in anytime.decisions)
    assert "anytime-valid" in rule_text(anytime) and "Assumption: the per-seed paired differences" in rule_text(anytime)
    fixed = study_verdicts(load_experiment(_declared(tmp_path / "b")))
    assert fixed.rule == "fixed_n" and "fixed n: valid only if n was fixed in advance" in rule_text(fixed)
    looks = {"alpha": 0.05, "looks": [2, 3], "spending": "obrien_fleming", "rule": "fixed_n"}
    planned = study_verdicts(load_experiment(_declared(tmp_path / "c", looks)))
    assert "planned looks: valid only if the looks and the maximum were fixed" in rule_text(planned)
