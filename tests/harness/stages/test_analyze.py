"""harness/stages/analyze.py: Supp. A records of an RL run (before / after RL candidates and their rewards).

Model loading and sampling are replaced by a fixed set of candidates; everything else (manifest -> RunConfig,
prompts, reward registry, the JSON files) is the real code. The experiment runner's `analyses` hook is tested
here with fakes and, on real tiny models, in tests/harness/test_experiments.py (test_real_tiny_study_end_to_end).
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import numpy as np
import pytest

from reports.analyses import p_sign, summary_lines, within_group_std

REPORTS = ["the heart size is normal . no pleural effusion or pneumothorax .",
           "mild cardiomegaly . small left pleural effusion .",
           "the lungs are clear . no acute osseous abnormality .",
           "right lower lobe opacity may represent pneumonia ."]


@pytest.fixture
def fake_rl_run(tmp_path, monkeypatch):
    import harness.stages.analyze as ac
    import harness.stages.common as common
    import harness.stages.rl as rl_stage
    from harness.config import RunConfig, to_dict

    run = tmp_path / "rl"
    (run / "model").mkdir(parents=True)
    (tmp_path / "sft" / "model").mkdir(parents=True)
    cfg = RunConfig(init_from=str(tmp_path / "sft" / "model"), out_dir=str(run))
    (run / "manifest.json").write_text(json.dumps({"stage": "rl", "seed": 0, "config": to_dict(cfg)}))
    samples = [SimpleNamespace(id=f"s{i}", report=REPORTS[i % 4]) for i in range(5)]
    monkeypatch.setattr(common, "load_splits", lambda cfg, progress=True: {"val": samples})
    monkeypatch.setattr(rl_stage, "prompt_set", lambda cfg, s, spec: SimpleNamespace(
        ids=[x.id for x in s], images=[[None]] * len(s), instructions=["describe"] * len(s),
        references=[x.report for x in s]))
    loaded = []
    monkeypatch.setattr(ac, "_load_policy", lambda path, cfg, device: loaded.append(str(path)) or (path, None, {}))

    def fake_sample(model, processor, prompts, cfg, group_size, seed, batch_prompts):
        rng = np.random.default_rng(seed + (1 if str(model).endswith("model") and "rl" in str(model) else 0))
        return [REPORTS[int(k)] for k in rng.integers(0, 4, size=len(prompts.ids) * group_size)]

    monkeypatch.setattr(ac, "_sample", fake_sample)
    monkeypatch.setattr(ac, "analysis_rewards", lambda kind: ["bleu4", "chexpert_f1"] + (
        ["entity_f1"] if kind == "reward-variance" else []))
    return run, loaded


def test_run_analysis_sign_alignment(fake_rl_run):
    from harness.stages.analyze import run_analysis

    run, loaded = fake_rl_run
    path = run_analysis("sign-alignment", run, n_prompts=4, group_size=3, seed=0)
    assert path == run / "analysis_sign-alignment.json"
    assert loaded == [str(run.parent / "sft" / "model"), str(run / "model")]  # before RL, after RL
    d = json.loads(path.read_text())
    assert (d["n_prompts"], d["group_size"], d["rewards_used"]) == (4, 3, ["bleu4", "chexpert_f1"])
    for pol in ("before", "after"):
        res = d["policies"][pol]
        assert len(res["candidates"]) == 4 and all(len(g) == 3 for g in res["candidates"])
        b, f = np.array(res["rewards"]["bleu4"]), np.array(res["rewards"]["chexpert_f1"])
        assert b.shape == (4, 3)
        # a candidate identical to its reference gets BLEU-4 = 1 and CheXpert F1 = 1
        refs = [REPORTS[i % 4] for i in range(4)]
        for i, group in enumerate(res["candidates"]):
            for j, cand in enumerate(group):
                if cand == refs[i]:
                    assert b[i, j] == pytest.approx(1.0) and f[i, j] == pytest.approx(1.0)
        assert res["ids"] == [f"s{i}" for i in range(4)] and res["references"] == refs
        assert "stats" not in res  # reports/ computes the statistics from the stored rewards
    lines = summary_lines(d)
    assert any("P_sign" in line for line in lines)
    before = d["policies"]["before"]["rewards"]
    line = next(x for x in lines if x.strip().startswith("before"))
    assert f"P_sign={p_sign(before['bleu4'], before['chexpert_f1'])['value']:.3f}" in line


def test_run_analysis_reward_variance(fake_rl_run):
    from harness.stages.analyze import run_analysis

    run, _ = fake_rl_run
    d = json.loads(run_analysis("reward-variance", run, group_size=4, seed=1).read_text())
    assert d["n_prompts"] == 5 and d["rewards_used"] == ["bleu4", "chexpert_f1", "entity_f1"]
    res = d["policies"]["after"]
    assert np.array(res["rewards"]["entity_f1"]).shape == (5, 4) and "chexpert_f1" in res["rewards"]
    line = next(x for x in summary_lines(d) if x.strip().startswith("after"))
    assert f"bleu4: mean std {within_group_std(res['rewards']['bleu4']).mean():.4f}" in line


def test_relative_init_from_is_found(fake_rl_run, monkeypatch, tmp_path):
    """init_from relative to the folder the experiment ran in is looked up from the run's parents."""
    from harness.stages.analyze import run_analysis

    run, loaded = fake_rl_run
    man = json.loads((run / "manifest.json").read_text())
    man["config"]["init_from"] = "sft/model"
    (run / "manifest.json").write_text(json.dumps(man))
    monkeypatch.chdir(run / "model")
    run_analysis("sign-alignment", run, n_prompts=2, group_size=2)
    assert loaded[0] == str(tmp_path.resolve() / "sft" / "model")
    man["config"]["init_from"] = "elsewhere/model"
    (run / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(FileNotFoundError, match="elsewhere"):
        run_analysis("sign-alignment", run)


def test_run_analysis_errors(tmp_path):
    from harness.stages.analyze import run_analysis

    with pytest.raises(ValueError, match="unknown analysis"):
        run_analysis("entropy", tmp_path)
    with pytest.raises(FileNotFoundError):
        run_analysis("sign-alignment", tmp_path / "missing")


def test_two_kinds_share_one_sample_per_policy(fake_rl_run):
    from harness.stages.analyze import run_analyses

    run, loaded = fake_rl_run
    paths = run_analyses(run, ["reward-variance", "sign-alignment"], n_prompts=3, group_size=2, key="k1")
    assert [p.name for p in paths] == ["analysis_reward-variance.json", "analysis_sign-alignment.json"]
    assert len(loaded) == 2  # one load (and one sample) per policy for both files
    rv, sa = (json.loads(p.read_text()) for p in paths)
    assert rv["policies"]["after"]["candidates"] == sa["policies"]["after"]["candidates"]
    assert rv["policies"]["after"]["rewards"]["bleu4"] == sa["policies"]["after"]["rewards"]["bleu4"]
    assert set(sa["policies"]["after"]["rewards"]) == {"bleu4", "chexpert_f1"} and rv["key"] == sa["key"] == "k1"


def _counting_sampler(monkeypatch):
    import harness.stages.analyze as ac

    drawn = []
    inner = ac._sample

    def counting(model, processor, prompts, cfg, group_size, seed, batch_prompts):
        drawn.append(str(model))
        return inner(model, processor, prompts, cfg, group_size, seed, batch_prompts)

    monkeypatch.setattr(ac, "_sample", counting)
    return drawn


def _second_run_from_the_same_model(run, name: str, **rl_changes):
    """Another RL run (another arm or seed) that starts from the same SFT model as `run`."""
    other = run.parent / name
    (other / "model").mkdir(parents=True)
    man = json.loads((run / "manifest.json").read_text())
    man["seed"] = 7
    man["config"].update(seed=7, out_dir=str(other))
    man["config"]["rl"].update(regularizer="none", reward="entity_f1", **rl_changes)
    (other / "manifest.json").write_text(json.dumps(man))
    return other


def test_the_policy_before_rl_is_sampled_once_per_start_model(fake_rl_run, monkeypatch):
    """Arms and seeds from one SFT model share its candidates; a sampling setting makes a sample of its own."""
    from harness.stages.analyze import SHARED_FOLDER, run_analyses

    run, _ = fake_rl_run
    drawn = _counting_sampler(monkeypatch)
    first = json.loads(run_analyses(run, ["sign-alignment"], n_prompts=4, group_size=3)[0].read_text())
    other = _second_run_from_the_same_model(run, "rl_other")
    second = json.loads(run_analyses(other, ["sign-alignment"], n_prompts=4, group_size=3)[0].read_text())
    sft = str(run.parent / "sft" / "model")
    assert drawn == [sft, str(run / "model"), str(other / "model")]  # before RL drawn once
    assert second["policies"]["before"] == first["policies"]["before"] | {"model": sft}
    shared = list((run.parent / "sft" / SHARED_FOLDER).glob("*.json"))
    assert len(shared) == 1
    # what is read is the file (a planted candidate list comes back)
    planted = [["planted"] * 3 for _ in range(4)]
    shared[0].write_text(json.dumps({"candidates": [c for g in planted for c in g]}))
    third = json.loads(run_analyses(other, ["sign-alignment"], n_prompts=4, group_size=3)[0].read_text())
    assert third["policies"]["before"]["candidates"] == planted
    # a setting sampling reads (the temperature), the seed or the group size: a new key, a new draw
    hot = _second_run_from_the_same_model(run, "rl_hot", temperature=1.3)
    run_analyses(hot, ["sign-alignment"], n_prompts=4, group_size=3)
    run_analyses(other, ["sign-alignment"], n_prompts=4, group_size=3, seed=5)
    run_analyses(other, ["sign-alignment"], n_prompts=4, group_size=2)
    assert drawn.count(sft) == 4 and len(list(shared[0].parent.glob("*.json"))) == 4


def test_analysis_samples_with_the_runs_decoding_backend(monkeypatch):
    """The analysis decodes with generation.backend (the lean loop by default), as the RL run did."""
    import harness.grpo.rollout as rollout
    from harness.config import RunConfig
    from harness.stages.analyze import _sample

    seen = []
    monkeypatch.setattr(rollout, "sample_rollout", lambda *a, **k: seen.append(k["backend"]) or SimpleNamespace(
        texts=["x"] * k["group_size"]))
    prompts = SimpleNamespace(ids=["a"], images=[[None]], instructions=["d"])
    for backend in ("lean", "hf"):
        cfg = RunConfig()
        cfg.generation.backend = backend
        assert _sample(None, None, prompts, cfg, 2, 0, 8) == ["x", "x"]
    assert seen == ["lean", "hf"] and RunConfig().generation.backend == "lean"


# ---------------------------------------------------------------------------------------------------------
# The study field `analyses` and the experiment runner's hook (fake stages; tests/harness/test_experiments.py)

from tests.harness.test_experiments import FAKES, calls, write_study  # noqa: E402, F401 - calls is a fixture


def fake_analysis(run_dir, kinds, n_prompts, group_size, seed, key, progress=False):
    from pathlib import Path

    from harness.runs.records import atomic_write_json

    assert (Path(run_dir) / "model").is_dir()  # runs after its RL stage
    with open(os.environ["REGBENCH_TEST_CALLS"], "a") as f:
        f.write(json.dumps({"stage": "analysis", "out_dir": str(run_dir), "kinds": kinds, "n": n_prompts}) + "\n")
    paths = []
    for kind in kinds:
        atomic_write_json(Path(run_dir) / f"analysis_{kind}.json", {"kind": kind, "key": key})
        paths.append(Path(run_dir) / f"analysis_{kind}.json")
    return paths


ARMS2 = """  - name: a
    overrides: {rl: [rl.regularizer=rer, rl.reference=vapr]}
  - name: b
    overrides: {rl: [rl.regularizer=constant]}
  - name: s
    pipeline: [warmup, classifier, sft]
"""


def test_the_runner_runs_the_studys_analyses_after_the_rl_arms(tmp_path, calls):  # noqa: F811 - the fixture
    from harness.experiments import load_study, run_experiment
    from harness.runs.records import read_json

    fakes = {**FAKES, "analysis": "tests.harness.stages.test_analyze:fake_analysis"}
    path = write_study(tmp_path, ARMS2, seeds="[0]", extra="analyses: [reward_variance, sign_alignment]\n")
    study = load_study(path)
    assert study.analyses == {"kinds": ["reward-variance", "sign-alignment"], "arms": None, "n_prompts": None,
                              "group_size": 4, "seed": 0}
    out = tmp_path / "out"
    assert run_experiment(study, out, workers=1, functions=fakes, log=lambda s: None).ok
    rows = calls()
    ana = [r for r in rows if r["stage"] == "analysis"]
    # every arm with an RL stage (a, b), none for the SFT-only arm; after the RL runs they analyse
    assert len(ana) == 2 and {r["kinds"][0] for r in ana} == {"reward-variance"}
    order = [r["stage"] for r in rows if r["stage"] in ("rl", "analysis")]
    assert order.index("analysis") > max(i for i, s in enumerate(order) if s == "rl")
    index = read_json(out / "index.json")
    runs = {r["arm"]: r for r in index["runs"]}
    assert runs["a"]["stages"]["analysis"]["status"] == "complete" and "analysis" not in runs["s"]["stages"]
    assert runs["a"]["stages"]["analysis"]["dir"] == runs["a"]["stages"]["rl"]["dir"]
    assert (out / runs["a"]["stages"]["rl"]["dir"] / "analysis_sign-alignment.json").is_file()

    # complete: nothing reruns; other analysis settings (a new key): only the analyses rerun
    assert run_experiment(study, out, workers=1, functions=fakes, log=lambda s: None).ok and calls() == []
    path = write_study(tmp_path, ARMS2, seeds="[0]", extra="analyses: {kinds: [sign_alignment], arms: [a], "
                                                          "n_prompts: 8}\n")
    assert run_experiment(load_study(path), out, workers=1, functions=fakes, log=lambda s: None).ok
    rows = calls()
    assert [r["stage"] for r in rows if r["stage"] != "support"] == ["analysis"] and rows[-1]["n"] == 8


@pytest.mark.parametrize("value, match", [
    ("[entropy]", "unknown analysis 'entropy'"),
    ("{kinds: []}", "analyses.kinds must be a non-empty list"),
    ("{kinds: [sign_alignment], arms: [zz]}", "analyses.arms must list arms of the study"),
    ("{kinds: [sign_alignment], group_size: 1}", "analyses.group_size must be an integer >= 2"),
    ("{kinds: [sign_alignment], promts: 3}", "unknown key 'promts'"),
])
def test_bad_analyses_fields_fail_clearly(tmp_path, value, match):
    from harness.config import ConfigError
    from harness.experiments import load_study

    path = write_study(tmp_path, ARMS2, seeds="[0]", extra=f"analyses: {value}\n")
    with pytest.raises(ConfigError, match=match) as e:
        load_study(path)
    assert str(path) in str(e.value)
