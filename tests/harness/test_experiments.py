"""The experiment runner (harness/experiments/) and the YAML files of experiments/.

Planning and skip/resume/failure behaviour use fake stage functions (they count their calls and write
metrics.json as the real stages do); one test runs a real 2-arm x 1-seed study end to end on the tiny sizes of
tests/harness/stages/test_pipeline.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.cli import main
from harness.config import ConfigError, load_config, load_yaml
from harness.experiments import (
    Arm,
    Study,
    build_plan,
    load_study,
    resolve_config,
    run_experiment,
)
from harness.runs.records import atomic_write_json, read_json
from tests.tiny_sizes import TINY

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
PRESETS = sorted((EXPERIMENTS / "presets").glob("*.yaml"))
STUDIES = sorted(EXPERIMENTS.glob("*.yaml"))
TINY_PRESET = EXPERIMENTS / "presets" / "tiny.yaml"



def write_study(tmp_path: Path, arms: str, seeds="[0, 1]", name="toy", extra="") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"base: {TINY_PRESET}\nstudy: {name}\ntitle: toy study\nreproduces: null\n"
                    f"baseline: a\nseeds: {seeds}\n{extra}arms:\n{arms}")
    return path


ARMS = """  - name: a
    overrides: {rl: [rl.regularizer=rer, rl.reference=vapr]}
  - name: b
    overrides: {rl: {rl: {regularizer: constant, reference: static}}}
  - name: c
    pipeline: [warmup, rl]
    overrides: {rl: [rl.regularizer=rer]}
"""


# ---------------------------------------------------------------------------------------------------------
# Every YAML file loads and every arm's stage configs validate.


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
@pytest.mark.parametrize("study_file", STUDIES, ids=lambda p: p.stem)
def test_every_study_resolves_with_every_preset(study_file, preset, tmp_path):
    from rewards.registry import available_rewards

    study = load_study(study_file, preset=preset)
    assert study.baseline in [a.name for a in study.arms]
    plan = build_plan(study, tmp_path / "out")  # resolves (arm, seed, stage) RunConfigs via load_config
    assert len(plan.runs) == len(study.arms) * len(study.seeds)
    rewards = set(available_rewards())
    for node in plan.stage_nodes():
        if node.kind == "rl":
            assert node.config["rl"]["reward"] in rewards
    assert not (tmp_path / "out").exists()  # planning writes nothing


POWERED = ("table4_rl_ablation", "regularizer_matrix", "overoptimization", "kl_placement")


@pytest.mark.parametrize("study_file", STUDIES, ids=lambda p: p.stem)
def test_studies_as_written(study_file):
    study = load_study(study_file)
    doc = load_yaml(study_file)
    # The demo's study runs one seed (issue: "the five-arm RL ablation ... with 1 seed"); the others at least 3.
    # The smoke study (issue 46) checks that things run, on the smoke preset and one seed.
    assert study.preset in (("smoke",) if study.name == "smoke" else ("tiny-bench", "tiny-power", "tiny-power-varied"))
    assert len(study.seeds) >= (1 if study.name.startswith(("demo", "smoke")) else 3)
    if study.name in POWERED:  # issue 12: the regularizer comparisons run in the power setting
        arm = study.arms[0]
        rl, ev = resolve_config(study, arm, "rl", 0), resolve_config(study, arm, "eval", 0)
        assert study.preset == "tiny-power" and study.stage_seeds == {"warmup": 0, "classifier": 0, "sft": 0}
        assert (rl.rl.prompts_per_step, rl.data.max_train, ev.data.synth_n) == (32, 160, 20000)
        assert ev.data.synth_n * 0.2 >= 4000 and ev.data.synth_seed == rl.data.synth_seed
    if study.preset == "tiny-power-varied":  # issue 44: the varied language, read by the gold reader that reads meaning
        for stage in ("rl", "eval"):
            cfg = resolve_config(study, study.arms[-1], stage, 0)
            assert (cfg.data.report_variation, cfg.eval.gold_reader) == ("high", "v2")
        # the SFT calibrated for the varied language (docs/calibration.md section 0b): 48 epochs, not 6
        assert resolve_config(study, study.arms[-1], "sft", 0).train.epochs == 48
    assert study.reproduces == doc.get("reproduces")
    for arm in study.arms:
        for stage in arm.pipeline:
            resolve_config(study, arm, stage, study.seeds[0])
    names = {a.name for a in study.arms}
    expected = {
        "table3_pipeline": {"s1", "s1_s2", "s1_s3", "s2_s3", "s1_s2_s3"},
        "table4_rl_ablation": {"rer_vapr", "ckl", "no_kl", "no_vapr"},
        "table_s5_rewards": {"before_rl", "bleu4", "chexpert_f1", "entity_f1", "ditpo"},  # radgraph_f1: real presets
        "regularizer_matrix": {f"{g}_{r}" for g in ("none", "constant", "adaptive", "rer")
                               for r in ("static", "ema", "vapr")},
        "reward_matrix": {"bleu4", "chexpert_f1", "entity_f1", "ce_f1", "mccs", "mrg_r1", "ditpo",
                          "ditpo_tfidf"},
        "demo_rl_ablation": {"ckl", "no_kl", "adaptive", "rer_static", "ema", "rer_vapr"},
        "table1_iu_xray": {"reva_po", "base", "s1", "s1_s2"},
        "table1_mimic_cxr": {"reva_po", "base", "s1", "s1_s2"},
        "table2_mimic_cxr": {"reva_po", "base", "s1", "s1_s2"},
        "overoptimization": {f"{a}_{r}" for a, r in (("no_kl", "bleu4"), ("ckl_small", "bleu4"), ("ckl", "bleu4"),
                                                    ("ckl_large", "bleu4"), ("rer_vapr", "bleu4"), ("no_kl", "entity"),
                                                    ("ckl", "entity"), ("rer_vapr", "entity"), ("no_kl", "chexpert"),
                                                    ("ckl", "chexpert"), ("rer_vapr", "chexpert"))},
        "kl_placement": {"kl_loss_k3", "kl_loss_k3_is", "kl_loss_k2", "kl_reward_k1", "no_kl", "rer"},
        "smoke": {"ckl", "rer_vapr"},
        "rl_vs_sft_varied": {"sft", "rer_vapr", "ckl", "no_kl", "ckl_chexpert"},
    }[study.name]
    assert names == expected


def test_kl_placement_study_varies_one_kl_choice_per_arm_and_shares_the_matrix_runs():
    """Issue 45: every arm against today's default on gold F1 and BLEU-4; the arms that express today's options
    resolve to the regularizer matrix's stage runs (same keys), so a shared --stages-dir reuses them."""
    study = load_study(EXPERIMENTS / "kl_placement.yaml")
    assert study.baseline == "kl_loss_k3"
    assert {(c["arm"], c["metric"]) for c in study.contrasts} == {
        (a, m) for a in ("kl_loss_k3_is", "kl_loss_k2", "kl_reward_k1", "no_kl", "rer") for m in ("gold_f1", "BLEU_4")}
    rl = {a.name: resolve_config(study, a, "rl", 0).rl for a in study.arms}
    assert (rl["kl_loss_k3_is"].kl_estimator, rl["kl_loss_k2"].kl_estimator) == ("k3_is", "k2")
    assert (rl["kl_reward_k1"].kl_placement, rl["kl_reward_k1"].kl_estimator) == ("reward", "k1")
    assert {r.reference for r in rl.values()} == {"static"}
    matrix = load_study(EXPERIMENTS / "regularizer_matrix.yaml")
    keys = {}
    for s in (study, matrix):
        for node in build_plan(s, Path("/nonexistent/out")).stage_nodes():
            if node.kind == "rl":
                keys.setdefault(s.name, set()).add(node.key)
    assert len(keys["kl_placement"] & keys["regularizer_matrix"]) == 9  # kl_loss_k3, no_kl, rer x 3 seeds


def test_overoptimization_has_clinical_proxy_arms_and_decides_on_the_gold_readers_f1():
    """Issue 24: arms whose reward reads reports with the rule labeler (chexpert_f1, entity_f1), under no KL,
    constant KL and RER + VAPR, and the declared contrasts on gold_f1 (the gold reader's, which no reward sees)."""
    oo = load_study(EXPERIMENTS / "overoptimization.yaml")
    rl = {a.name: resolve_config(oo, a, "rl", 0).rl for a in oo.arms}
    for reward, suffix in (("chexpert_f1", "chexpert"), ("entity_f1", "entity")):
        arms = {f"{k}_{suffix}" for k in ("no_kl", "ckl", "rer_vapr")}
        assert {rl[a].reward for a in arms} == {reward}
        assert {(rl[a].regularizer, rl[a].reference) for a in arms} == {("none", "static"), ("constant", "static"),
                                                                       ("rer", "vapr")}
    metrics = {(c["arm"], c["baseline"], c["metric"]) for c in oo.contrasts}
    assert {("no_kl_chexpert", "ckl_chexpert", "gold_f1"), ("no_kl_bleu4", "ckl_bleu4", "gold_f1")} <= metrics
    assert not any(m == "ce_micro_f1" for _, _, m in metrics)


def test_table4_and_reward_arms_set_what_they_say():
    t4 = load_study(EXPERIMENTS / "table4_rl_ablation.yaml")
    rl = {a.name: resolve_config(t4, a, "rl", 0).rl for a in t4.arms}
    assert (rl["no_vapr"].regularizer, rl["no_vapr"].reference) == ("rer", "static")
    assert (rl["ckl"].regularizer, rl["no_kl"].regularizer, rl["rer_vapr"].reference) == ("constant", "none", "vapr")
    rm = load_study(EXPERIMENTS / "reward_matrix.yaml")
    ditpo = resolve_config(rm, rm.arm("ditpo"), "rl", 0).rl
    assert (ditpo.reward, ditpo.token_weighting) == ("diagnostic_f1", "gradient")  # DiTPO's main setting
    variant = resolve_config(rm, rm.arm("ditpo_tfidf"), "rl", 0).rl
    assert (variant.reward, variant.token_weighting) == ("diagnostic_f1", "tfidf")
    # MRG-R1 is taught its layout in its own SFT run, and is validated and tested on the <report> part; every other
    # arm shares the plain SFT run.
    for stage in ("sft", "rl", "eval"):
        assert resolve_config(rm, rm.arm("mrg_r1"), stage, 0).prompt.output_format == "think_report"
        assert resolve_config(rm, rm.arm("mccs"), stage, 0).prompt.output_format == "plain"
    assert resolve_config(rm, rm.arm("mrg_r1"), "warmup", 0).prompt.output_format == "plain"
    # issue 42: the MCCS arms credit a correct normal report (rewards/mccs.py: mccs_normal)
    assert resolve_config(rm, rm.arm("mccs"), "rl", 0).rl.reward == "mccs_normal"
    assert resolve_config(rm, rm.arm("mrg_r1"), "rl", 0).rl.reward == "mrg_r1_normal"
    mrg, mccs = (resolve_config(rm, rm.arm(a), "eval", 0) for a in ("mrg_r1", "mccs"))
    assert mrg.generation == mccs.generation and mrg.rl.select == mccs.rl.select  # same decoding and checkpoint rule
    from harness.config import to_dict

    def flat(d, prefix=""):
        return {k2: v2 for k, v in d.items() for k2, v2 in
                (flat(v, f"{prefix}{k}.").items() if isinstance(v, dict) else [(f"{prefix}{k}", v)])}

    assert resolve_config(rm, rm.arm("mrg_r1"), "sft", 0).model.train_format_tokens  # the tags' rows (issue 24)
    # On a real preset the arm is MRG-R1's LoRA only: Qwen2.5's base knows the tags' tokens.
    real = load_study(EXPERIMENTS / "reward_matrix.yaml", preset=EXPERIMENTS / "presets" / "mimic-qwen2.5vl-7b.yaml")
    sft = resolve_config(real, real.arm("mrg_r1"), "sft", 0)
    assert sft.prompt.output_format == "think_report" and not sft.model.train_format_tokens
    for stage, same_but in (("sft", {"prompt.output_format", "model.train_format_tokens"}),
                            ("rl", {"prompt.output_format", "rl.reward"})):
        a, b = (flat(to_dict(resolve_config(rm, rm.arm(x), stage, 0))) for x in ("mrg_r1", "mccs"))
        assert {k for k in a if a[k] != b[k]} == same_but, stage  # same data, schedule, decoding otherwise
    s5 = load_study(EXPERIMENTS / "table_s5_rewards.yaml", preset=EXPERIMENTS / "presets" / "mimic-qwen2.5vl-7b.yaml")
    assert resolve_config(s5, s5.arm("radgraph_f1"), "rl", 0).rl.reward == "radgraph_f1"
    t3 = load_study(EXPERIMENTS / "table3_pipeline.yaml")
    plan = build_plan(t3, "/tmp/unused")
    runs = {k[0]: r for k, r in plan.runs.items() if k[1] == 0}
    assert runs["s1_s3"].init_from == {"warmup": None, "rl": "warmup"}
    assert runs["s2_s3"].init_from == {"sft": None, "rl": "sft"}
    assert runs["s1_s2_s3"].init_from == {"warmup": None, "sft": "warmup", "rl": "sft"}
    assert runs["s1"].final_stage == "warmup" and runs["s1_s2"].final_stage == "sft"
    # S1+S2 (evaluated as is) and S1+S2+S3 share their warm-up and SFT runs; S2+S3's SFT starts from the base.
    assert runs["s1_s2"].stages["sft"] == runs["s1_s2_s3"].stages["sft"] != runs["s2_s3"].stages["sft"]


def test_presets_carry_the_papers_hyperparameters():
    def stage(preset, name):
        doc = load_yaml(EXPERIMENTS / "presets" / f"{preset}.yaml")
        study = Study(name="x", title="x", path=Path("x.yaml"), preset=preset, preset_file=Path("x"), reproduces=None,
                      baseline="a", seeds=[0], arms=[], common=doc["common"], stages=doc["stages"])
        return resolve_config(study, Arm("a", "a", [name]), name, 0)

    for size in ("7b", "3b"):
        m = stage(f"mimic-qwen2.5vl-{size}", "rl")
        assert (m.rl.beta_min, m.rl.beta_base, m.rl.beta_max, m.rl.entropy_coef) == (0.05, 0.10, 0.12, 0.0)
        assert (m.rl.group_size, m.rl.temperature, m.rl.top_p, m.rl.max_new_tokens, m.rl.min_new_tokens,
                m.rl.repetition_penalty) == (4, 0.7, 0.9, 160, 80, 1.03)
        assert (m.rl.old_sync_every, m.rl.reset_every_epochs, m.rl.val_lambda) == (16, 3, 0.1)
        assert (m.train.lr, m.train.weight_decay, m.train.warmup_steps) == (3e-6, 1e-3, 250)
        assert m.train.epochs == (9 if size == "7b" else 12) and m.model.preset == f"qwen2.5-vl-{size}"
        i = stage(f"iuxray-qwen2.5vl-{size}", "rl")
        assert (i.rl.beta_max, i.rl.entropy_coef, i.rl.max_new_tokens, i.rl.min_new_tokens,
                i.rl.repetition_penalty, i.train.epochs, i.train.warmup_steps) == (0.15, 0.001, 100, 40, 1.05, 15, 77)
        w = stage(f"mimic-qwen2.5vl-{size}", "warmup").train
        assert (w.epochs, w.batch_size, w.lr, w.weight_decay) == (10, 32, 1e-3, 1e-5)
        w = stage(f"iuxray-qwen2.5vl-{size}", "warmup").train
        assert (w.epochs, w.batch_size, w.lr, w.weight_decay) == (3, 32, 1e-3, 1e-4)
        s = stage(f"mimic-qwen2.5vl-{size}", "sft")
        assert (s.train.epochs, s.train.batch_size, s.train.lr, s.train.weight_decay) == (1, 28, 1e-4, 1e-3)
        assert (s.model.lora_r, s.model.lora_alpha, s.model.lora_dropout) == (32, 32, 0.1)
        assert stage(f"iuxray-qwen2.5vl-{size}", "sft").train.epochs == 5
        c = stage(f"mimic-qwen2.5vl-{size}", "classifier").classifier
        assert (c.batch_size, c.lr, c.adam_beta2, c.epochs, c.weight_decay) == (1600, 1.5e-3, 0.95, 20, 0.05)
        c = stage(f"iuxray-qwen2.5vl-{size}", "classifier").classifier
        assert (c.batch_size, c.lr, c.adam_beta2, c.epochs, c.weight_decay) == (64, 6.25e-5, 0.999, 20, 0.05)


def test_demo_runs_its_study_on_the_tiny_preset():
    from harness.cli.demo import DEMO_STUDY

    study = load_study(DEMO_STUDY)
    assert study.preset == "tiny-bench" and study.seeds == [0, 1, 2]  # the verdict contrast: 3 seeds (issue 23)
    regs = {(resolve_config(study, a, "rl", 0).rl.regularizer, resolve_config(study, a, "rl", 0).rl.reference)
            for a in study.arms}
    assert regs == {("constant", "static"), ("none", "static"), ("adaptive", "static"), ("rer", "static"),
                    ("constant", "ema"), ("rer", "vapr")}
    # one factor at a time: every arm has a neighbour that differs from it in exactly one of the two factors,
    # and Fig. 3's pairs exist (RER vs constant under one reference; RER with vapr and with static)
    for r in regs:
        assert any(sum(x != y for x, y in zip(r, o, strict=True)) == 1 for o in regs if o != r), r
    assert {("rer", "static"), ("constant", "static"), ("rer", "vapr"), ("none", "static")} <= regs
    assert study.analyses["arms"] == ["rer_vapr"] and set(study.analyses["kinds"]) == {"reward-variance",
                                                                                       "sign-alignment"}


def fake_analysis(rl_dir, **settings):
    return []


def test_the_demo_table_reads_its_studys_stage_evaluations(tmp_path, calls, monkeypatch):
    """`regbench demo`: the base, warm-up and SFT rows come from the study's `stage_evals` nodes (fake stages)."""
    import harness.experiments
    from harness.cli.demo import STAGE_ROWS, run_demo

    real = harness.experiments.run_experiment

    def with_fakes(study, out, **kwargs):
        return real(study, out, functions={**FAKES, "analysis": "tests.harness.test_experiments:fake_analysis"},
                    **kwargs)

    monkeypatch.setattr(harness.experiments, "run_experiment", with_fakes)
    text = run_demo(tmp_path / "demo", progress=False, workers=1).read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| model")]
    assert [r.split(" | ")[0][2:] for r in rows[:3]] == list(STAGE_ROWS.values())
    assert all(r.split(" | ")[4] == "0.2500" for r in rows)  # BLEU_4 of every evaluation (fake_eval's)
    assert len(rows) == 3 + 6 and _count(calls(), "eval") == 3 + 10  # 6 arms on seed 0, 2 arms on 2 more seeds


def test_bad_study_files_fail_clearly(tmp_path):
    with pytest.raises(ConfigError, match="unknown key 'armz'"):
        load_study(write_study(tmp_path, ARMS, extra="armz: 1\n"))
    with pytest.raises(ConfigError, match="baseline arm 'a'"):
        load_study(write_study(tmp_path, "  - name: x\n"))
    bad = ARMS.replace("rl.regularizer=rer, rl.reference=vapr", "rl.regularizer=bogus")
    with pytest.raises(ConfigError, match="arm 'a', stage 'rl'.*rl.regularizer"):
        build_plan(load_study(write_study(tmp_path, bad)), tmp_path / "o")
    with pytest.raises(ConfigError, match="order"):
        load_study(write_study(tmp_path, ARMS.replace("[warmup, rl]", "[rl, warmup]")))



def test_the_old_key_reference_still_names_the_baseline_with_a_warning(tmp_path):
    """`reference:` also names the KL reference policy, so the study's baseline arm is `baseline:` now; a study
    file with the old key still loads, with a warning naming the new key, and giving both is refused."""
    old = write_study(tmp_path, ARMS, name="old")
    old.write_text(old.read_text().replace("baseline: a\n", "reference: b\n"))
    with pytest.warns(FutureWarning, match="'reference' is deprecated.*write 'baseline: b'"):
        study = load_study(old)
    assert study.baseline == "b" and not hasattr(study, "reference")  # in code the word names the KL policy only
    with pytest.raises(ConfigError, match="both 'baseline' and its deprecated name 'reference'"):
        load_study(write_study(tmp_path, ARMS, name="both", extra="reference: b\n"))
    assert load_study(write_study(tmp_path, ARMS, name="new")).baseline == "a"

# ---------------------------------------------------------------------------------------------------------
# Expansion and shared-stage keys


def test_expansion_and_shared_stage_keys(tmp_path):
    study = load_study(write_study(tmp_path, ARMS))
    plan = build_plan(study, tmp_path / "out")
    assert sorted(plan.runs) == [(a, s) for a in "abc" for s in (0, 1)]
    a0, b0, c0, a1 = plan.runs["a", 0], plan.runs["b", 0], plan.runs["c", 0], plan.runs["a", 1]
    # Two RL arms from the same SFT share warm-up, classifier and SFT; their RL runs differ.
    for stage in ("warmup", "classifier", "sft"):
        assert a0.stages[stage] == b0.stages[stage]
        assert a0.stages[stage] != a1.stages[stage]  # different seeds never share
    assert a0.stages["rl"] != b0.stages["rl"]
    # Arm c runs RL from the warm-up model: same warm-up, its own RL (a different input).
    assert c0.stages["warmup"] == a0.stages["warmup"] and c0.stages["rl"] != a0.stages["rl"]
    nodes = plan.nodes
    assert nodes[a0.stages["sft"]].deps[-2:] == [a0.stages["warmup"], a0.stages["classifier"]]
    assert nodes[a0.stages["rl"]].config["init_from"] == str(nodes[a0.stages["sft"]].run_dir / "model")
    assert nodes[a0.stages["sft"]].config["classifier"]["dir"] == str(nodes[a0.stages["classifier"]].run_dir
                                                                      / "classifier")
    assert sorted(nodes[a0.stages["sft"]].users) == [("a", 0), ("b", 0)]
    # One phantom data set and one tiny base for all (stage 0 has its own seed); evaluations per arm and seed.
    assert len([n for n in nodes.values() if n.kind == "data"]) == 1
    assert len([n for n in nodes.values() if n.kind == "pretrain"]) == 1
    assert len({r.eval_node for r in plan.runs.values()}) == 6
    # Keys do not depend on where the study runs.
    other = build_plan(study, tmp_path / "elsewhere")
    assert {n.key for n in other.stage_nodes()} == {n.key for n in plan.stage_nodes()}
    # A change in an RL-only setting keeps the shared stages and changes only the RL runs.
    changed = build_plan(load_study(write_study(tmp_path, ARMS, extra="stages: {rl: {rl: {beta_max: 0.2}}}\n")),
                         tmp_path / "out")
    assert changed.runs["a", 0].stages["sft"] == a0.stages["sft"]
    assert changed.runs["a", 0].stages["rl"] != a0.stages["rl"]


def test_a_new_stage0_recipe_gives_new_stage_runs(tmp_path, monkeypatch):
    """The warm-up starts from the cached stage-0 base; a base rebuilt by a new recipe (same config) must not
    reuse stage runs trained on the old one (before: the warm-up key ignored the base)."""
    import harness.stages.paths as stage_paths

    study = load_study(write_study(tmp_path, ARMS))
    before = build_plan(study, tmp_path / "out")
    monkeypatch.setattr(stage_paths, "RECIPE_VERSION", stage_paths.RECIPE_VERSION + 1)
    after = build_plan(study, tmp_path / "out")
    for stage in ("warmup", "sft", "rl"):
        assert after.runs["a", 0].stages[stage] != before.runs["a", 0].stages[stage]
    assert after.runs["a", 0].stages["classifier"] == before.runs["a", 0].stages["classifier"]  # images only
    assert after.nodes[after.runs["a", 0].eval_node].key != before.nodes[before.runs["a", 0].eval_node].key


def test_split_leak_by_hand():
    """Phantom splits are index ranges, 70/10/20: a 4,000-study set trains and validates on studies 0-3199."""
    from harness.config import build_config
    from harness.experiments.plan import overlapping_test_split

    def cfg(n, seed=0):
        return build_config({"data": {"synth_n": n, "synth_seed": seed}})

    assert overlapping_test_split(cfg(4000), cfg(4000)) is None
    assert overlapping_test_split(cfg(4000), cfg(20000)) is None  # tests studies 16000-19999
    assert overlapping_test_split(cfg(4000), cfg(4000, seed=1)) is None  # other draws altogether
    assert overlapping_test_split(cfg(4000), cfg(4001)) is None  # 2801 + 400 = 3201: starts after 3199
    why = overlapping_test_split(cfg(4000), cfg(3000))  # 2100 + 300: studies 2400-2999, inside train
    assert "studies 2400-2999" in why and "studies 0-3199" in why and "at least 4000" in why
    why = overlapping_test_split(cfg(4000), cfg(3999))  # 2799 + 400 (round(399.9), round(799.8))
    assert why and "studies 3199-3998" in why


def test_a_larger_test_set_of_the_same_seed_keeps_every_stage_run(tmp_path):
    """issue 12: a study may evaluate on a larger phantom set (more test reports) without retraining; a set whose
    test split overlaps the training studies is refused before anything runs (before: it ran and scored the
    model on studies it was trained on)."""
    study = load_study(write_study(tmp_path, ARMS))
    plan = build_plan(study, tmp_path / "out")
    larger = build_plan(load_study(write_study(tmp_path, ARMS, extra="stages: {eval: {data: {synth_n: 20000}}}\n")),
                        tmp_path / "out")
    assert {n.key for n in larger.stage_nodes()} == {n.key for n in plan.stage_nodes()}
    ev = larger.nodes[larger.runs["a", 0].eval_node]
    assert ev.config["data"]["synth_n"] == 20000 and ev.key != plan.nodes[plan.runs["a", 0].eval_node].key
    # the training set, and the larger set's test split drawn alone (issue 27: 4,000 studies, not 20,000)
    assert [n.kind for n in larger.nodes.values() if n.kind.endswith("data")] == ["data", "test_data"]
    part = next(n for n in larger.nodes.values() if n.kind == "test_data")
    assert ev.deps[0] == part.id and part.id.startswith("data:")
    smaller = load_study(write_study(tmp_path, ARMS, extra="stages: {eval: {data: {synth_n: 1500}}}\n"))
    with pytest.raises(ConfigError, match=r"arm 'a': the test evaluation would test on studies stage 'warmup'.*"
                                          r"studies 1200-1499"):
        build_plan(smaller, tmp_path / "out")


def test_the_test_split_is_drawn_after_every_stage_that_could_use_the_worker(tmp_path):
    """issue 27: ready nodes start in needed_order's order. The test split's own set is read only by the test
    evaluations, so every stage kind comes before it: from an empty cache stage 0 starts beside the training set's
    draw instead of waiting for a worker the test split held (a study's longest path starts with stage 0)."""
    from harness.experiments.graph_run import needed_order
    from harness.experiments.plan import STAGES

    study = load_study(write_study(tmp_path, ARMS, extra="stages: {eval: {data: {synth_n: 20000}}}\n"))
    plan = build_plan(study, tmp_path / "out")
    order = [plan.nodes[nid].kind for nid in needed_order(plan, sorted(plan.runs))]
    assert order[0] == "data" and "test_data" in order and "eval" in order
    first_test_data = order.index("test_data")
    assert all(kind not in order[first_test_data:] for kind in ("data", "pretrain", *STAGES))
    assert set(order[first_test_data:]) <= {"test_data", "analysis", "eval"}


def test_an_evaluation_reads_the_whole_set_its_stages_draw_and_draws_only_the_test_split_of_any_other(tmp_path):
    """issue 27: the test split of a set no stage trains on (a larger test set, or test_reports: per_seed) is drawn
    alone; an evaluation on the training stages' own set reads that set (no second draw)."""
    from harness.config import RunConfig, from_dict
    from harness.experiments.plan import node_done
    from harness.stages.paths import phantom_dir

    same = build_plan(load_study(write_study(tmp_path, ARMS)), tmp_path / "out")
    assert [n.kind for n in same.nodes.values() if n.kind.endswith("data")] == ["data"]
    fresh = build_plan(load_study(write_study(tmp_path, ARMS, extra="test_reports: per_seed\n")),
                       tmp_path / "out")
    parts = [n for n in fresh.nodes.values() if n.kind == "test_data"]
    assert len(parts) == 2 and [n.kind for n in fresh.nodes.values() if n.kind == "data"] == ["data"]
    for part in parts:
        cfg = from_dict(RunConfig, part.config)
        assert phantom_dir(cfg, ("test",)).name == phantom_dir(cfg).name + "-test"
        assert not node_done(part)
    assert {n.key for n in fresh.stage_nodes()} == {n.key for n in same.stage_nodes()}


# ---------------------------------------------------------------------------------------------------------
# Skip, resume and failures, with fake stages


def _record(stage: str, cfg) -> None:
    with open(os.environ["REGBENCH_TEST_CALLS"], "a") as f:
        f.write(json.dumps({"stage": stage, "out_dir": cfg.out_dir, "seed": cfg.seed, "init_from": cfg.init_from,
                            "reg": cfg.rl.regularizer}) + "\n")


def _fake_stage(stage: str):
    def run(cfg, progress=False):
        _record(stage, cfg)
        if stage == "rl" and cfg.rl.regularizer == os.environ.get("REGBENCH_TEST_FAIL_REG"):
            raise RuntimeError("fake RL blew up")
        out = Path(cfg.out_dir)
        sub = "classifier" if stage == "classifier" else "model"
        (out / sub).mkdir(parents=True, exist_ok=True)
        atomic_write_json(out / "metrics.json", {"stage": stage})
        return out / sub
    return run


fake_warmup, fake_classifier, fake_sft, fake_rl = (_fake_stage(s) for s in ("warmup", "classifier", "sft", "rl"))


def fake_support(cfg, progress=False):
    _record("support", cfg)
    return Path(cfg.out_dir)


def fake_eval(cfg, model_dir, progress=False):
    _record("eval", cfg)
    return {"BLEU_4": 0.25, "ROUGE_L": 0.5, "model": model_dir}


FAKES = {"warmup": "tests.harness.test_experiments:fake_warmup",
         "classifier": "tests.harness.test_experiments:fake_classifier",
         "sft": "tests.harness.test_experiments:fake_sft", "rl": "tests.harness.test_experiments:fake_rl",
         "eval": "tests.harness.test_experiments:fake_eval", "data": "tests.harness.test_experiments:fake_support",
         "test_data": "tests.harness.test_experiments:fake_support",
         "pretrain": "tests.harness.test_experiments:fake_support"}


@pytest.fixture
def calls(tmp_path, monkeypatch):
    path = tmp_path / "calls.jsonl"
    monkeypatch.setenv("REGBENCH_TEST_CALLS", str(path))

    def read() -> list[dict]:
        rows = [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []
        path.unlink(missing_ok=True)
        return rows
    return read


def _count(rows, stage):
    return sum(1 for r in rows if r["stage"] == stage)


def _stages(rows) -> list[str]:
    """The stage calls (the fake data/stage-0 nodes write nothing, so they run whenever a stage needs them)."""
    return [r["stage"] for r in rows if r["stage"] != "support"]


def _patch_stage_modules(monkeypatch):
    """Monkeypatch the real stage functions (in-process runs, workers = 1)."""
    import harness.experiments.nodes as ex
    import harness.stages.classifier
    import harness.stages.loading
    import harness.stages.pretrain
    import harness.stages.rl
    import harness.stages.sft
    import harness.stages.warmup

    monkeypatch.setattr(harness.stages.warmup, "run_warmup", fake_warmup)
    monkeypatch.setattr(harness.stages.classifier, "run_classifier_training", fake_classifier)
    monkeypatch.setattr(harness.stages.sft, "run_sft", fake_sft)
    monkeypatch.setattr(harness.stages.rl, "run_rl", fake_rl)
    monkeypatch.setattr(harness.stages.loading, "base_path", fake_support)
    monkeypatch.setattr(harness.stages.pretrain, "build_base", fake_support)
    monkeypatch.setattr(ex, "prepare_data", fake_support)
    monkeypatch.setattr(ex, "prepare_test_data", fake_support)
    monkeypatch.setattr(ex, "evaluate_final", fake_eval)


def test_runs_once_then_skips_then_resumes(tmp_path, calls, monkeypatch):
    _patch_stage_modules(monkeypatch)
    study = load_study(write_study(tmp_path, ARMS))
    out = tmp_path / "out"
    lines = []
    res = run_experiment(study, out, workers=1, log=lines.append)
    assert res.ok and len(res.ran) == 6
    rows = calls()
    # Per seed: one warm-up, one classifier, one SFT (shared by a and b), three RL runs, three evaluations.
    assert [_count(rows, s) for s in ("warmup", "classifier", "sft", "rl", "eval")] == [2, 2, 2, 6, 6]
    assert sum(1 for x in lines if ": complete (" in x) == 6
    index = read_json(out / "index.json")
    assert index["format"] == "regbench.experiment-index/1" and index["study"] == "toy"
    assert index["baseline_arm"] == "a" and index["seeds"] == [0, 1] and index["summary"]["complete"] == 6
    run = next(r for r in index["runs"] if (r["arm"], r["seed"]) == ("b", 1))
    assert run["status"] == "complete" and run["dir"] == "b/seed1" and run["final_stage"] == "rl"
    assert run["stages"]["sft"]["shared_by"] == ["a", "b"] and run["stages"]["rl"]["shared_by"] == ["b"]
    assert read_json(out / run["metrics"])["BLEU_4"] == 0.25
    assert (out / "b" / "seed1" / "sft").resolve() == (out / run["stages"]["sft"]["dir"]).resolve()
    assert (out / "b" / "seed1" / "sft" / "metrics.json").is_file()

    # Second run: everything is complete; nothing is called.
    res = run_experiment(study, out, workers=1, log=lines.append)
    assert res.ok and res.ran == [] and calls() == []

    # An interrupted arm (RL without metrics.json, no evaluation) resumes: only its RL and evaluation rerun,
    # in the same run directory.
    rl_dir = out / run["stages"]["rl"]["dir"]
    (rl_dir / "metrics.json").unlink()
    (out / run["metrics"]).unlink()
    res = run_experiment(study, out, workers=1, log=lines.append)
    rows = calls()
    assert res.ran == [("b", 1)] and _stages(rows) == ["rl", "eval"]
    rows = [r for r in rows if r["stage"] == "rl"]
    assert rows[0]["out_dir"] == str(rl_dir) and rows[0]["init_from"].endswith("/model")

    # --arms / --seeds select what runs; the index still lists the whole study.
    for r in ("a", "b", "c"):
        (out / r / "seed0" / "eval" / "metrics.json").unlink()
    res = run_experiment(study, out, workers=1, arms=["c"], seeds=[0], log=lines.append)
    assert res.ran == [("c", 0)] and _stages(calls()) == ["eval"]
    index = read_json(out / "index.json")
    assert len(index["runs"]) == 6 and index["summary"] == {"complete": 4, "failed": 0, "pending": 2, "running": 0}


def test_stage_evals_test_the_baseline_arms_stage_models_as_nodes(tmp_path, calls, monkeypatch):
    """`stage_evals`: the base, warm-up and SFT models of the baseline arm's first seed are tested as nodes of the
    plan (each needs only its model and the test data), recorded in index.json, skipped once complete and left out
    when the baseline's first-seed run is not selected."""
    from harness.experiments.graph_run import needed_order
    from harness.experiments.plan_text import node_label

    _patch_stage_modules(monkeypatch)
    study = load_study(write_study(tmp_path, ARMS, extra="stage_evals: [sft, base, warmup]\n"))
    assert study.stage_evals == ["base", "warmup", "sft"]
    out = tmp_path / "out"
    plan = build_plan(study, out)
    runs = plan.runs[("a", 0)]
    assert plan.stage_evals == {s: f"eval:stage:{s}" for s in ("base", "warmup", "sft")}
    kinds = {s: sorted(plan.nodes[d].kind for d in plan.nodes[nid].deps) for s, nid in plan.stage_evals.items()}
    assert kinds == {"base": ["data", "pretrain"], "warmup": ["data", "warmup"], "sft": ["data", "sft"]}
    assert plan.nodes["eval:stage:sft"].model_dir == str(plan.nodes[runs.stages["sft"]].run_dir / "model")
    assert plan.nodes["eval:stage:base"].model_dir is None
    # Configured as the run's own test evaluation; only the model differs.
    cfg = {k: v for k, v in plan.nodes["eval:stage:sft"].config.items() if k != "out_dir"}
    assert cfg == {k: v for k, v in plan.nodes[runs.eval_node].config.items() if k != "out_dir"}
    assert "eval:stage:base" not in needed_order(plan, [("b", 0), ("a", 1)])
    assert node_label(plan.nodes["eval:stage:base"]) == "the base model"  # progress lines name the model
    assert node_label(plan.nodes["eval:stage:sft"]) == "the sft model of a seed 0"
    assert set(plan.stage_evals.values()) <= set(needed_order(plan, [("a", 0)]))

    res = run_experiment(study, out, workers=1)
    assert res.ok and _count(calls(), "eval") == 6 + 3
    index = read_json(out / "index.json")
    for stage in ("base", "warmup", "sft"):
        entry = index["stage_evals"][stage]
        assert entry["status"] == "complete" and entry["dir"] == f"eval_stages/{stage}"
        got = read_json(out / entry["metrics"])
        assert got["BLEU_4"] == 0.25 and got["model"] == plan.nodes[f"eval:stage:{stage}"].model_dir
    assert run_experiment(study, out, workers=1).ran == [] and calls() == []
    with pytest.raises(ConfigError, match="'stage_evals' names 'warmup'.*baseline arm 'a'"):
        load_study(write_study(tmp_path, ARMS.replace("  - name: b", "    pipeline: [rl]\n  - name: b"),
                               extra="stage_evals: [warmup]\n"))
    with pytest.raises(ConfigError, match="'stage_evals' must list each of base, warmup, sft"):
        load_study(write_study(tmp_path, ARMS, extra="stage_evals: [rl]\n"))


def test_a_failed_arm_is_recorded_and_the_others_finish(tmp_path, calls, monkeypatch, capsys):
    _patch_stage_modules(monkeypatch)
    monkeypatch.setenv("REGBENCH_TEST_FAIL_REG", "constant")
    path = write_study(tmp_path, ARMS, seeds="[0]")
    out = tmp_path / "out"
    assert main(["experiment", "run", str(path), "--workers", "1", "--out", str(out)]) == 1
    index = read_json(out / "index.json")
    status = {r["arm"]: r for r in index["runs"]}
    assert status["a"]["status"] == status["c"]["status"] == "complete"
    b = status["b"]
    assert b["status"] == "failed" and b["failed_stage"] == "rl" and "fake RL blew up" in b["error"]
    assert b["stages"]["rl"]["status"] == "failed" and b["metrics"] is None
    assert "fake RL blew up" in (out / "b" / "seed0" / "error.txt").read_text()
    assert "b seed 0: failed" in capsys.readouterr().out
    assert index["summary"]["failed"] == 1
    # Fixed: only the failed arm runs again.
    calls()
    monkeypatch.delenv("REGBENCH_TEST_FAIL_REG")
    assert main(["experiment", "run", str(path), "--workers", "1", "--out", str(out)]) == 0
    assert _stages(calls()) == ["rl", "eval"]


def test_a_failed_shared_stage_fails_its_arms_only(tmp_path, calls, monkeypatch):
    """A failing SFT (shared by a and b) fails both; c (warm-up -> RL) still completes."""
    _patch_stage_modules(monkeypatch)
    import harness.stages.sft

    def broken_sft(cfg, progress=False):
        raise ValueError("no SFT today")

    monkeypatch.setattr(harness.stages.sft, "run_sft", broken_sft)
    res = run_experiment(load_study(write_study(tmp_path, ARMS, seeds="[0]")), tmp_path / "out", workers=1,
                         log=lambda s: None)
    assert sorted(res.failed) == [("a", 0), ("b", 0)]
    runs = {r["arm"]: r for r in res.index["runs"]}
    assert runs["c"]["status"] == "complete" and runs["a"]["error"].startswith("stage sft: ValueError")
    assert runs["a"]["stages"]["rl"]["status"] == "skipped"
    assert _count(calls(), "rl") == 1


def test_parallel_spawned_workers(tmp_path, calls):
    """Two spawned worker processes (fakes importable by the workers); shared stages still run once."""
    res = run_experiment(load_study(write_study(tmp_path, ARMS, seeds="[0, 1]")), tmp_path / "out", workers=2,
                         functions=FAKES, log=lambda s: None)
    assert res.ok and len(res.ran) == 6
    rows = calls()
    assert [_count(rows, s) for s in ("warmup", "classifier", "sft", "rl", "eval")] == [2, 2, 2, 6, 6]


def test_exact_runs_are_selected_in_one_pool(tmp_path, calls):
    """`runs=`: exactly these (arm, seed) runs (the demo: its contrast's arms on more seeds than the others)."""
    study = load_study(write_study(tmp_path, ARMS, seeds="[0, 1]"))
    res = run_experiment(study, tmp_path / "out", workers=1, functions=FAKES, log=lambda s: None,
                         runs=[("a", 0), ("b", 0), ("a", 1)])
    assert res.ok and sorted(res.ran) == [("a", 0), ("a", 1), ("b", 0)]
    assert _count(calls(), "rl") == 3
    with pytest.raises(ConfigError, match=r"runs \[\('a', 5\)\] are not in the study"):
        run_experiment(study, tmp_path / "out", workers=1, functions=FAKES, log=lambda s: None, runs=[("a", 5)])


def test_seeds_added_one_call_at_a_time_all_stay_in_the_index(tmp_path, calls):
    """`--seeds 3`, then `--seeds 4` into one folder (a study grown seed by seed, as benchmarks/bench_study.py
    does): the index, and so the report, keeps seed 3's runs beside the study's seeds and the last call's; the
    second call runs only seed 4. Before, each call indexed the study's seeds and its own, and seed 3 vanished."""
    from harness.experiments.run import rebuild_index

    study = load_study(write_study(tmp_path, ARMS, seeds="[0]"))
    out = tmp_path / "out"
    for seed in (3, 4):
        res = run_experiment(study, out, workers=1, functions=FAKES, log=lambda s: None, seeds=[seed])
        assert res.ok and sorted(res.ran) == [(a, seed) for a in ("a", "b", "c")]
    index = read_json(out / "index.json")
    assert index["seeds"] == [0, 3, 4]
    done = sorted((r["arm"], r["seed"]) for r in index["runs"] if r["status"] == "complete")
    assert done == [(a, s) for a in ("a", "b", "c") for s in (3, 4)]
    assert rebuild_index(study, out)["seeds"] == [0, 3, 4]
    assert _count(calls(), "rl") == 6


def test_progress_lines_name_only_the_selected_runs_that_need_a_node(tmp_path, calls):
    """A node shared by runs that are not selected (the demo selects 10 of its 18) is labelled with the selected
    ones: the data set serves all six runs of the study, the seed-0 warm-up serves a, b and c."""
    study = load_study(write_study(tmp_path, ARMS, seeds="[0, 1]"))
    lines: list[str] = []
    res = run_experiment(study, tmp_path / "out", workers=1, functions=FAKES, log=lines.append,
                         runs=[("a", 0), ("b", 0), ("a", 1)])
    assert res.ok
    started = [x.split("] ", 1)[1] for x in lines if "] started " in x]
    assert "started data (a seed 0, a seed 1, b seed 0)" in started
    assert "started warmup (a seed 0, b seed 0)" in started
    assert "started rl (a seed 1)" in started
    assert not [x for x in lines if "c seed" in x or " more)" in x]


def test_experiment_list_cli(tmp_path, capsys):
    assert main(["experiment", "list", str(EXPERIMENTS / "table4_rl_ablation.yaml"), "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "rer_vapr" in text and "no_vapr" in text and "12 runs; 15 distinct stage runs" in text


# ---------------------------------------------------------------------------------------------------------
# A real tiny study: 2 RL arms x 1 seed


def test_real_tiny_study_end_to_end(tmp_path):
    arms = """  - name: a
    overrides: {rl: [rl.regularizer=rer, rl.reference=vapr]}
  - name: b
    overrides: {rl: [rl.regularizer=constant, rl.reference=static]}
"""
    path = write_study(tmp_path, arms, seeds="[0]", name="e2e",
                       extra="analyses: {kinds: [reward_variance, sign_alignment], arms: [a], n_prompts: 2, "
                             "group_size: 2}\n")
    sets = [f"common.{x}" for x in TINY] + [
        f"common.cache_dir={tmp_path / 'cache'}",
        "stages.warmup.train.max_steps=2", "stages.warmup.train.batch_size=4",
        "stages.classifier.classifier.epochs=1", "stages.classifier.classifier.batch_size=8",
        "stages.classifier.classifier.img_size=32",
        "stages.sft.train.max_steps=2", "stages.sft.train.batch_size=4", "stages.sft.model.lora_r=4",
        "stages.sft.model.lora_alpha=8",
        "stages.rl.train.max_steps=2", "stages.rl.rl.prompts_per_step=2", "stages.rl.rl.group_size=2",
        "stages.rl.rl.max_new_tokens=8", "stages.rl.rl.min_new_tokens=2", "stages.rl.rl.val_max_samples=4",
    ]
    out = tmp_path / "out"
    argv = ["experiment", "run", str(path), "--workers", "1", "--out", str(out)]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0
    index = read_json(out / "index.json")
    assert index["summary"]["complete"] == 2 and index["study"] == "e2e" and index["preset"] == "tiny"
    a, b = sorted(index["runs"], key=lambda r: r["arm"])
    assert a["stages"]["sft"]["dir"] == b["stages"]["sft"]["dir"]
    assert a["stages"]["rl"]["dir"] != b["stages"]["rl"]["dir"]
    for r in (a, b):
        scores = read_json(out / r["metrics"])
        assert scores["n"] == 6 and 0 <= scores["BLEU_4"] <= 1 and scores["stage"] == "rl"
        assert (out / r["eval_dir"] / "predictions_final_test.jsonl").is_file()
        manifest = read_json(out / r["dir"] / "rl" / "manifest.json")
        assert manifest["config"]["train"]["max_steps"] == 2
    assert read_json(out / a["dir"] / "rl" / "metrics.json")["regularizer"] == "rer"
    assert read_json(out / b["dir"] / "rl" / "metrics.json")["regularizer"] == "constant"
    # the study's analyses ran after arm a's RL stage (only a's), sampled from the real policies
    assert a["stages"]["analysis"]["status"] == "complete" and "analysis" not in b["stages"]
    for kind in ("reward-variance", "sign-alignment"):
        rec = read_json(out / a["dir"] / "rl" / f"analysis_{kind}.json")
        assert rec["key"] == a["stages"]["analysis"]["key"] and rec["n_prompts"] == 2
        groups = rec["policies"]["after"]["candidates"]
        assert len(groups) == 2 and all(len(g) == 2 and all(isinstance(t, str) for t in g) for g in groups)
        assert len(rec["policies"]["before"]["rewards"]["bleu4"]) == 2
    # TensorBoard on the study folder: each stage run once, by arm/seed/stage, and stage 0 (issue 46)
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

    runs = sorted(EventMultiplexer().AddRunsFromDirectory(str(out)).Runs())
    assert [r for r in runs if not r.startswith("tb/stage0/")] == sorted(
        ["tb/a+b/seed0/warmup", "tb/a+b/seed0/classifier", "tb/a+b/seed0/sft", "tb/a/seed0/rl", "tb/b/seed0/rl"])
    assert len([r for r in runs if r.startswith("tb/stage0/")]) == 1


# ---------------------------------------------------------------------------------------------------------
# Launched stages (--launcher "torchrun ...")


def test_a_failing_launch_fails_its_stage_with_the_log_tail(tmp_path, calls):
    import sys

    launcher = f"{sys.executable} -c \"import sys; print('launched', sys.argv[1:]); sys.exit(3)\""
    study = load_study(write_study(tmp_path, "  - name: a\n    pipeline: [warmup, rl]\n", seeds="[0]"))
    res = run_experiment(study, tmp_path / "out", workers=1, functions=FAKES, log=lambda s: None,
                         launcher=launcher)
    assert not res.ok
    run = res.index["runs"][0]
    assert run["failed_stage"] == "warmup" and "exited with status 3" in run["error"]
    stage_dir = tmp_path / "out" / run["stages"]["warmup"]["dir"]
    assert "launched ['-m', 'harness.cli', 'train', 'warmup'" in (stage_dir / "launch.log").read_text()
    assert (stage_dir / "launch_config.yaml").is_file()
    assert not any(r["stage"] == "warmup" for r in calls())  # the in-process stage function never ran
    with pytest.raises(ConfigError, match="--workers 1"):
        run_experiment(study, tmp_path / "out", workers=2, functions=FAKES, launcher=launcher)


@pytest.mark.slow
def test_stages_launched_under_torchrun_on_two_processes(tmp_path):
    import socket
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launcher = f"{sys.executable} -m torch.distributed.run --nproc_per_node 2 --master_port {port}"
    sizes = ", ".join(t.replace("=", ": ") for t in TINY)
    # Stage 0 into the test's folder (issue 25: it wrote an 11-step base into the user's ~/.cache/regbench).
    extra = (f"common: {{{sizes}, cache_dir: {tmp_path / 'cache'}}}\n"
             "stages: {warmup: {train: {max_steps: 2, batch_size: 4}}, rl: {train: {max_steps: 2}, rl: "
             "{prompts_per_step: 2, group_size: 2, max_new_tokens: 8, min_new_tokens: 2, val_max_samples: 4}}}\n")
    study = load_study(write_study(tmp_path, "  - name: a\n    pipeline: [warmup, rl]\n", seeds="[0]", extra=extra))
    res = run_experiment(study, tmp_path / "out", workers=1, log=lambda s: None, launcher=launcher)
    assert res.ok, res.index["runs"][0]["error"]
    run = res.index["runs"][0]
    for stage in ("warmup", "rl"):
        stage_dir = tmp_path / "out" / run["stages"][stage]["dir"]
        assert read_json(stage_dir / "metrics.json")["processes"] == 2, stage
        assert (stage_dir / "launch.log").is_file() and (stage_dir / "model" / "spec.json").is_file()
    assert read_json(tmp_path / "out" / run["metrics"])["n"] == 6


# ---------------------------------------------------------------------------------------------------------
# A stages folder shared by several studies, and its locks


def test_studies_sharing_a_stages_dir_share_their_stage_runs(tmp_path, calls):
    shared = tmp_path / "shared_stages"
    one = load_study(write_study(tmp_path, ARMS, seeds="[0]", name="one"))
    two = load_study(write_study(tmp_path, "  - name: a\n    overrides: {rl: [rl.regularizer=none]}\n",
                                 seeds="[0]", name="two"))
    assert run_experiment(one, tmp_path / "out1", workers=1, functions=FAKES, log=lambda s: None,
                          stages_dir=shared).ok
    assert sum(r["stage"] == "sft" for r in calls()) == 1  # (reading the calls empties the record)
    res = run_experiment(two, tmp_path / "out2", workers=1, functions=FAKES, log=lambda s: None, stages_dir=shared)
    assert res.ok
    new = [r for r in calls() if r["stage"] != "support"]
    # Study two's warm-up, classifier and SFT resolve to study one's keys: only its RL stage and eval run.
    assert sorted(r["stage"] for r in new) == ["eval", "rl"]
    run = res.index["runs"][0]
    assert run["stages"]["sft"]["dir"].startswith("../shared_stages/sft-seed0-")
    assert res.index["stages_dir"] == "../shared_stages"
    assert (tmp_path / "out2" / "a" / "seed0" / "sft" / "metrics.json").is_file()  # the link resolves
    assert not list(shared.glob("*/.regbench.lock"))  # locks are released


def fake_eval_writing_predictions(cfg, model_dir, progress=False):
    _record("eval", cfg)
    (Path(cfg.out_dir) / "predictions_final_test.jsonl").write_text(json.dumps({"model": model_dir}) + "\n")
    return {"BLEU_4": 0.25, "model": model_dir}


def test_studies_sharing_a_stages_dir_share_the_test_evaluations_of_the_same_model(tmp_path, calls):
    shared = tmp_path / "shared_stages"
    fakes = {**FAKES, "eval": "tests.harness.test_experiments:fake_eval_writing_predictions"}
    one, two, three = (load_study(write_study(tmp_path, ARMS, seeds="[0]", name=n)) for n in ("one", "two", "three"))
    assert run_experiment(one, tmp_path / "out1", workers=1, functions=fakes, log=lambda s: None,
                          stages_dir=shared).ok
    assert sum(r["stage"] == "eval" for r in calls()) == 3
    lines: list[str] = []
    res = run_experiment(two, tmp_path / "out2", workers=1, functions=fakes, log=lines.append, stages_dir=shared)
    assert res.ok and [r for r in calls() if r["stage"] != "support"] == []  # nothing trained, nothing decoded
    assert sum("evaluation is kept in" in line and line.endswith("reused") for line in lines) == 3
    for arm in ("a", "b", "c"):
        theirs, ours = (tmp_path / o / arm / "seed0" / "eval" for o in ("out1", "out2"))
        assert read_json(ours / "metrics.json") == read_json(theirs / "metrics.json")
        assert (ours / "predictions_final_test.jsonl").read_text() == \
            (theirs / "predictions_final_test.jsonl").read_text()
    assert all(r["status"] == "complete" for r in res.index["runs"])
    # A stage run trained again (its metrics.json rewritten) is a new model: its evaluation is decoded again.
    rl_dir = (tmp_path / "out1" / "b" / "seed0" / "rl").resolve()
    atomic_write_json(rl_dir / "metrics.json", {"stage": "rl", "trained": "again"})
    assert run_experiment(three, tmp_path / "out3", workers=1, functions=fakes, log=lambda s: None,
                          stages_dir=shared).ok
    decoded = [r for r in calls() if r["stage"] != "support"]
    assert [(r["stage"], Path(r["out_dir"]).parent.parent.name) for r in decoded] == [("eval", "b")]
    # Without a shared stages folder nothing is kept: the run's eval folder is the record.
    assert run_experiment(one, tmp_path / "alone", workers=1, functions=fakes, log=lambda s: None).ok
    assert not (tmp_path / "alone" / "stages" / "evals").exists()


def test_a_kept_evaluation_that_cannot_be_written_or_read_leaves_the_study_as_without_the_cache(
        tmp_path, calls, monkeypatch):
    from harness.experiments import eval_cache

    def no_room(src, dst):
        raise OSError(28, "No space left on device")

    real = eval_cache._link_or_copy
    fakes = {**FAKES, "eval": "tests.harness.test_experiments:fake_eval_writing_predictions"}
    shared = tmp_path / "shared_stages"
    one, two = (load_study(write_study(tmp_path, ARMS, seeds="[0]", name=n)) for n in ("one", "two"))
    monkeypatch.setattr(eval_cache, "_link_or_copy", no_room)
    res = run_experiment(one, tmp_path / "out1", workers=1, functions=fakes, log=lambda s: None, stages_dir=shared)
    assert res.ok and sum(r["stage"] == "eval" for r in calls()) == 3
    assert list((shared / "evals").iterdir()) == []  # no copy, and no half-written one
    monkeypatch.setattr(eval_cache, "_link_or_copy", real)
    assert run_experiment(one, tmp_path / "out1b", workers=1, functions=fakes, log=lambda s: None,
                          stages_dir=shared).ok
    assert len(list((shared / "evals").iterdir())) == 3
    calls()
    monkeypatch.setattr(eval_cache, "_link_or_copy", no_room)  # kept, but cannot be taken: decoded as usual
    res = run_experiment(two, tmp_path / "out2", workers=1, functions=fakes, log=lambda s: None, stages_dir=shared)
    assert res.ok and sum(r["stage"] == "eval" for r in calls()) == 3


def test_a_stage_run_locked_by_a_live_process_fails_with_a_clear_error(tmp_path, calls):
    import socket

    from harness.experiments import LOCK_NAME

    study = load_study(write_study(tmp_path, "  - name: a\n", seeds="[0]"))
    plan = build_plan(study, tmp_path / "out")
    warmup = next(n for n in plan.nodes.values() if n.kind == "warmup")
    warmup.run_dir.mkdir(parents=True)
    (warmup.run_dir / LOCK_NAME).write_text(f"{socket.gethostname()} 1\n")  # pid 1 is always alive
    res = run_experiment(study, tmp_path / "out", workers=1, functions=FAKES, log=lambda s: None)
    assert not res.ok
    assert "is being run by another process" in res.index["runs"][0]["error"]
    assert not any(r["stage"] == "warmup" for r in calls())
    # A lock whose process is gone (a killed runner) is stale: the next run takes it over.
    (warmup.run_dir / LOCK_NAME).write_text(f"{socket.gethostname()} 999999999\n")
    assert run_experiment(study, tmp_path / "out", workers=1, functions=FAKES, log=lambda s: None).ok
    assert not (warmup.run_dir / LOCK_NAME).exists()


def test_gpu_slots_round_robin_over_the_visible_gpus(monkeypatch):
    from harness.experiments import gpu_slots

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert gpu_slots(3) == ["3", "5", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_slots(2) == [None, None]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert gpu_slots(1) == [None]


def _threads_stage(stage: str):
    def run(cfg, progress=False):
        import torch

        with open(os.environ["REGBENCH_TEST_CALLS"], "a") as f:
            f.write(json.dumps({"stage": stage, "threads": torch.get_num_threads()}) + "\n")
        out = Path(cfg.out_dir)
        (out / "model").mkdir(parents=True, exist_ok=True)
        atomic_write_json(out / "metrics.json", {"stage": stage})
        return out / "model"
    return run


threads_warmup = _threads_stage("warmup")


def test_in_process_runs_use_the_worker_thread_count(tmp_path, calls):
    import torch

    torch.set_num_threads(2)
    study = load_study(write_study(tmp_path, "  - name: a\n    pipeline: [warmup]\n", seeds="[0]"))
    fns = {**FAKES, "warmup": "tests.harness.test_experiments:threads_warmup"}
    assert run_experiment(study, tmp_path / "out", workers=1, functions=fns, log=lambda s: None).ok
    assert [r["threads"] for r in calls() if r["stage"] == "warmup"] == [1]
    assert torch.get_num_threads() == 2  # restored


def _key_without_field(monkeypatch, kind: str, cfg, inputs: dict, field: str) -> str:
    """The stage key `cfg` would have had before `field` ("section.name") existed."""
    from harness.config import to_dict
    from harness.experiments import resolve

    section, name = field.split(".")

    def without_field(c):
        d = to_dict(c)
        d[section].pop(name)
        return d

    monkeypatch.setattr(resolve, "to_dict", without_field)
    key = resolve.config_key(kind, cfg, inputs)
    monkeypatch.undo()
    return key


def test_stage_keys_of_the_tiny_power_preset_are_pinned():
    """A new config field changes every stage key (config_key hashes the whole config) unless it is in
    resolve._KEYED_WHEN_SET at the value that computes what runs computed before it: then every earlier study's
    warm-up, classifier and SFT runs would be recomputed. These are the keys at 0f69314 (before rl.lora_pass);
    change them only on purpose, saying why."""
    from harness.experiments import resolve

    expected = {"warmup": "75f905b134", "sft": "d3597a2942", "rl": "3f22959652", "eval": "10e16fd1b5"}
    for stage, key in expected.items():
        cfg = load_config(EXPERIMENTS / "presets" / "tiny-power.yaml", stage=stage)
        assert resolve.config_key(stage, cfg, {"x": "y"}) == key, stage


@pytest.mark.parametrize(("overrides", "kind", "inputs", "field", "keyed_value"), [
    # model.train_format_tokens (issue 24) at its default
    (["prompt.output_format=think_report"], "sft", {"warmup": "abc"}, "model.train_format_tokens", True),
    # model.attn_implementation (issue 27): eager, what every tiny run computed before the field existed; sdpa (the
    # tiny preset files) computes other last bits
    ([], "rl", {"init": "abc"}, "model.attn_implementation", "sdpa"),
    # rl.lora_pass (issue 27): peft is what every run computed before; a warm-up keeps its key either way
    ([], "rl", {"init": "abc"}, "rl.lora_pass", "merged"),
    ([], "warmup", {}, "rl.lora_pass", None),
    # rl.prompt_pass (issue 27): per_row is what every run computed before
    ([], "rl", {"init": "abc"}, "rl.prompt_pass", "shared"),
    # train.group_by_length / pretrain.group_by_length (issue 27): off is the random order every run trained on
    ([], "sft", {"warmup": "abc"}, "train.group_by_length", True),
    ([], "warmup", {}, "pretrain.group_by_length", True),
    # classifier.amp_bf16 (issue 27): fp32, what every classifier trained before the field reached the stage config
    ([], "classifier", {"data": "abc"}, "classifier.amp_bf16", True),
    # data.report_variation, eval.gold_reader (issue 44): the plain grammar and the v1 reader, as every run before
    ([], "sft", {"warmup": "abc"}, "data.report_variation", "high"),
    ([], "eval", {"model": "abc"}, "eval.gold_reader", "v2"),
])
def test_later_model_fields_are_keyed_only_when_they_change_what_runs(monkeypatch, overrides, kind, inputs, field,
                                                                      keyed_value):
    """At the value that computes what runs computed before the field existed, a stage run keeps its key (earlier
    studies' stage runs are reused); at another value the field is part of the key."""
    from harness.config import load_config
    from harness.experiments import resolve

    cfg = load_config(None, overrides)
    key = resolve.config_key(kind, cfg, inputs)
    assert _key_without_field(monkeypatch, kind, cfg, inputs, field) == key
    if keyed_value is not None:
        section, name = field.split(".")
        setattr(getattr(cfg, section), name, keyed_value)
        assert resolve.config_key(kind, cfg, inputs) != key
