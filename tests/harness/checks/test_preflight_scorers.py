"""Scorers checked before hours are spent (issue 43, item 3): a command whose resolved config will need CheXbert,
RadGraph or vLLM that is not here is refused before it decodes, trains, builds stage 0 or writes anything, with one
line naming the missing file and how to get it (harness/checks/needs.py, harness/checks/preflight.py: check_scorers).

Before: `regbench eval ... eval.ce_backend=chexbert` decoded the whole split, then failed ("CheXbert weights not
found") and dropped the reports; RL with a CheXbert or RadGraph reward, or the paper's RadGraph validation term,
failed at the step-0 validation, after loading the model and decoding the validation split.

The packages fix their cache folders when imported (f1chexbert: appdirs.user_cache_dir("chexbert"); radgraph:
appdirs.user_cache_dir("radgraph")/<version>): in this process they are pointed at empty folders of the test; the
first test runs `regbench eval` in a fresh process whose HOME is an empty folder, as a user without the weights
would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.checks.needs import check_needs, problem, stage_needs
from harness.cli import main
from harness.config import ConfigError, load_config
from rewards.spec import reward_scorers
from tests.harness.test_checks_before_writing import DATA, _setup, _snapshot

ROOT = Path(__file__).resolve().parents[3]
PRESETS = ROOT / "experiments" / "presets"
PAPER_PRESETS = ["mimic-qwen2.5vl-7b", "mimic-qwen2.5vl-3b", "iuxray-qwen2.5vl-7b", "iuxray-qwen2.5vl-3b"]
EVAL = ["eval", "--model", "{tmp}/model", "--split", "test", "--out", "{out}", *DATA[:2], *DATA[3:]]
TINY_EVAL = ["model.image_size=56", "generation.max_new_tokens=4"]


def user_reward(candidates, references, **context):
    """A `package.module:function` reward that declares the scorers it loads, as rewards/chexbert.py does."""
    return np.zeros(len(candidates))


user_reward.scorers = ("chexbert", "radgraph")


# ------------------------------------------------------------------------------------------------- what
def test_reward_scorers_resolve_names_and_the_parts_of_weighted_sums():
    assert reward_scorers("bleu4") == ()
    assert reward_scorers("chexbert_f1") == ("chexbert",)
    assert reward_scorers("radgraph_f1") == ("radgraph-xl",)
    assert reward_scorers({"bleu4": 0.5, "chexbert_f1": 0.5}) == ("chexbert",)
    assert reward_scorers({"chexbert_f1": 0.0, "bleu4": 1.0}) == ()  # a part of weight 0 is never computed
    assert reward_scorers({"radgraph_f1": 1, "chexbert_f1": 1, "mccs": 1}) == ("radgraph-xl", "chexbert")
    assert reward_scorers("mrg_r1") == ()  # a registered composite: its parts (mccs, format)
    assert reward_scorers(f"{__name__}:user_reward") == ("chexbert", "radgraph")
    assert reward_scorers({f"{__name__}:user_reward": 1, "chexbert_f1": 1}) == ("chexbert", "radgraph")
    with pytest.raises(ValueError, match="nope"):
        reward_scorers({"nope": 1})


def _needs(preset: str, stage: str) -> set[tuple]:
    cfg = load_config(PRESETS / f"{preset}.yaml", [], stage=stage)
    return {(n.kind, n.target, n.key, n.required) for n in stage_needs(cfg, stage)}


@pytest.mark.parametrize("preset", PAPER_PRESETS)
def test_each_paper_preset_stage_lists_what_it_needs(preset):
    base = {"7b": "Qwen/Qwen2.5-VL-7B-Instruct", "3b": "Qwen/Qwen2.5-VL-3B-Instruct"}[preset[-2:]]
    model = ("base_model", base, "model.path", True)
    # stages 1-2 hand on their best-validation epoch, scored with Eq. 10's RG term as in RL (issue 42)
    rg = ("radgraph", "radgraph-xl", "rl.val_rg_metric", True)
    assert _needs(preset, "warmup") == {model, rg}
    # MIMIC-CXR: Medical-MAE's ViT-B/16, a local file (issue 42); IU-Xray starts from MIMIC-CXR's (study upstream)
    medical_mae = {("classifier_weights", "weights/vit-b_CXR_0.5M_mae_CheXpert.pth", "classifier.pretrained_path",
                    True)}
    assert _needs(preset, "classifier") == (medical_mae if preset.startswith("mimic") else set())
    assert _needs(preset, "sft") == {model, rg, ("classifier_dir", None, "classifier.dir", True)}
    # Eq. 10's RG term with RadGraph F1 (radgraph-xl, partial); the reward is BLEU-4, which loads nothing.
    assert _needs(preset, "rl") == {model, ("radgraph", "radgraph-xl", "rl.val_rg_metric", True)}
    # CE with CheXbert; RadGraph F1 with `auto`: reported when present, so listed but not required.
    assert _needs(preset, "eval") == {("chexbert", None, "eval.ce_backend", True),
                                      ("radgraph", "radgraph-xl", "eval.radgraph", False)}


@pytest.mark.parametrize("stage", ["warmup", "classifier", "sft", "rl", "eval"])
def test_the_tiny_preset_requires_nothing_but_sfts_classifier(stage):
    want = {"sft": {("classifier_dir", None, "classifier.dir", True)},  # an experiment's classifier run writes it
            "eval": {("radgraph", "radgraph-xl", "eval.radgraph", False)}}  # auto: optional
    assert _needs("tiny", stage) == want.get(stage, set())


def test_needs_follow_the_config():
    def kinds(stage, *overrides):
        return [(n.kind, n.target, n.key) for n in stage_needs(load_config(None, list(overrides)), stage)]

    assert kinds("rl", "rl.reward={bleu4: 0.5, chexbert_f1: 0.5}") == [("chexbert", None, "rl.reward")]
    assert kinds("rl", "rl.reward=radgraph_f1", "rl.val_rg_metric=radgraph") == [
        ("radgraph", "radgraph-xl", "rl.reward"), ("radgraph", "radgraph-xl", "rl.val_rg_metric")]
    assert kinds("eval", "eval.radgraph=required", "eval.radgraph_model=radgraph") == [
        ("radgraph", "radgraph", "eval.radgraph")]
    assert kinds("eval", "eval.radgraph='off'") == []  # (unquoted, YAML reads off as false)
    assert kinds("rl", "generation.backend=vllm") == [("vllm", "auto", "generation.backend")]
    assert kinds("warmup", "generation.backend=vllm") == []  # warm-up decodes nothing
    assert kinds("warmup", "model.preset=qwen2.5-vl-3b", "model.path=/data/q3") == [
        ("base_model", "/data/q3", "model.path")]
    assert kinds("rl", "model.preset=qwen2.5-vl-3b", "init_from=/r/sft/model") == []  # its spec names the base
    assert kinds("classifier", "classifier.pretrained_path=/w/mae.safetensors") == [
        ("classifier_weights", "/w/mae.safetensors", "classifier.pretrained_path")]


# ------------------------------------------------------------------------------------------------- refused
@pytest.fixture
def no_scorers(tmp_path, monkeypatch):
    """The packages' cache folders and the Hugging Face cache pointed at empty folders of the test."""
    import huggingface_hub.constants
    from f1chexbert import f1chexbert
    from radgraph import radgraph

    cache = tmp_path / "home" / ".cache"
    monkeypatch.setattr(f1chexbert, "CACHE_DIR", str(cache / "chexbert"))
    monkeypatch.setattr(radgraph, "CACHE_DIR", str(cache / "radgraph" / "0.1.18"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache / "huggingface" / "hub"))
    (tmp_path / "home").mkdir()
    return cache


@pytest.fixture
def nothing_runs(monkeypatch):
    """Stage 0, the model loaders and the decoder fail the test if called: refused means none of them ran."""
    import harness.cli.stage_commands
    import harness.stages.evaluate
    import harness.stages.loading
    import harness.stages.pretrain

    def ran(what):
        def fail(*args, **kwargs):
            raise AssertionError(f"{what} ran before the scorers were checked")
        return fail

    monkeypatch.setattr(harness.stages.pretrain, "build_base", ran("stage 0"))
    monkeypatch.setattr(harness.stages.loading, "load_for_stage", ran("the model load"))
    monkeypatch.setattr(harness.stages.evaluate, "load_any_model", ran("the model load"))
    monkeypatch.setattr(harness.stages.evaluate, "generate_reports", ran("the decode"))


CHEXBERT_FILE = "{home}/.cache/chexbert/chexbert.pth"
RADGRAPH_DIR = "{home}/.cache/radgraph/0.1.18/radgraph-xl"
# (case id, argv, substrings of the one-line message)
CASES = [
    ("eval_chexbert", [*EVAL, "eval.ce_backend=chexbert"],
     ["'eval.ce_backend' = 'chexbert' needs CheXbert", CHEXBERT_FILE, "StanfordAIMI/RRG_scorers"]),
    ("eval_radgraph_required", [*EVAL, "eval.radgraph=required"],
     ["'eval.radgraph' = 'required' needs RadGraph radgraph-xl", RADGRAPH_DIR, "radgraph-xl.tar.gz"]),
    ("eval_radgraph_model", [*EVAL, "eval.radgraph=required", "eval.radgraph_model=radgraph"],
     ["RadGraph radgraph", "{home}/.cache/radgraph/0.1.18/radgraph", "radgraph.tar.gz"]),
    ("rl_chexbert_reward", ["train", "rl", *DATA, "rl.reward=chexbert_f1"],
     ["'rl.reward' = 'chexbert_f1' needs CheXbert", CHEXBERT_FILE]),
    ("rl_weighted_chexbert_reward", ["train", "rl", *DATA, "rl.reward={{bleu4: 0.5, chexbert_f1: 0.5}}"],
     ["'rl.reward'", "needs CheXbert", CHEXBERT_FILE]),
    ("rl_radgraph_reward", ["train", "rl", *DATA, "rl.reward=radgraph_f1"],
     ["'rl.reward' = 'radgraph_f1' needs RadGraph radgraph-xl", RADGRAPH_DIR]),
    ("rl_radgraph_validation", ["train", "rl", *DATA, "rl.val_rg_metric=radgraph"],
     ["'rl.val_rg_metric' = 'radgraph' needs RadGraph radgraph-xl", RADGRAPH_DIR, "radgraph-xl.tar.gz"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_command_that_needs_absent_scorer_weights_is_refused_before_anything_runs(
        case, tmp_path, capsys, monkeypatch, no_scorers, nothing_runs):
    _, argv, expected = case
    monkeypatch.chdir(tmp_path)
    names = {**_setup(tmp_path, ""), "home": str(tmp_path / "home")}
    (tmp_path / "model").mkdir()  # `eval --model`: a folder (its contents are never read: refused before)
    before = _snapshot(tmp_path)
    assert main([a.format(**names) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "ran before" not in err, err
    for text in expected:
        assert text.format(**names) in err, f"{text!r} not in: {err}"
    assert not (tmp_path / "out").exists()
    assert _snapshot(tmp_path) == before


@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_backend_without_vllm_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch, nothing_runs):
    monkeypatch.chdir(tmp_path)
    names = _setup(tmp_path, "")
    before = _snapshot(tmp_path)
    assert main([a.format(**names) for a in ["train", "rl", *DATA, "generation.backend=vllm"]]) == 2
    err = capsys.readouterr().err.strip()
    assert "'generation.backend' = 'vllm' needs the vllm package, which is not installed here" in err, err
    assert _snapshot(tmp_path) == before


def test_radgraph_auto_is_never_refused(no_scorers):
    cfg = load_config(None, ["eval.radgraph=auto", "eval.ce_backend=rules"])
    (need,) = stage_needs(cfg, "eval")
    assert not need.required and "radgraph-xl" in problem(need)  # listed (doctor), absent here ...
    check_needs(cfg, "eval")  # ... and not refused: RadGraph F1 is then marked missing in the scores
    with pytest.raises(ConfigError, match="'eval.radgraph' = 'required' needs RadGraph radgraph-xl"):
        check_needs(load_config(None, ["eval.radgraph=required"]), "eval")


def test_experiment_run_refuses_a_study_whose_test_evaluation_needs_chexbert_before_any_stage_runs(
        tmp_path, no_scorers, calls):
    from harness.experiments import load_study, run_experiment
    from tests.harness.test_experiments import FAKES, write_study

    path = write_study(tmp_path, "  - name: a\n    overrides: {eval: [eval.ce_backend=chexbert]}\n", seeds="[0]")
    with pytest.raises(ConfigError) as info:
        run_experiment(load_study(path), tmp_path / "out", workers=1, functions=FAKES, log=lambda s: None)
    message = str(info.value)
    assert "the eval run of arm 'a', seed 0" in message and "'eval.ce_backend' = 'chexbert' needs CheXbert" in message
    assert str(no_scorers / "chexbert" / "chexbert.pth") in message
    assert calls() == [] and not (tmp_path / "out").exists()  # no stage ran, nothing written


# ------------------------------------------------------------------------------------------------- in a fresh process
def test_eval_with_chexbert_and_an_empty_home_fails_in_one_line_before_decoding(tmp_path, tiny_model, tiny_processor):
    """`regbench eval` as a user without the weights runs it: HOME an empty folder, a real (tiny) model that
    would decode. Exit 2, one line naming the file f1chexbert reads, no decode (its progress bar would print
    to stderr), the --out folder never created."""
    model = tmp_path / "model"
    tiny_model.save_pretrained(model)
    tiny_processor.save_pretrained(model)
    names = _setup(tmp_path, "")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "HF_", "HUGGINGFACE_"))}
    env.update(HOME=str(home), HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    before = _snapshot(tmp_path)
    argv = [a.format(**names) for a in [*EVAL, *TINY_EVAL, "eval.ce_backend=chexbert"]]
    done = subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    err = done.stderr.strip().splitlines()
    err = [line for line in err if "real_accelerator.py" not in line]  # DeepSpeed's import-time notice
    assert done.returncode == 2, done.stderr
    assert len(err) == 1, done.stderr
    assert str(home / ".cache" / "chexbert" / "chexbert.pth") in err[0] and "'eval.ce_backend'" in err[0], err
    assert "decode" not in done.stderr
    assert not (tmp_path / "out").exists() and _snapshot(tmp_path) == before


# ------------------------------------------------------------------------------------------------- files of the others
def test_base_model_and_classifier_needs_are_checked_by_their_files(tmp_path):
    from harness.checks.needs import Need
    from tests.harness.test_checks_before_writing import _classifier

    def base(path):
        return problem(Need("base_model", str(path), "model.path", str(path)))

    assert "folder not found" in base(tmp_path / "qwen") and "huggingface-cli download" in base(tmp_path / "qwen")
    assert "huggingface-cli download nobody-here/no-such-model" in base("nobody-here/no-such-model")
    (tmp_path / "qwen").mkdir()
    (tmp_path / "qwen" / "config.json").write_text("{}")
    assert "no weights" in base(tmp_path / "qwen")
    (tmp_path / "qwen" / "model-00001-of-00002.safetensors").write_bytes(b"x")
    assert base(tmp_path / "qwen") is None

    def weights(path):
        return problem(Need("classifier_weights", str(path), "classifier.pretrained_path", str(path)))

    assert "file not found" in weights(tmp_path / "mae.safetensors")
    (tmp_path / "mae.safetensors").write_bytes(b"")
    assert "is empty" in weights(tmp_path / "mae.safetensors")
    (tmp_path / "mae.safetensors").write_bytes(b"x")
    assert weights(tmp_path / "mae.safetensors") is None

    def folder(path):
        return problem(Need("classifier_dir", str(path), "classifier.dir", str(path)))

    assert "folder not found" in folder(tmp_path / "clf")
    assert folder(_classifier(tmp_path / "clf")) is None
    assert "classifier.json" in folder(_classifier(tmp_path / "bad", "corrupt"))


def test_experiment_run_refuses_a_missing_base_model_of_a_real_preset_before_any_stage_runs(tmp_path, calls):
    from harness.experiments import load_study, run_experiment
    from tests.harness.test_experiments import FAKES, write_study

    path = write_study(tmp_path, "  - name: a\n", seeds="[0]")
    study = load_study(path, preset=PRESETS / "mimic-qwen2.5vl-3b.yaml",
                       sets=[f"common.model.path={tmp_path / 'qwen3b'}", "common.eval.ce_backend=rules"])
    with pytest.raises(ConfigError, match=r"the warmup run of arm 'a', seed 0: .*qwen3b: folder not found"):
        run_experiment(study, tmp_path / "out", workers=1, functions=FAKES, log=lambda s: None)
    assert calls() == [] and not (tmp_path / "out").exists()
