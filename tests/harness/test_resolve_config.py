"""resolve_config merges the study's dicts and builds the dataclasses directly (harness.config.build_config): the
same configs as the old path (dicts flattened into `k=v` strings, re-read as YAML by load_config), and the same
errors for bad values."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.config import ConfigError, build_config, expand_dotted, load_config, to_dict
from harness.experiments import Arm, load_study, resolve_config, stage_document

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
STUDIES = sorted(EXPERIMENTS.glob("*.yaml"))


def _yaml_scalar(value) -> str:
    """The old override text of a value (yaml_scalar of harness.experiments before the change)."""
    if isinstance(value, float):
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            text = text.replace("e", ".0e", 1)
        return text
    return json.dumps(value)


def _flatten(data: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in data.items():
        if isinstance(v, dict):
            out.extend(_flatten(v, f"{prefix}{k}."))
        else:
            out.append(f"{prefix}{k}={_yaml_scalar(v)}")
    return out


def old_resolve(study, arm, stage, seed, paths=None):
    """The old resolve_config body: a text round trip through load_config (with the study's `stage_seeds`, which
    came later and replace the seed of the stages they name, on both paths)."""
    seed = study.stage_seeds.get(stage, seed)
    overrides = _flatten(stage_document(study, arm, stage)) + [f"seed={seed}"]
    overrides += [f"{k}={_yaml_scalar(v)}" for k, v in (paths or {}).items()]
    try:
        return load_config(None, overrides)
    except ConfigError as e:
        raise ConfigError(f"{study.path.name}, arm '{arm.name}', stage '{stage}': {e}") from e


@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_shipped_studies_resolve_as_before(path):
    study = load_study(path)
    paths = {"out_dir": "/x/out", "data.synth_dir": "/x/data", "init_from": None}
    seeds = study.seeds[:2]
    for arm in study.arms:
        for stage in [*arm.pipeline, "eval"]:
            for seed in seeds:
                new = resolve_config(study, arm, stage, seed, paths)
                assert to_dict(new) == to_dict(old_resolve(study, arm, stage, seed, paths)), (arm.name, stage)
                assert new.model._preset_owned == old_resolve(study, arm, stage, seed).model._preset_owned


def _old_text(message: str) -> str:
    """The old message without the `override '<flattened item>': ` / `<overrides>: ` part the round trip added."""
    return re.sub(r"(override '.*?'|<overrides>): ", "", message, count=1)


BAD = [{"rl": {"beta_min": 0.5}}, {"rl": {"top_k": "x"}}, {"rl": {"bogus": 1}}, {"train": 3},
       {"rl": {"regularizer": "kl"}}, {"data": {"dataset": "mimic_cxr"}}, {"rl": {"eps_low": 1.5}},
       {"model": {"image_size": 100}}, {"rl": {"reward": "blue4"}}, {"train": {"lr": "abc"}},
       {"rl": {"regularizer": "constant", "regularizer_args": {"nope": 1}}}, {"rl": {"dual_clip": 0.5}},
       {"model": {"lora_r": 0}}, {"rl": {"beta_max": float("inf")}}, {"train": {"batch_size": 16.5}},
       {"data": {"views": True}}, {"generation": {"backend": "tgi"}}, {"classifier": {"adam_beta2": 1}}]


@pytest.mark.parametrize("bad", BAD, ids=[json.dumps(b) for b in BAD])
def test_bad_values_fail_with_the_same_error(bad):
    study = load_study(EXPERIMENTS / "demo_rl_ablation.yaml")
    arm = Arm("a", "a", ["rl"], overrides={"rl": bad})
    with pytest.raises(ConfigError) as old:
        old_resolve(study, arm, "rl", 0)
    with pytest.raises(ConfigError) as new:
        resolve_config(study, arm, "rl", 0)
    assert str(new.value) == _old_text(str(old.value))
    text = str(new.value)
    assert text.startswith("demo_rl_ablation.yaml, arm 'a', stage 'rl': ") and "override" not in text


def test_a_mapping_where_a_value_belongs_is_an_error():
    # The text round trip dropped an empty mapping silently (the field kept its default).
    study = load_study(EXPERIMENTS / "demo_rl_ablation.yaml")
    arm = Arm("a", "a", ["rl"], overrides={"rl": {"prompt": {"instruction": {}}}})
    with pytest.raises(ConfigError, match="'prompt.instruction' must be a string, got {}"):
        resolve_config(study, arm, "rl", 0)


def test_dotted_keys_in_mappings_are_sections():
    # A study may write `common: {data.max_test: 6}` (tests/harness/test_experiments.py's torchrun study does).
    study = load_study(EXPERIMENTS / "demo_rl_ablation.yaml")
    arm = Arm("a", "a", ["rl"], overrides={"rl": {"data.max_test": 6, "rl": {"beta_min": 0.01},
                                                  "rl.beta_max": 0.3, "prompt.instruction": "x"}})
    new = resolve_config(study, arm, "rl", 0)
    assert (new.data.max_test, new.rl.beta_min, new.rl.beta_max, new.prompt.instruction) == (6, 0.01, 0.3, "x")
    assert to_dict(new) == to_dict(old_resolve(study, arm, "rl", 0))
    assert expand_dotted({"a.b": {"c.d": [1]}, "a": {"b": {"e": 2}}, "a.b.c": {"x": 3}}, "x") == {
        "a": {"b": {"c": {"d": [1], "x": 3}, "e": 2}}}
    with pytest.raises(ConfigError, match="here: 'seed' is not a section"):
        expand_dotted({"seed": 1, "seed.x": 2}, "here")


def test_text_outside_the_basic_plane_survives():
    # The text round trip wrote it as a JSON surrogate pair, which YAML read back as two lone surrogates.
    study = load_study(EXPERIMENTS / "demo_rl_ablation.yaml")
    text = "Findings \U0001d6fc \U0001fac1 \u2265 2."
    arm = Arm("a", "a", ["rl"], overrides={"rl": {"prompt": {"instruction": text}}})
    assert resolve_config(study, arm, "rl", 0).prompt.instruction == text


@settings(max_examples=20, deadline=None)
@given(lr=st.floats(1e-9, 1.0), beta=st.floats(0.0, 0.05),
       text=st.text(st.characters(max_codepoint=0xFFFF), max_size=20),  # the old path broke beyond (test above)
       top_k=st.integers(0, 10**9), seed=st.integers(0, 2**62), dual=st.one_of(st.none(), st.floats(1.001, 1e9)),
       reg=st.sampled_from(["none", "constant", "adaptive", "rer"]), dotted=st.booleans())
def test_build_config_equals_the_text_round_trip(lr, beta, text, top_k, seed, dual, reg, dotted):
    data = {"train": {"lr": lr}, "rl": {"beta_min": beta, "top_k": top_k, "dual_clip": dual, "regularizer": reg},
            "prompt": {"instruction": text}}
    if dotted:  # the same values as dotted keys
        data = {"train.lr": lr, "rl": {"beta_min": beta, "top_k": top_k}, "rl.dual_clip": dual,
                "rl.regularizer": reg, "prompt.instruction": text}
    new = build_config(data, {"seed": seed, "data.synth_dir": "/d"})
    old = load_config(None, [*_flatten(data), f"seed={seed}", "data.synth_dir=/d"])
    assert to_dict(new) == to_dict(old)
