"""Study files declare their primary contrasts (`contrasts:`) and the decision rule (`decide:`); index.json
records both for the report (harness/experiments/study.py)."""

from __future__ import annotations

import pytest

from harness.config import ConfigError
from harness.experiments import build_plan, load_study
from harness.experiments.index import build_index
from harness.runs.schema import IndexKey
from tests.harness.test_experiments import ARMS, write_study

CONTRASTS = """contrasts:
  - {arm: b, metrics: {ce_micro_f1: 0.02, BLEU_4: 0.005}}
  - {arm: c, baseline: b, metrics: {ce_micro_f1: 0.03}}
decide: {alpha: 0.1, looks: [3, 5]}
"""


def test_contrasts_flatten_to_one_per_metric_with_the_study_baseline_by_default(tmp_path):
    study = load_study(write_study(tmp_path, ARMS, extra=CONTRASTS))
    assert study.contrasts == [{"arm": "b", "baseline": "a", "metric": "ce_micro_f1", "delta": 0.02},
                               {"arm": "b", "baseline": "a", "metric": "BLEU_4", "delta": 0.005},
                               {"arm": "c", "baseline": "b", "metric": "ce_micro_f1", "delta": 0.03}]
    assert study.decide == {"alpha": 0.1, "looks": [3, 5], "spending": "obrien_fleming",
                            "rule": "anytime"}
    index = build_index(build_plan(study, tmp_path / "out"), {}, "now", argv=[])
    assert index[IndexKey.CONTRASTS] == study.contrasts and index[IndexKey.DECIDE] == study.decide


def test_a_study_without_contrasts_has_none_and_the_default_rule(tmp_path):
    study = load_study(write_study(tmp_path, ARMS))
    assert study.contrasts == [] and study.decide == {"alpha": 0.05, "looks": None, "spending": "obrien_fleming",
                                                     "rule": "anytime"}


@pytest.mark.parametrize(("extra", "message"), [
    ("contrasts: [{arm: z, metrics: {BLEU_4: 0.01}}]\n", "arm 'z' is not one of the arms"),
    ("contrasts: [{arm: b, baseline: b, metrics: {BLEU_4: 0.01}}]\n", "arm and baseline are both 'b'"),
    ("contrasts: [{arm: b, metrics: {gold: 0.01}}]\n", "unknown metric 'gold'"),
    ("contrasts: [{arm: b, metrics: {BLEU_4: 0}}]\n", "delta of 'BLEU_4' must be a number > 0"),
    ("contrasts: [{arm: b, metrics: {}}]\n", "'metrics' must map test metrics"),
    ("contrasts: [{arm: b, metrics: {BLEU_4: 0.01}}, {arm: b, baseline: a, metrics: {BLEU_4: 0.02}}]\n",
     "b - a on BLEU_4 is declared twice"),
    ("contrasts: {arm: b}\n", "'contrasts' must be a list"),
    ("decide: {alpha: 0.5}\n", "decide.alpha must be in (0, 0.5)"),
    ("decide: {looks: [5, 3]}\n", "decide.looks must be increasing seed counts >= 2"),
    ("decide: {looks: [1, 3]}\n", "decide.looks must be increasing seed counts >= 2"),
    ("decide: {spending: linear}\n", "decide.spending must be one of obrien_fleming, pocock"),
    ("decide: {alfa: 0.05}\n", "'decide' must be a mapping with keys alpha, looks, spending"),
])
def test_bad_contrasts_and_rules_name_the_key_and_value(tmp_path, extra, message):
    path = write_study(tmp_path, ARMS, extra=extra)
    with pytest.raises(ConfigError) as err:
        load_study(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_per_seed_test_reports_draw_a_fresh_phantom_test_set_for_each_seed_and_keep_the_training_stages(tmp_path):
    from harness.experiments.resolve import PER_SEED_TEST_OFFSET

    shared = build_plan(load_study(write_study(tmp_path, ARMS, seeds="[0, 1]")), tmp_path / "a")
    fresh = build_plan(load_study(write_study(tmp_path, ARMS, seeds="[0, 1]", name="fresh",
                                              extra="test_reports: per_seed\n")), tmp_path / "b")
    assert {n.key for n in fresh.stage_nodes()} == {n.key for n in shared.stage_nodes()}  # training unchanged

    def eval_seed(plan, seed):
        return plan.nodes[plan.runs["a", seed].eval_node].config["data"]["synth_seed"]

    assert [eval_seed(shared, s) for s in (0, 1)] == [0, 0]
    assert [eval_seed(fresh, s) for s in (0, 1)] == [PER_SEED_TEST_OFFSET, PER_SEED_TEST_OFFSET + 1]
    # every training stage reads the study's seed-0 set; each seed's test set is its own node, drawing only the
    # test split (issue 27)
    def data_nodes(plan, kind="data"):
        return {n.id for n in plan.nodes.values() if n.kind == kind}

    assert len(data_nodes(shared)) == 1 and len(data_nodes(fresh)) == 1 and len(data_nodes(fresh, "test_data")) == 2
    assert not data_nodes(shared, "test_data")
    index = build_index(fresh, {}, "now", argv=[])
    assert index[IndexKey.TEST_REPORTS] == "per_seed"
    assert build_index(shared, {}, "now", argv=[])[IndexKey.TEST_REPORTS] == "shared"


def test_test_reports_must_be_shared_or_per_seed(tmp_path):
    path = write_study(tmp_path, ARMS, extra="test_reports: fresh\n")
    with pytest.raises(ConfigError, match="test_reports must be one of shared, per_seed, got 'fresh'"):
        load_study(path)


def test_per_seed_test_reports_refuse_a_fixed_annotation(tmp_path):
    ann = tmp_path / "annotation.json"
    ann.write_text('{"train": [], "val": [], "test": []}')
    extra = f"test_reports: per_seed\ncommon: {{data: {{dataset: iu_xray, annotation: {ann}}}}}\n"
    with pytest.raises(ConfigError, match="per_seed draws a fresh phantom test set per seed"):
        build_plan(load_study(write_study(tmp_path, ARMS, extra=extra)), tmp_path / "out")
