"""harness/training/schedule.py's learning-rate schedules (issue 42): the project's default curve unchanged; with
train.warmup_type linear / log the official REVA-PO schedules, equal to DeepSpeed's own scheduler classes
(deepspeed.runtime.lr_schedules) as the DeepSpeed engine drives them; with "transformers" equal to transformers'
schedules. Where the warm-ups stand against each other (issue 46)."""

from __future__ import annotations

import itertools
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import (
    get_constant_schedule_with_warmup,
    get_cosine_schedule_with_warmup,
    get_cosine_with_min_lr_schedule_with_warmup,
)

from harness.config import ConfigError, PretrainConfig, TrainConfig, load_config, to_dict
from harness.training.schedule import lr_factor, make_scheduler

PRESETS = Path(__file__).resolve().parents[3] / "experiments" / "presets"
PAPER_PRESETS = ("mimic-qwen2.5vl-7b", "mimic-qwen2.5vl-3b", "iuxray-qwen2.5vl-7b", "iuxray-qwen2.5vl-3b")


def _lrs(build, lr: float, n: int) -> list[float]:
    """The lr of optimizer updates 0..n-1 as a training loop sees them: read it, update, step the scheduler. This is
    also how DeepSpeed's engine drives the scheduler of its config (engine.py `_take_model_step`: optimizer.step(),
    then lr_scheduler.step(); the scheduler was built at index -1), which the official code uses in every stage."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched = build(opt)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: lr_scheduler.step() before optimizer.step() (no update is needed)
        for _ in range(n):
            out.append(float(opt.param_groups[0]["lr"]))
            sched.step()
    return out


def _ours(cfg: TrainConfig, total: int, n: int | None = None) -> list[float]:
    return _lrs(lambda opt: make_scheduler(opt, cfg, total), cfg.lr, total if n is None else n)


def _deepspeed(cls_name: str, params: dict, lr: float, n: int) -> list[float]:
    from deepspeed.runtime import lr_schedules

    return _lrs(lambda opt: getattr(lr_schedules, cls_name)(opt, **params), lr, n)


# --- the default: what every run computed before issue 42 ----------------------------------------------------------

def _factor_before_issue_42(step: int, scheduler: str, warmup_steps: int, total_steps: int) -> float:
    """make_scheduler's factor before issue 42, verbatim."""
    warm = max(0, warmup_steps)
    if warm and step < warm:
        return (step + 1) / warm
    if scheduler == "cosine":
        span = max(1, total_steps - warm)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warm) / span)))
    return 1.0


def test_the_default_schedules_are_unchanged():
    """Every schedule a run could choose before the new fields, at their defaults: the same factor to the last bit,
    so the tiny presets, stage 0 and the demo compute what they computed."""
    for scheduler, warm, total in itertools.product(("cosine", "constant", "warmup_constant"), (0, 1, 2, 5, 20),
                                                    (1, 7, 40, 241)):
        cfg = TrainConfig(scheduler=scheduler, warmup_steps=warm, lr=3e-3)
        for k in range(total + 3):
            assert lr_factor(k, cfg, total) == _factor_before_issue_42(k, scheduler, warm, total), (scheduler, k)
        assert _ours(cfg, total) == [cfg.lr * _factor_before_issue_42(k, scheduler, warm, total)
                                     for k in range(total)]


def test_the_default_factors_are_pinned():
    cosine = TrainConfig(scheduler="cosine", warmup_steps=3)
    assert [lr_factor(k, cosine, 8) for k in range(9)] == [
        0.3333333333333333, 0.6666666666666666, 1.0, 1.0, 0.9045084971874737, 0.6545084971874737,
        0.34549150281252633, 0.09549150281252633, 0.0]
    constant = TrainConfig(scheduler="constant", warmup_steps=4)
    assert [lr_factor(k, constant, 8) for k in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    stage0 = PretrainConfig().train_config()  # stage 0: 20 warm-up steps, cosine
    assert [lr_factor(k, stage0, 500) for k in (0, 1, 19, 20, 21, 250, 499)] == [
        0.05, 0.1, 1.0, 1.0, 0.9999892908320647, 0.5327015646150716, 1.0709167935385455e-05]


@pytest.mark.parametrize("preset", ["tiny", "tiny-bench", "tiny-power", "tiny-power-fast", "tiny-power-rl-fast"])
def test_the_tiny_presets_keep_the_default_schedule(preset):
    for stage in ("warmup", "sft", "rl"):
        t = load_config(PRESETS / f"{preset}.yaml", stage=stage).train
        assert (t.warmup_type, t.warmup_min_ratio, t.cos_min_ratio, t.cosine_total_steps) == ("project", 0, 0, None)
        assert t.scheduler in ("cosine", "constant", "warmup_constant")


def test_new_fields_at_their_defaults_keep_every_stage_key(monkeypatch):
    """resolve._KEYED_WHEN_SET: at their defaults the four fields are left out of a stage run's key (earlier runs are
    reused); set otherwise they are in it."""
    from harness.experiments import resolve

    def key_without(cfg, field):
        section, name = field.split(".")

        def drop(c):
            d = to_dict(c)
            d[section].pop(name)
            return d

        with monkeypatch.context() as m:
            m.setattr(resolve, "to_dict", drop)
            return resolve.config_key("sft", cfg, {"warmup": "abc"})

    for field, other in (("train.warmup_type", "linear"), ("train.warmup_min_ratio", 0.1),
                         ("train.cos_min_ratio", 0.5), ("train.cosine_total_steps", 100)):
        cfg = load_config(None)
        assert key_without(cfg, field) == resolve.config_key("sft", cfg, {"warmup": "abc"}), field
        changed = load_config(None, ["train.scheduler=warmup_cosine", "train.warmup_steps=5", f"{field}={other}"])
        assert key_without(changed, field) != resolve.config_key("sft", changed, {"warmup": "abc"}), field


# --- the official schedules: DeepSpeed's classes ---------------------------------------------------------------------

# The scheduler sections of the official DeepSpeed configs (LiGuo12/REVA_PO train_configs/stage{1,2,3}/zero_*.json)
# and their optimizer lr.
OFFICIAL = {
    ("mimic", "warmup"): ("WarmupCosineLR", {"warmup_min_ratio": 0, "warmup_num_steps": 2800, "total_num_steps": 84622,
                                             "warmup_type": "linear", "cos_min_ratio": 0.001}, 1e-3),
    ("iuxray", "warmup"): ("WarmupCosineLR", {"warmup_min_ratio": 0, "warmup_num_steps": 13, "total_num_steps": 192,
                                              "warmup_type": "linear", "cos_min_ratio": 1.0}, 1e-3),
    ("mimic", "sft"): ("WarmupLR", {"warmup_min_lr": 0, "warmup_max_lr": 1e-4, "warmup_num_steps": 484,
                                    "warmup_type": "linear"}, 1e-4),
    ("iuxray", "sft"): ("WarmupLR", {"warmup_min_lr": 0, "warmup_max_lr": 1e-4, "warmup_num_steps": 15,
                                     "warmup_type": "linear"}, 1e-4),
    ("mimic", "rl"): ("WarmupLR", {"warmup_min_lr": 0, "warmup_max_lr": 3e-6, "warmup_num_steps": 250,
                                   "warmup_type": "linear"}, 3e-6),
    ("iuxray", "rl"): ("WarmupLR", {"warmup_min_lr": 0, "warmup_max_lr": 3e-6, "warmup_num_steps": 77,
                                    "warmup_type": "linear"}, 3e-6),
}
# Training studies of the R2Gen splits the official code reads (MIMIC-CXR 270,790; IU-Xray 2,069).
TRAIN_STUDIES = {"mimic": 270_790, "iuxray": 2_069}


def _stage_steps(cfg, dataset: str, stage: str) -> int:
    """regbench's optimizer steps of the stage on the full training set (harness/stages/lm_train.py,
    harness/grpo/trainer.py: the last partial batch kept)."""
    n = TRAIN_STUDIES[dataset] if cfg.data.max_train is None else min(cfg.data.max_train, TRAIN_STUDIES[dataset])
    per_step = cfg.rl.prompts_per_step if stage == "rl" else cfg.train.batch_size
    return math.ceil(cfg.train.epochs * math.ceil(n / per_step))


@pytest.mark.parametrize("stage", ["warmup", "sft", "rl"])
@pytest.mark.parametrize("preset", PAPER_PRESETS)
def test_the_paper_presets_schedules_are_the_official_deepspeed_ones(preset, stage):
    """Each paper preset's stage 1, 2 and 3 learning rate at every optimizer step of the stage on the full training
    set equals DeepSpeed's scheduler built from the official config, driven as DeepSpeed's engine drives it. (MIMIC
    stage 1: regbench takes 84,630 steps, the official loader 84,620 (drop_last on 4 GPUs) with a horizon of 84,622:
    the curve is the same at every step; regbench's last ones stay at the floor.)"""
    dataset = preset.split("-")[0]
    cls_name, params, lr = OFFICIAL[(dataset, stage)]
    cfg = load_config(PRESETS / f"{preset}.yaml", ["data.annotation=ann.json"], stage=stage)
    assert cfg.train.lr == lr
    n = _stage_steps(cfg, dataset, stage)
    ours, theirs = _ours(cfg.train, n), _deepspeed(cls_name, params, lr, n)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=0)
    warm = params["warmup_num_steps"]
    # The official warm-up: two updates at 0, then (k-1)/W; the peak (or the cosine) from update W+1.
    assert ours[:3] == [0.0, 0.0, pytest.approx(lr / warm, rel=1e-15)]
    assert ours[warm] == pytest.approx(lr * (warm - 1) / warm, rel=1e-15)
    assert ours[warm + 1] == pytest.approx(lr, rel=1e-6)
    if dataset == "mimic" and stage == "warmup":
        assert ours[-1] == pytest.approx(1e-3 * 0.001, rel=1e-12)  # the floor, 0.001 x lr
    else:
        assert ours[-1] == lr  # flat after the warm-up (IU stage 1: cos_min_ratio 1.0)


@pytest.mark.parametrize("warmup_type", ["linear", "log"])
@pytest.mark.parametrize("scheduler", ["warmup_cosine", "cosine", "warmup_constant", "constant"])
def test_deepspeed_warmups_equal_deepspeed_on_every_setting(scheduler, warmup_type):
    """WarmupCosineLR (cosine schedules) and WarmupLR (constant ones) over warm-up lengths (1: DeepSpeed's floor of
    2), start ratios, floors and horizons (shorter than the run: the rate stays at the floor), every step and past
    the horizon."""
    lr = 2e-4
    floors = (0.0, 0.3, 1.0) if scheduler == "warmup_cosine" else (0.0,)
    for warm, wmr, cmr, total, horizon in itertools.product((1, 2, 7), (0.0, 0.25), floors, (5, 30),
                                                            (None, 4, 20)):
        if horizon is not None and scheduler not in ("cosine", "warmup_cosine"):
            continue
        cfg = TrainConfig(scheduler=scheduler, warmup_steps=warm, warmup_type=warmup_type, lr=lr,
                          warmup_min_ratio=wmr, cos_min_ratio=cmr, cosine_total_steps=horizon)
        n = total + 6
        if scheduler in ("cosine", "warmup_cosine"):
            theirs = _deepspeed("WarmupCosineLR", {"total_num_steps": total if horizon is None else horizon,
                                                   "warmup_min_ratio": wmr, "warmup_num_steps": warm,
                                                   "cos_min_ratio": cmr, "warmup_type": warmup_type}, lr, n)
        else:
            theirs = _deepspeed("WarmupLR", {"warmup_min_lr": wmr * lr, "warmup_max_lr": lr, "warmup_num_steps": warm,
                                             "warmup_type": warmup_type}, lr, n)
        np.testing.assert_allclose(_ours(cfg, total, n), theirs, rtol=1e-12, atol=1e-20,
                                   err_msg=str((warm, wmr, cmr, total, horizon)))


# The engine itself: DeepSpeed ZeRO-1 on its CPU accelerator, one process, the scheduler from the config as the official
# runner gives it (reva_po/runners/runner_base.py: deepspeed.initialize, then model.step() per update).
ENGINE_CASES = [
    ({"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-4, "warmup_num_steps": 5,
                                     "warmup_type": "linear"}},
     {"scheduler": "warmup_constant", "warmup_steps": 5, "warmup_type": "linear"}),
    ({"type": "WarmupCosineLR", "params": {"warmup_min_ratio": 0, "warmup_num_steps": 3, "total_num_steps": 8,
                                           "warmup_type": "linear", "cos_min_ratio": 0.001}},
     {"scheduler": "warmup_cosine", "warmup_steps": 3, "warmup_type": "linear", "cos_min_ratio": 0.001,
      "cosine_total_steps": 8}),
    ({"type": "WarmupCosineLR", "params": {"warmup_min_ratio": 0.1, "warmup_num_steps": 4, "total_num_steps": 9,
                                           "warmup_type": "log", "cos_min_ratio": 0.0}},
     {"scheduler": "warmup_cosine", "warmup_steps": 4, "warmup_type": "log", "warmup_min_ratio": 0.1,
      "cosine_total_steps": 9}),
]
ENGINE_STEPS = 12


def _engine_worker(rank: int, world: int, port: int, out: str) -> None:
    import json
    import os
    import traceback

    try:
        from tests.harness.parallel.test_distributed import _env

        _env(rank, world, port)
        os.environ["DS_ACCELERATOR"] = "cpu"  # read when deepspeed is first imported
        import deepspeed

        rows = []
        for section, _ in ENGINE_CASES:
            torch.manual_seed(0)
            model = torch.nn.Linear(4, 1)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-3)  # no JIT-built FusedAdam
            config = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1},
                      "zero_allow_untested_optimizer": True, "gradient_clipping": 1.0, "scheduler": section}
            engine, opt, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
            lrs = []
            for _ in range(ENGINE_STEPS):
                lrs.append(float(opt.param_groups[0]["lr"]))
                engine.backward(engine(torch.randn(2, 4)).pow(2).mean())
                engine.step()
            rows.append(lrs)
        Path(out, "lrs.json").write_text(json.dumps(rows))
    except BaseException:
        Path(out, "error.txt").write_text(traceback.format_exc())
        raise


@pytest.mark.slow
def test_the_deepspeed_engine_steps_its_scheduler_as_modelled(tmp_path):
    """A real DeepSpeed engine (ZeRO-1, CPU accelerator) with the schedulers of the official configs' kind: the lr
    of each of its updates equals make_scheduler's (updates 0 and 1 at 0 with a linear warm-up from 0)."""
    import json

    from harness.parallel.zero import unavailable
    from tests.harness.parallel.test_distributed import _launch

    if unavailable() is not None:
        pytest.skip(str(unavailable()))
    _launch(_engine_worker, 1, str(tmp_path))
    engine_lrs = json.loads((tmp_path / "lrs.json").read_text())
    for (_, fields), got in zip(ENGINE_CASES, engine_lrs, strict=True):
        cfg = TrainConfig(lr=1e-4, **fields)
        np.testing.assert_allclose(_ours(cfg, ENGINE_STEPS), got, rtol=1e-12, atol=0, err_msg=str(fields))
    assert engine_lrs[0][:3] == [0.0, 0.0, 2e-05] and engine_lrs[0][6] == 1e-4


def test_a_resumed_run_takes_the_official_rates_of_an_uninterrupted_one(tiny_tokenizer, tiny_processor, xray_images,
                                                                       tmp_path):
    """The warm-up loop with the official stage-1 kind of schedule, killed after its step-2 checkpoint and resumed:
    every step logs the rate of the uninterrupted run, DeepSpeed's (0, 0, 1/W, ...), and ends at its weights."""
    from harness.runs.records import RunDir
    from harness.stages.lm_train import train_lm
    from tests.harness.stages.test_lm_train import _data, _model
    from tests.killed_runs import KilledAt

    data = _data(xray_images)
    cfg = TrainConfig(epochs=3, batch_size=2, lr=1e-2, scheduler="warmup_cosine", warmup_steps=2,
                      warmup_type="linear", cos_min_ratio=0.1, cosine_total_steps=5, max_steps=6, checkpoint_every=2)
    full = _model(tiny_tokenizer)
    train_lm(full, tiny_processor, data, None, cfg, RunDir(tmp_path / "full"), seed=3, max_report_tokens=10,
             progress=False)
    try:  # killed after the step-2 checkpoint, during step 3
        train_lm(_model(tiny_tokenizer), tiny_processor, data, None, cfg, KilledAt(tmp_path / "part", 3), seed=3,
                 max_report_tokens=10, progress=False)
    except KeyboardInterrupt:
        pass
    resumed, run = _model(tiny_tokenizer), RunDir(tmp_path / "part")
    train_lm(resumed, tiny_processor, data, None, cfg, run, seed=3, max_report_tokens=10, progress=False)
    expected = _deepspeed("WarmupCosineLR", {"total_num_steps": 5, "warmup_min_ratio": 0, "warmup_num_steps": 2,
                                             "cos_min_ratio": 0.1, "warmup_type": "linear"}, 1e-2, 6)
    assert [r["lr"] for r in RunDir(tmp_path / "full").steps()] == pytest.approx(expected, rel=1e-12)
    assert [r["lr"] for r in run.steps()] == pytest.approx(expected, rel=1e-12)
    a, b = dict(full.named_parameters()), dict(resumed.named_parameters())
    assert all(torch.allclose(a[n], b[n], atol=1e-6) for n in a)


# --- transformers' schedules -------------------------------------------------------------------------------------

@pytest.mark.parametrize("warm", [0, 1, 5, 20])
def test_the_transformers_warmup_equals_transformers(warm):
    """warmup_type=transformers: get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup and
    get_cosine_with_min_lr_schedule_with_warmup, at every step of the run."""
    lr, total = 1e-3, 60
    cases = [
        (TrainConfig(scheduler="warmup_constant", warmup_steps=warm, warmup_type="transformers", lr=lr),
         lambda opt: get_constant_schedule_with_warmup(opt, warm)),
        (TrainConfig(scheduler="cosine", warmup_steps=warm, warmup_type="transformers", lr=lr),
         lambda opt: get_cosine_schedule_with_warmup(opt, warm, total)),
        (TrainConfig(scheduler="warmup_cosine", warmup_steps=warm, warmup_type="transformers", lr=lr,
                     cos_min_ratio=0.1),
         lambda opt: get_cosine_with_min_lr_schedule_with_warmup(opt, warm, total, min_lr_rate=0.1)),
    ]
    for cfg, build in cases:
        np.testing.assert_allclose(_ours(cfg, total), _lrs(build, lr, total), rtol=1e-14, atol=0,
                                   err_msg=cfg.scheduler)


def test_where_the_warmups_stand_against_transformers():
    """Issue 46: this project's ramp ((k+1)/W) runs one update ahead of transformers' (k/W); the official DeepSpeed
    one ((k-1)/W from update 1, 0 at update 0) one update behind it. After the warm-up the cosine is the same curve
    in all three (from update W on; DeepSpeed's from W+1, its update W still ramps)."""
    warm, total = 10, 60
    hf = _lrs(lambda opt: get_constant_schedule_with_warmup(opt, warm), 1.0, total + 1)
    project = _ours(TrainConfig(scheduler="warmup_constant", warmup_steps=warm, lr=1.0), total)
    official = _ours(TrainConfig(scheduler="warmup_constant", warmup_steps=warm, warmup_type="linear", lr=1.0), total)
    assert project == hf[1:total + 1]
    assert official[0] == 0.0 and official[1:] == hf[:total - 1]
    assert (project[0], hf[0], official[:2]) == (0.1, 0.0, [0.0, 0.0])
    hf_cos = _lrs(lambda opt: get_cosine_schedule_with_warmup(opt, warm, total), 1.0, total)
    project_cos = _ours(TrainConfig(scheduler="cosine", warmup_steps=warm, lr=1.0), total)
    official_cos = _ours(TrainConfig(scheduler="cosine", warmup_steps=warm, warmup_type="linear", lr=1.0), total)
    assert project_cos[warm:] == hf_cos[warm:] and project_cos[:warm] == hf[1:warm + 1]
    np.testing.assert_allclose(official_cos[warm + 1:], hf_cos[warm + 1:], rtol=1e-14)
    assert official_cos[warm] == pytest.approx((warm - 1) / warm)


# --- validation ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("overrides", "message"), [
    (["train.scheduler=linear"], "'train.scheduler' = 'linear' must be cosine, constant, warmup_constant, "
                                 "warmup_cosine"),
    (["train.warmup_type=cosine"], "'train.warmup_type' = 'cosine' must be project, transformers, linear, log"),
    (["train.warmup_type=linear"], "'train.warmup_steps' = 0 must be >= 1 with train.warmup_type=linear"),
    (["train.scheduler=warmup_cosine", "train.cos_min_ratio=1.5"], "'train.cos_min_ratio' = 1.5 must be in [0, 1]"),
    (["train.cos_min_ratio=0.1"], "'train.cos_min_ratio' = 0.1 is used only by train.scheduler=warmup_cosine"),
    (["train.warmup_steps=3", "train.warmup_min_ratio=-0.5"], "'train.warmup_min_ratio' = -0.5 must be in [0, 1]"),
    (["train.warmup_min_ratio=0.1"], "'train.warmup_min_ratio' = 0.1 needs train.warmup_steps >= 1"),
    (["train.cosine_total_steps=0"], "'train.cosine_total_steps' = 0 must be >= 1 or null"),
    (["train.scheduler=constant", "train.cosine_total_steps=10"],
     "'train.cosine_total_steps' = 10 is used only by train.scheduler=cosine or warmup_cosine"),
])
def test_bad_schedule_values_are_refused_naming_the_key(overrides, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_make_scheduler_refuses_a_deepspeed_warmup_without_steps():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match="warmup_steps >= 1"):
        make_scheduler(opt, TrainConfig(scheduler="constant", warmup_type="log"), 10)
