"""A study's `upstream:` (issue 42): some of its stages take their input from another study's stage runs, as the
official IU-Xray stage 1 loads MIMIC-CXR's stage-1 model and the IU classifier starts from MIMIC's classifier.

Planning tests on the real Table 1 studies and on two toy studies over the tiny preset; runner tests with fake
stage functions (they record what they were called with); one end-to-end run of two real tiny studies.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.cli import main
from harness.config import ConfigError, RunConfig, from_dict
from harness.experiments import build_plan, load_study, run_experiment
from harness.runs.records import atomic_write_json, read_json
from tests.tiny_sizes import TINY

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
TINY_PRESET = EXPERIMENTS / "presets" / "tiny.yaml"


def write_pair(tmp_path: Path, upstream: str = "{study: up.yaml, stages: {warmup: warmup, classifier: classifier}}",
               down_arms: str | None = None, up_extra: str = "", down_extra: str = "", seeds: str = "[0, 1]"):
    """Two toy studies on the tiny preset: up.yaml (arm a: all four stages) and down.yaml (its `upstream`)."""
    (tmp_path / "up.yaml").write_text(
        f"base: {TINY_PRESET}\nstudy: up\nbaseline: a\nseeds: {seeds}\n{up_extra}"
        "arms:\n  - name: a\n    overrides: {rl: [rl.regularizer=rer, rl.reference=vapr]}\n")
    arms = down_arms or ("  - name: full\n  - name: s1\n    pipeline: [warmup]\n"
                         "  - name: base\n    pipeline: []\n")
    down = tmp_path / "down.yaml"
    down.write_text(f"base: {TINY_PRESET}\nstudy: down\nseeds: {seeds}\nupstream: {upstream}\n{down_extra}"
                    f"arms:\n{arms}")
    return tmp_path / "up.yaml", down


# ---------------------------------------------------------------------------------------------------------
# Planning


def test_the_iu_study_plan_takes_mimics_stage1_and_classifier_as_inputs(tmp_path, capsys):
    iu = load_study(EXPERIMENTS / "table1_iu_xray.yaml")
    mimic = load_study(EXPERIMENTS / "table1_mimic_cxr.yaml")
    assert iu.upstream.study.name == "table1_mimic_cxr" and iu.upstream.arm == "reva_po"
    plan = build_plan(iu, tmp_path / "iu", stages_dir=tmp_path / "stages")
    theirs = build_plan(mimic, tmp_path / "mimic", stages_dir=tmp_path / "stages")
    for seed in iu.seeds:
        up_warmup = theirs.nodes[theirs.runs[("reva_po", seed)].stages["warmup"]]
        up_clf = theirs.nodes[theirs.runs[("reva_po", seed)].stages["classifier"]]
        for arm in ("reva_po", "s1", "s1_s2"):
            run = plan.runs[(arm, seed)]
            warmup = plan.nodes[run.stages["warmup"]]
            # the MIMIC runs are nodes of the IU graph with the keys they have in their own study (so reused)
            assert run.upstream["warmup"] == up_warmup.id and up_warmup.id in warmup.deps
            assert plan.nodes[up_warmup.id].key == up_warmup.key
            assert warmup.config["init_from"] == str(tmp_path / "stages" / f"warmup-seed{seed}-{up_warmup.key}"
                                                     / "model")
            assert run.init_from["warmup"] == "table1_mimic_cxr:warmup"
            if arm != "s1":
                clf = plan.nodes[run.stages["classifier"]]
                assert run.upstream["classifier"] == up_clf.id and up_clf.id in clf.deps
                assert clf.config["classifier"]["pretrained_path"] == str(up_clf.run_dir / "classifier")
        assert plan.runs[("base", seed)].upstream == {}
    # MIMIC's RL and SFT runs are no part of the IU graph
    assert {n.kind for n in plan.stage_nodes() if n.id in theirs.nodes} == {"warmup", "classifier"}
    # The dry-run plan shows them as inputs.
    assert main(["experiment", "list", str(EXPERIMENTS / "table1_iu_xray.yaml"), "--out", str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    for seed in iu.seeds:
        for stage in ("warmup", "classifier"):
            key = theirs.nodes[theirs.runs[("reva_po", seed)].stages[stage]].key
            assert f"(<- table1_mimic_cxr {stage} {key}" in text and f"{stage}-seed{seed}-{key} (pending)" in text
    assert "upstream table1_mimic_cxr.yaml" in text


@pytest.mark.parametrize(("iu", "mimic"), [("iuxray-qwen2.5vl-7b", "mimic-qwen2.5vl-7b"),
                                            ("iuxray-qwen2.5vl-3b", "mimic-qwen2.5vl-3b"),
                                            ("tiny-power", "tiny-power")])
def test_the_iu_presets_chain_from_the_mimic_presets(iu, mimic):
    study = load_study(EXPERIMENTS / "table1_iu_xray.yaml", preset=EXPERIMENTS / "presets" / f"{iu}.yaml")
    assert study.upstream.study.preset == mimic


def test_upstream_keys_are_part_of_the_downstream_keys(tmp_path):
    _, down = write_pair(tmp_path)
    plan = build_plan(load_study(down), tmp_path / "o")
    changed = build_plan(load_study(down, sets=["upstream.sets=[stages.warmup.train.lr=0.002]"]), tmp_path / "o")
    stages = ("warmup", "classifier", "sft", "rl")
    before = {s: plan.nodes[plan.runs[("full", 0)].stages[s]].key for s in stages}
    after = {s: changed.nodes[changed.runs[("full", 0)].stages[s]].key for s in stages}
    # a new upstream warm-up: a new downstream warm-up, and so a new SFT and RL; the classifier keeps its key
    assert [before[s] != after[s] for s in stages] == [True, False, True, True]
    assert plan.nodes[plan.runs[("full", 0)].upstream["warmup"]].key != \
        changed.nodes[changed.runs[("full", 0)].upstream["warmup"]].key
    # the same study without `upstream`: the warm-up starts from the base model, under another key
    down.write_text(down.read_text().replace("upstream:", "#"))
    alone = build_plan(load_study(down), tmp_path / "o")
    run = alone.runs[("full", 0)]
    assert alone.nodes[run.stages["warmup"]].key != before["warmup"] and run.upstream == {}
    assert alone.nodes[run.stages["classifier"]].config["classifier"]["pretrained_path"] is None
    # the base arm's evaluation does not depend on the upstream
    assert alone.nodes[alone.runs[("base", 0)].eval_node].key == plan.nodes[plan.runs[("base", 0)].eval_node].key


def test_an_upstream_run_asks_a_cluster_for_its_own_presets_resources(tmp_path):
    _, down = write_pair(tmp_path, up_extra="resources: {warmup: {gpus: 3, time_min: 999}}\n")
    plan = build_plan(load_study(down), tmp_path / "o")
    run = plan.runs[("full", 0)]
    theirs, mine = plan.nodes[run.upstream["warmup"]], plan.nodes[run.stages["warmup"]]
    assert theirs.resources["warmup"].gpus == 3 and theirs.resources["warmup"].time_min == 999
    assert mine.resources is None and plan.study.resources["warmup"].gpus == 0


def test_stage_seeds_pick_the_upstream_seed(tmp_path):
    _, down = write_pair(tmp_path, down_extra="stage_seeds: {warmup: 0}\n")
    plan = build_plan(load_study(down), tmp_path / "o")
    ups = {plan.runs[("full", s)].upstream["warmup"] for s in (0, 1)}
    assert len(ups) == 1 and plan.nodes[ups.pop()].config["seed"] == 0
    assert plan.runs[("full", 0)].stages["warmup"] == plan.runs[("full", 1)].stages["warmup"]  # shared, as before
    clf = {plan.nodes[plan.runs[("full", s)].upstream["classifier"]].config["seed"] for s in (0, 1)}
    assert clf == {0, 1}


@pytest.mark.parametrize(("upstream", "message"), [
    ("{study: up.yaml}", "'upstream' must be a mapping with keys study, stages"),
    ("{study: up.yaml, stages: {warmup: warmup}, bogus: 1}", "'upstream' must be a mapping"),
    ("{study: up.yaml, stages: {}}", "upstream.stages must map"),
    ("{study: up.yaml, stages: {classifier: warmup}}", "maps 'classifier' to 'warmup'"),
    ("{study: up.yaml, stages: {warmup: classifier}}", "maps 'warmup' to 'classifier'"),
    ("{study: up.yaml, stages: {warmup: eval}}", "maps 'warmup' to 'eval'"),
    ("{study: up.yaml, arm: zz, stages: {warmup: warmup}}", "no arm 'zz'"),
    ("{study: missing.yaml, stages: {warmup: warmup}}", "missing.yaml"),
    ("{study: up.yaml, stages: {warmup: warmup}, sets: x}", "upstream.sets be a list"),
])
def test_bad_upstream_declarations_fail_clearly(tmp_path, upstream, message):
    _, down = write_pair(tmp_path, upstream=upstream)
    with pytest.raises(ConfigError, match=message):
        load_study(down)


def test_upstream_misfits_fail_clearly(tmp_path):
    up, down = write_pair(tmp_path, upstream="{study: up.yaml, stages: {sft: warmup}}")
    up.write_text(up.read_text().replace("  - name: a\n", "  - name: a\n    pipeline: [rl]\n"))
    with pytest.raises(ConfigError, match="arm 'a' of up.yaml does not run stage 'warmup'"):
        load_study(down)
    up, down = write_pair(tmp_path, upstream="{study: up.yaml, stages: {sft: sft}}")
    with pytest.raises(ConfigError, match="arm 'full'.*starts from its own warmup"):
        build_plan(load_study(down), tmp_path / "o")
    # a network of another size cannot start from the upstream model / classifier
    _, down = write_pair(tmp_path, down_extra="common: {model: {tiny_text_layers: 3}}\n")
    with pytest.raises(ConfigError, match="stage 'warmup' starts from up.yaml's warmup run, which has "
                                          "model.tiny_text_layers = 2, not 3"):
        build_plan(load_study(down), tmp_path / "o")
    _, down = write_pair(tmp_path, down_extra="stages: {classifier: {classifier: {img_size: 56}}}\n")
    with pytest.raises(ConfigError, match="classifier.img_size = 112, not 56"):
        build_plan(load_study(down), tmp_path / "o")
    # one level only
    (tmp_path / "top.yaml").write_text(f"base: {TINY_PRESET}\nstudy: top\nupstream: {{study: down.yaml, "
                                       "stages: {warmup: warmup}}\narms:\n  - name: x\n")
    with pytest.raises(ConfigError, match="declares an upstream of its own"):
        load_study(tmp_path / "top.yaml")


# ---------------------------------------------------------------------------------------------------------
# Running, with fake stages: the upstream runs first, and is reused by its own study


def _record(stage: str, cfg) -> None:
    with open(os.environ["REGBENCH_TEST_CALLS"], "a") as f:
        f.write(json.dumps({"stage": stage, "out_dir": cfg.out_dir, "seed": cfg.seed, "init_from": cfg.init_from,
                            "pretrained": cfg.classifier.pretrained_path}) + "\n")


def _fake(stage: str):
    def run(cfg, progress=False):
        _record(stage, cfg)
        if stage == "warmup" and cfg.init_from is None and os.environ.get("REGBENCH_TEST_FAIL_BASE_WARMUP"):
            raise RuntimeError("fake warm-up blew up")
        sub = "classifier" if stage == "classifier" else "model"
        (Path(cfg.out_dir) / sub).mkdir(parents=True, exist_ok=True)
        atomic_write_json(Path(cfg.out_dir) / "metrics.json", {"stage": stage})
        return Path(cfg.out_dir) / sub
    return run


fake_warmup, fake_classifier, fake_sft, fake_rl = (_fake(s) for s in ("warmup", "classifier", "sft", "rl"))


def fake_support(cfg, progress=False):
    return Path(cfg.out_dir)


def fake_eval(cfg, model_dir, progress=False):
    _record("eval", cfg)
    return {"BLEU_4": 0.25}


FAKES = {k: f"tests.harness.test_upstream:fake_{v}" for k, v in (
    ("warmup", "warmup"), ("classifier", "classifier"), ("sft", "sft"), ("rl", "rl"), ("eval", "eval"),
    ("data", "support"), ("test_data", "support"), ("pretrain", "support"))}


def test_the_upstream_runs_first_and_its_own_study_reuses_it(tmp_path, calls):
    up, down = write_pair(tmp_path, seeds="[0]")
    stages = tmp_path / "stages"
    res = run_experiment(load_study(down), tmp_path / "down_out", workers=1, functions=FAKES, log=lambda s: None,
                         stages_dir=stages)
    assert res.ok
    rows = calls()
    order = [(r["stage"], Path(r["out_dir"]).name) for r in rows if r["stage"] != "eval"]
    up_warmup = next(r for r in rows if r["stage"] == "warmup" and r["init_from"] is None)
    up_clf = next(r for r in rows if r["stage"] == "classifier" and r["pretrained"] is None)
    my_warmup = next(r for r in rows if r["stage"] == "warmup" and r["init_from"] is not None)
    my_clf = next(r for r in rows if r["stage"] == "classifier" and r["pretrained"] is not None)
    # the downstream stages start from the upstream runs, which ran before them
    assert my_warmup["init_from"] == str(Path(up_warmup["out_dir"]) / "model")
    assert my_clf["pretrained"] == str(Path(up_clf["out_dir"]) / "classifier")
    names = [n for _, n in order]
    assert names.index(Path(up_warmup["out_dir"]).name) < names.index(Path(my_warmup["out_dir"]).name)
    assert names.index(Path(up_clf["out_dir"]).name) < names.index(Path(my_clf["out_dir"]).name)
    # one upstream warm-up and classifier (shared by the arms), nothing else of the upstream study
    assert [s for s, _ in order].count("warmup") == 2 and [s for s, _ in order].count("classifier") == 2
    assert [s for s, _ in order].count("sft") == 1 and [s for s, _ in order].count("rl") == 1
    index = read_json(tmp_path / "down_out" / "index.json")
    full = next(r for r in index["runs"] if r["arm"] == "full")
    entry = full["stages"]["warmup"]["upstream"]
    assert entry["study"] == "up" and entry["stage"] == "warmup" and entry["status"] == "complete"
    assert (tmp_path / "down_out" / entry["dir"]).resolve() == Path(up_warmup["out_dir"]).resolve()
    assert full["stages"]["warmup"]["init_from"] == "up:warmup"
    assert full["stages"]["classifier"]["upstream"]["stage"] == "classifier"

    # The upstream study with the same stages folder: its warm-up and classifier are the same runs (same keys).
    before = len(rows)
    assert run_experiment(load_study(up), tmp_path / "up_out", workers=1, functions=FAKES, log=lambda s: None,
                          stages_dir=stages).ok
    new = [r["stage"] for r in calls()[before:]]
    assert sorted(new) == ["eval", "rl", "sft"]


def test_a_failed_upstream_run_fails_the_runs_that_need_it(tmp_path, calls, monkeypatch):
    monkeypatch.setenv("REGBENCH_TEST_FAIL_BASE_WARMUP", "1")
    _, down = write_pair(tmp_path, seeds="[0]")
    res = run_experiment(load_study(down), tmp_path / "o", workers=1, functions=FAKES, log=lambda s: None)
    assert not res.ok
    runs = {r["arm"]: r for r in res.index["runs"]}
    assert runs["full"]["status"] == runs["s1"]["status"] == "failed"
    assert runs["full"]["failed_stage"] == "warmup" and "fake warm-up blew up" in runs["full"]["error"]
    assert runs["base"]["status"] == "complete"


# ---------------------------------------------------------------------------------------------------------
# Two real tiny studies


@pytest.mark.slow  # about 60-90 s on 2 loaded cores: stage 0, two warm-ups, two classifiers, an SFT, an evaluation
def test_two_real_tiny_studies_chain_their_warmup_and_classifier(tmp_path):
    sizes = ", ".join(t.replace("=", ": ") for t in TINY)
    common = (f"common: {{{sizes}, cache_dir: {tmp_path / 'cache'}}}\n"
              "stages: {warmup: {train: {max_steps: 2, batch_size: 4}}, "
              "classifier: {classifier: {epochs: 1, batch_size: 8, img_size: 32}}, "
              "sft: {train: {max_steps: 2, batch_size: 4}, model: {lora_r: 4, lora_alpha: 8}}}\n")
    arms = "  - name: s1_s2\n    pipeline: [warmup, classifier, sft]\n"
    _, down = write_pair(tmp_path, seeds="[0]", down_arms=arms, up_extra=common, down_extra=common)
    up = tmp_path / "up.yaml"
    up.write_text(up.read_text().replace("  - name: a\n", "  - name: a\n    pipeline: [warmup, classifier]\n"))
    out = tmp_path / "out"
    assert main(["experiment", "run", str(down), "--workers", "1", "--out", str(out)]) == 0
    run = read_json(out / "index.json")["runs"][0]
    assert run["status"] == "complete" and run["final_stage"] == "sft"
    mine = {s: read_json(out / run["stages"][s]["dir"] / "manifest.json")["config"] for s in ("warmup", "classifier")}
    theirs = {s: out / run["stages"][s]["upstream"]["dir"] for s in ("warmup", "classifier")}
    # the warm-up started from the upstream warm-up's model, the classifier from the upstream classifier's weights
    assert Path(mine["warmup"]["init_from"]).resolve() == (theirs["warmup"] / "model").resolve()
    assert Path(mine["classifier"]["classifier"]["pretrained_path"]).resolve() == \
        (theirs["classifier"] / "classifier").resolve()
    assert read_json(theirs["warmup"] / "manifest.json")["config"]["init_from"] is None
    cfg = from_dict(RunConfig, mine["warmup"])
    assert cfg.model.tiny_text_hidden == 32
