"""The RL loop on a tiny Qwen2.5-VL: every regularizer x reference combination, and the loop's invariants."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.config import RLConfig, TrainConfig
from harness.grpo.rollout import response_mask_from
from harness.grpo.trainer import GRPOTrainer, PromptSet
from harness.models.trainable import add_lora, set_trainable
from harness.runs.records import RunDir
from rewards.registry import register_reward


@register_reward("test_length")
def _length_reward(candidates, references, **_):
    # Varies within a group for a random policy, so advantages are non-zero.
    return np.array([len(c.split()) / 10.0 for c in candidates])


def _nlg(_model):
    return {**{k: 0.1 for k in ("BLEU_1", "BLEU_2", "BLEU_3", "BLEU_4", "METEOR", "ROUGE_L")}, "rg": 0.2}


@pytest.fixture
def prompt_set(xray_images):
    refs = ["the heart size is normal .", "mild cardiomegaly . small left pleural effusion ."]
    return PromptSet([f"s{i}" for i in range(4)], [[xray_images[i]] for i in range(4)], ["write"] * 4,
                     [refs[i % 2] for i in range(4)])


def _trainer(model, processor, tmp_path, prompts, scores=None, epochs=1, on_validation=(), **rl_kw):
    torch.manual_seed(0)  # LoRA's A matrices are drawn at random: same start for every trainer of a test
    model = add_lora(model, r=4, alpha=8, dropout=0.1)
    set_trainable(model, "rl")
    rl = RLConfig(**{"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 6, "min_new_tokens": 2,
                     "old_sync_every": 2, "reward": "test_length", "samples_every": 1, **rl_kw})
    tc = TrainConfig(epochs=epochs, lr=5e-3, scheduler="constant", weight_decay=0.0)
    validate = _nlg
    if scores is not None:
        it = iter(scores)

        def validate(_m):
            v = next(it)
            return {**{k: v for k in ("BLEU_1", "BLEU_2", "BLEU_3", "BLEU_4", "METEOR", "ROUGE_L")}, "rg": v}

    return GRPOTrainer(model, processor, rl, tc, RunDir(tmp_path), prompts, prompts, seed=0, validate=validate,
                       progress=False, on_validation=on_validation)


@pytest.mark.parametrize("regularizer", ["none", "constant", "adaptive", "rer"])
@pytest.mark.parametrize("reference", ["static", "ema", "vapr"])
def test_every_combination_runs(regularizer, reference, tiny_model, tiny_processor, tmp_path, prompt_set):
    tr = _trainer(tiny_model, tiny_processor, tmp_path, prompt_set, regularizer=regularizer, reference=reference,
                  reset_every_epochs=1, select="final")
    start = [p.detach().clone() for p in tr.store.parameters()]
    metrics = tr.train()
    assert metrics["steps"] == 2
    # Training happened: the trainable parameters moved (a loop that never stepped would pass everything else).
    assert any(not torch.equal(a, p) for a, p in zip(start, tr.store.parameters(), strict=True))
    steps = tr.run.steps()
    assert [s["step"] for s in steps] == [1, 2]
    for key in ("reward_mean", "reward_std", "frac_reward_zero_std", "kl_loss", "beta_mean",
                "beta_min", "beta_max", "clip_frac", "response_length", "lr", "step_time", "entropy_mean"):
        assert key in steps[0], key
    assert all(np.isfinite(s["loss"]) for s in steps)
    if regularizer == "none":
        # no reference pass: the KL was not measured, so it is absent (not a 0 that plots as "no drift")
        assert steps[0]["beta_max"] == 0 and steps[0]["ref_entropy_mean"] is None and "kl_mean" not in steps[0]
    else:
        assert np.isfinite(steps[1]["kl_mean"])
    if regularizer == "rer":
        assert steps[0]["ref_entropy_mean"] > 0
        assert 0.05 - 1e-7 <= steps[0]["beta_min"] <= steps[0]["beta_max"] <= 0.12 + 1e-7
    evals = tr.run.evals()
    assert [e["step"] for e in evals] == [0, 2]
    assert (tmp_path / "samples.jsonl").is_file()
    assert (tmp_path / "checkpoint" / "rl_state.pt").is_file()


def test_validation_callbacks_see_every_score_and_can_stop_the_run(tiny_model, tiny_processor, tmp_path,
                                                                    prompt_set):
    from harness.errors import RunPruned

    seen = []

    def hook(event):
        seen.append((event.step, event.score, event.metrics["val_score"]))
        if event.step >= 2:
            raise RunPruned("enough", event.step, event.score)

    tr = _trainer(tiny_model, tiny_processor, tmp_path, prompt_set, scores=[0.3, 0.5, 0.4], val_every_steps=1,
                  reset_every_epochs=1, on_validation=[hook])
    tr.total_steps = 3
    with pytest.raises(RunPruned) as stop:
        tr.train()
    assert stop.value.step == 2 and stop.value.reason == "enough"
    assert [s for s, _, _ in seen] == [0, 1, 2] and [round(v, 6) for _, v, _ in seen] == [
        round(e["val_score"], 6) for e in tr.run.evals()]
    assert all(v == m for _, v, m in seen)  # the event carries the logged row


def test_two_trainers_in_one_process_do_not_see_each_others_callbacks(tiny_model, tiny_processor, tmp_path,
                                                                        prompt_set):
    seen = {"a": [], "b": []}
    trainers = {}
    for name, scores in (("a", [0.31, 0.47]), ("b", [0.83, 0.29])):
        trainers[name] = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / name, prompt_set,
                                  scores=scores, val_every_steps=1, reset_every_epochs=1,
                                  on_validation=[lambda e, name=name: seen[name].append((e.step, e.score))])
    for tr in trainers.values():
        tr.total_steps = 1
    trainers["a"].train()
    assert seen["b"] == []  # b exists but has not run: a's validations reach a's callback only
    trainers["b"].train()
    for name, tr in trainers.items():
        assert seen[name] == [(e["step"], e["val_score"]) for e in tr.run.evals()] and len(seen[name]) == 2
    assert seen["a"][0][1] != seen["b"][0][1]


def test_ratio_is_one_when_current_equals_old(tiny_model, tiny_processor, tmp_path, prompt_set):
    tr = _trainer(tiny_model, tiny_processor, tmp_path, prompt_set, regularizer="constant")
    tr.reference.on_start(tr.store)
    row = tr.train_step()  # first step: old == current, and dropout is off in the loop
    assert row["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert row["clip_frac"] == 0.0
    assert row["kl_mean"] == pytest.approx(0.0, abs=1e-7)  # current == reference too


def test_constant_beta_zero_gives_the_loss_of_none(tiny_model, tiny_processor, tmp_path, prompt_set):
    rows = []
    for reg, beta in (("none", 0.1), ("constant", 0.0)):
        torch.manual_seed(0)
        model = type(tiny_model)(tiny_model.config)
        model.load_state_dict(tiny_model.state_dict())
        tr = _trainer(model, tiny_processor, tmp_path / reg, prompt_set, regularizer=reg, beta_base=beta,
                      beta_min=0.0)
        tr.reference.on_start(tr.store)
        tr.train_step()
        rows.append(tr.train_step())  # second step: current != reference
    assert rows[0]["loss"] == pytest.approx(rows[1]["loss"], abs=1e-7)
    assert rows[1]["kl_mean"] > 0


def test_vapr_reset_makes_kl_zero_and_live_equal_best(tiny_model, tiny_processor, tmp_path, prompt_set):
    # Scores: start 0.5 (best), epoch 1 lower -> at the reset (M = 1) everything returns to the start policy.
    tr = _trainer(tiny_model, tiny_processor, tmp_path, prompt_set, regularizer="constant", reference="vapr",
                  reset_every_epochs=1, scores=[0.5, 0.1], best_includes_start=True, epochs=3)
    tr.reference.on_start(tr.store)
    tr.validate(epoch=0, end_of_epoch=True)
    best = {n: p.detach().clone() for n, p in zip(tr.store.param_names(), tr.store.parameters(), strict=True)}
    tr.train_step()
    tr.train_step()
    assert not tr.store.equal_to_live("best")
    event = tr.validate(epoch=1, end_of_epoch=True)
    assert event["reset"] is True
    assert tr.store.equal_to_live("best") and tr.store.equal_to_live("ref") and tr.store.equal_to_live("old")
    assert len(tr.optimizer.state) == 0
    row = tr.train_step()
    assert row["kl_mean"] == pytest.approx(0.0, abs=1e-7) and row["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    # One fresh Adam step from the reset: every element moved by at most lr (|m/sqrt(v)| = 1 on step 1).
    lr = tr.optimizer.param_groups[0]["lr"]
    moved = [(p.detach() - best[n]).abs().max().item()
             for n, p in zip(tr.store.param_names(), tr.store.parameters(), strict=True)]
    assert max(moved) <= lr * (1 + 1e-4)
    assert max(moved) > 0


def test_ema_rate_zero_keeps_the_reference_static(tiny_model, tiny_processor, tmp_path, prompt_set):
    tr = _trainer(tiny_model, tiny_processor, tmp_path, prompt_set, regularizer="constant", reference="ema",
                  ema_rate=0.0)
    tr.reference.on_start(tr.store)
    start = tr.store.state_dict()["snapshots"]["ref"]
    tr.train_step()
    tr.train_step()
    now = tr.store.state_dict()["snapshots"]["ref"]
    assert all(torch.equal(start[k], now[k]) for k in start)
    assert not tr.store.equal_to_live("ref")


def _fresh_copy(tiny_model):
    model = type(tiny_model)(tiny_model.config)
    model.load_state_dict(tiny_model.state_dict())
    return model


def _params(tr):
    return [p.detach().clone() for p in tr.store.parameters()]


def _val_rows(tr):
    drop = {"best_step", "best_epoch", "best_score"}  # identical too, but compared through the scores below
    return [{k: v for k, v in e.items() if k not in drop} for e in tr.run.evals()]


@pytest.mark.parametrize("cut", [1, 3])
def test_resume_equals_an_uninterrupted_run(cut, tiny_model, tiny_processor, tmp_path, prompt_set):
    # Two separate models (add_lora returns the module it is given, so one model object would compare its
    # parameters with themselves). cut = 1: mid-epoch; cut = 3: mid-epoch 2, after a VAPR reset (M = 1).
    scores = [0.1, 0.3, 0.2, 0.4, 0.35, 0.5, 0.45]
    kw = dict(regularizer="rer", reference="vapr", reset_every_epochs=1, epochs=2)
    whole = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / "whole", prompt_set, scores=scores, **kw)
    whole.train()
    first = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / "cut", prompt_set, scores=scores, **kw)
    first.tcfg.max_steps = first.total_steps = cut
    first.train()
    assert first.step == cut
    cut_rows = first.run.evals()
    assert cut_rows[-1]["step"] == cut and cut_rows[-1]["candidate"] is False  # logged, but never "best"
    # resume with the full schedule: the cut validation used one score; skip it in the resumed scorer
    resumed = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / "cut", prompt_set,
                       scores=scores[len(cut_rows) - 1:], **kw)
    resumed.train()
    assert resumed.step == whole.step == 4
    for a, b in zip(_params(whole), _params(resumed), strict=True):
        assert torch.equal(a, b)
    # the cut run's own last validation stays in the log as a non-candidate row; the rest is the same schedule
    scheduled = [(e["step"], e["val_score"]) for e in resumed.run.evals() if e["candidate"] or e["step"] == 0]
    assert scheduled == [(e["step"], e["val_score"]) for e in whole.run.evals()]
    assert resumed.best.state_dict() == whole.best.state_dict()


def test_best_val_selects_the_best_validation_policy_for_every_reference(tiny_model, tiny_processor, tmp_path,
                                                                         prompt_set):
    # Validation scores per epoch end: start 0.9 (not a candidate), epochs 1-3 = 0.3, 0.6, 0.4 -> best = epoch 2.
    selected = {}
    for reference in ("static", "ema", "vapr"):
        tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / reference, prompt_set, regularizer="constant",
                      reference=reference, reset_every_epochs=3, scores=[0.9, 0.3, 0.6, 0.4], epochs=3)
        snapshots = {}
        tr.on_validation = (lambda event, tr=tr, snaps=snapshots: snaps.__setitem__(event.step, _params(tr)),)
        metrics = tr.train()
        assert metrics["select"] == "best_val" and metrics["selected_step"] == 4 and metrics["final_step"] == 6
        assert metrics["selected_score"] == pytest.approx((6 * 0.6 + 0.1 * 0.6) / 7)  # Eq. 10, lambda = 0.1
        assert all(torch.equal(a, b) for a, b in zip(_params(tr), snapshots[4], strict=True))
        assert not all(torch.equal(a, b) for a, b in zip(_params(tr), snapshots[6], strict=True))
        # VAPR: M = 3 = the last epoch, so no reset after the last validation (it would change the final policy)
        assert not any(e.get("reset") for e in tr.run.evals())
        selected[reference] = metrics["selected_step"]
    assert len(set(selected.values())) == 1


def test_select_final_and_best_includes_start(tiny_model, tiny_processor, tmp_path, prompt_set):
    tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / "final", prompt_set, scores=[0.9, 0.3],
                  select="final")
    metrics = tr.train()
    assert (metrics["select"], metrics["selected_step"]) == ("final", 2)
    assert metrics["selected_score"] == pytest.approx(0.3 * 6.1 / 7)
    tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / "start", prompt_set, scores=[0.9, 0.3],
                  best_includes_start=True)
    start = _params(tr)
    metrics = tr.train()
    assert metrics["selected_step"] == 0 and all(torch.equal(a, b) for a, b in zip(start, _params(tr), strict=True))


@pytest.mark.parametrize(("mode", "synced_after"), [("per_epoch", [2, 5]), ("global", [2, 4, 6])])
def test_old_policy_sync_counts_per_epoch_or_globally(mode, synced_after, tiny_model, tiny_processor, tmp_path,
                                                      xray_images):
    six = PromptSet([f"s{i}" for i in range(6)], [[xray_images[i % 4]] for i in range(6)], ["write"] * 6,
                    ["the heart size is normal ."] * 6)  # 3 steps per epoch, N = 2, 2 epochs
    tr = _trainer(tiny_model, tiny_processor, tmp_path, six, old_sync=mode, epochs=2)
    tr.train()
    assert [s["step"] for s in tr.run.steps() if s.get("old_synced")] == synced_after


def test_a_frozen_policy_equal_to_the_current_one_costs_no_forward_pass(tiny_model, tiny_processor, tmp_path,
                                                                        prompt_set, monkeypatch):
    from harness.grpo import passes as passes_module  # the logits function is chosen there (issue 47)

    calls = []
    real = passes_module.response_logits
    monkeypatch.setattr(passes_module, "response_logits", lambda m, ro, *memo: calls.append(1) or real(m, ro, *memo))
    rows = []
    for skip in (True, False):
        tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / str(skip), prompt_set, regularizer="rer")
        tr.reference.on_start(tr.store)
        if not skip:  # force the frozen passes: the snapshots are never "equal to live"
            monkeypatch.setattr(tr.store, "equal_to_live", lambda name: False)
        calls.clear()
        rows.append(tr.train_step())  # old == ref == current
        assert len(calls) == (1 if skip else 3)
    for key in ("loss", "pg_loss", "kl_loss", "ratio_mean", "ref_entropy_mean", "beta_mean"):
        assert rows[0][key] == rows[1][key], key


def test_merged_lora_passes_give_the_peft_step_to_rounding(tiny_model, tiny_processor, tmp_path, prompt_set,
                                                           monkeypatch):
    """rl.lora_pass = merged (harness/models/merged_lora.py): the same rollouts, and log-probs, losses and updated
    parameters equal to peft's passes to float rounding, over steps with an old and a reference pass."""
    from harness.grpo import rollout as rollout_module

    entered = []
    real = rollout_module.merged_lora
    monkeypatch.setattr(rollout_module, "merged_lora", lambda m: entered.append(1) or real(m))
    runs = {}
    for lora_pass in ("peft", "merged"):
        tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / lora_pass, prompt_set,
                      regularizer="rer", lora_pass=lora_pass)
        entered.clear()
        runs[lora_pass] = *three_steps_from_start(tr), len(entered)
    (peft_rows, peft_params, peft_entered), (rows, params, entered_merged) = runs["peft"], runs["merged"]
    # 3 current passes; old and ref passes at step 2, ref alone at step 3 (old synced after step 2)
    assert peft_entered == 0 and entered_merged == 3 + 2 + 1
    assert_steps_match_to_rounding(peft_rows, peft_params, rows, params)


def three_steps_from_start(tr) -> tuple[list[dict], dict]:
    """Three GRPO steps of a fresh trainer (reference and old snapshots taken as a run starts): their step rows
    and the updated trainable parameters."""
    tr.reference.on_start(tr.store)
    tr.store.capture("old")
    rows = [tr.train_step() for _ in range(3)]
    return rows, _params(tr)


def assert_steps_match_to_rounding(base_rows, base_params, rows, params):
    """An inexact pass option's GRPO steps against the exact ones: the same sampled responses, the step's
    losses, ratios, entropies and betas to 1e-4, parameters that moved and match to 1e-5 of their scale."""
    for a, b in zip(base_rows, rows, strict=True):
        for key in ("loss", "pg_loss", "kl_loss", "ratio_mean", "ref_entropy_mean", "beta_mean", "entropy_mean"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-7), key
        assert b["reward_mean"] == a["reward_mean"]  # the same sampled responses
    assert any(not torch.equal(p, q) for p, q in zip(params, base_params, strict=True))
    for p, q in zip(params, base_params, strict=True):
        assert float((p - q).abs().max()) <= 1e-5 * max(1.0, float(q.abs().max()))


def test_validation_decodes_exactly_as_the_test(monkeypatch, tiny_processor):
    from harness.config import RunConfig
    from harness.sampling.decoding import greedy_settings
    from harness.stages import rl as rl_stage

    cfg = RunConfig()
    cfg.generation.min_new_tokens, cfg.generation.max_new_tokens, cfg.generation.repetition_penalty = 7, 9, 1.05
    cfg.rl.max_new_tokens, cfg.rl.min_new_tokens = 20, 3
    seen = {}

    def fake_generate(model, processor, images, instructions, **kw):
        seen.update(kw)
        return ["the heart is normal ."] * len(images)

    monkeypatch.setattr(rl_stage, "generate_reports", fake_generate)
    val = PromptSet(["a", "b"], [[None], [None]], ["w", "w"], ["the heart is normal .", "no effusion ."])
    rl_stage.make_validator(rl_stage.validation_fields(cfg), val, tiny_processor)(None)
    assert {k: seen[k] for k in greedy_settings(cfg.generation)} == greedy_settings(cfg.generation)
    assert seen["min_new_tokens"] == 7 and seen["max_new_tokens"] == 9


def test_validation_rg_term_skips_empty_pairs():
    from harness.config import RunConfig
    from harness.stages.rl import score_validation, validation_fields
    from rewards.entity import entity_f1

    val = PromptSet(["a", "b", "c"], [[None]] * 3, ["w"] * 3,
                    ["mild cardiomegaly .", "small left pleural effusion .", "no pneumothorax ."])
    hyps = ["mild cardiomegaly .", "", "left pleural effusion ."]
    scores = score_validation(validation_fields(RunConfig()), val, hyps)
    expected = float(np.mean(entity_f1([hyps[0], hyps[2]], [val.references[0], val.references[2]])))
    assert scores["rg_pairs"] == 2 and scores["rg"] == pytest.approx(expected)
    assert scores["rg"] != pytest.approx(float(np.mean(entity_f1(hyps, val.references))))


def test_response_mask_stops_after_first_end_token():
    tokens = torch.tensor([[5, 6, 9, 0, 0], [5, 9, 9, 1, 1], [5, 6, 7, 8, 4]])
    assert response_mask_from(tokens, 9).tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]


@pytest.mark.parametrize("mode", ["tfidf", "gradient"])
def test_token_weighting_modes_run_and_keep_mean_one(mode, tiny_model, tiny_processor, tmp_path, prompt_set):
    tr = _trainer(tiny_model, tiny_processor, tmp_path, prompt_set, regularizer="constant", token_weighting=mode)
    tr.reference.on_start(tr.store)
    ro = tr._rollout([0, 1])
    with tr.store.use("old"):
        w = tr.weighter.weights(tr.model, ro)
    mask = ro.response_mask.bool()
    assert w.shape == mask.shape and torch.all(w[~mask] == 0) and torch.all(w[mask] >= 0)
    means = (w * mask).sum(1) / mask.sum(1)
    assert torch.allclose(means[mask.sum(1) > 0], torch.ones(1), atol=1e-5)
    row = tr.train_step()
    assert np.isfinite(row["loss"]) and "token_weight_max" in row


OFFLINE_REWARDS = ["bleu4", "chexpert_f1", "entity_f1", "ce_f1", "mccs", "mccs_format", "mrg_r1", "ce_f1_format",
                   "format", "diagnostic_f1", "mccs_normal", "mrg_r1_normal"]


def test_offline_reward_list_is_complete():
    from rewards.registry import available_rewards

    # chexbert_f1 / radgraph_f1 need model checkpoints: their RL steps run in tests/rewards/test_chexbert.py and
    # test_radgraph.py, on the tiny offline checkpoints those tests write.
    # rewards a test file registers for itself start with test_
    builtin = {name for name in available_rewards() if not name.startswith("test_")}
    assert builtin == set(OFFLINE_REWARDS) | {"chexbert_f1", "radgraph_f1"}


@pytest.mark.parametrize("reward", OFFLINE_REWARDS)
def test_rl_runs_with_each_reward(reward, tiny_model, tiny_processor, tmp_path, prompt_set):
    tr = _trainer(tiny_model, tiny_processor, tmp_path, prompt_set, regularizer="rer", reference="static",
                  reward=reward)
    tr.reference.on_start(tr.store)
    row = tr.train_step()
    assert 0.0 <= row["reward_min"] <= row["reward_max"] <= 1.0
    assert np.isfinite(row["loss"])


def test_a_resume_after_the_final_checkpoint_logs_no_second_final_validation(tiny_model, tiny_processor, tmp_path,
                                                                            prompt_set, tiny_tokenizer):
    """The process died between the final checkpoint and metrics.json: the rerun must not append the run's last
    validation row again (the loop validates before its final checkpoint, so a resume at the end has nothing
    left to do but select)."""
    from harness.models.tiny import build_tiny_model

    tr = _trainer(tiny_model, tiny_processor, tmp_path, prompt_set, regularizer="rer", reference="vapr")
    tr.tcfg.max_steps = tr.total_steps = 1  # cut inside the epoch: the loop ends with its own validation
    tr.train()
    rows = tr.run.evals()
    assert [r["step"] for r in rows] == [0, 1]
    fresh = build_tiny_model(tiny_tokenizer, seed=0, text_hidden=32, text_layers=1, vision_hidden=16, vision_depth=1,
                             image_size=56)
    again = _trainer(fresh, tiny_processor, tmp_path, prompt_set, regularizer="rer", reference="vapr")
    again.tcfg.max_steps = again.total_steps = 1
    again.train()
    assert again.run.evals() == rows
    assert torch.equal(again.store.parameters()[0], tr.store.parameters()[0])


def test_each_step_is_one_updater_call_and_the_checkpoint_keeps_its_keys(tiny_model, tiny_processor, tmp_path,
                                                                          prompt_set):
    """The step's micro-batches, the all-reduce, scaling, clipping and the step are one `Updater.update`; the
    checkpoint's keys are an on-disk format ("engine": the updater's state)."""
    from harness.runs.checkpoint_io import load_state

    tr = _trainer(tiny_model, tiny_processor, tmp_path, prompt_set, regularizer="rer", micro_batch_size=1)
    calls = []
    real = tr.updater.update
    tr.updater.update = lambda loss, chunks, *a, **k: calls.append((list(chunks), k)) or real(loss, chunks, *a, **k)
    tr.train()
    assert [c for c, _ in calls] == [[(0, 1), (1, 2), (2, 3), (3, 4)]] * 2
    assert all(k["grad_clip"] == tr.tcfg.grad_clip and k["rejected"] is None for _, k in calls)
    assert all(r["grad_norm"] is not None and r["grad_norm"] > 0 for r in tr.run.steps())
    state = load_state(tr.ckpt_path)
    assert set(state) == {"step", "live", "store", "optimizer", "scheduler", "regularizer", "reference", "best",
                          "nonfinite", "engine"}
    assert state["step"] == 2 and state["engine"] == {} and state["nonfinite"] == tr.nonfinite


def test_policy_dropout_ratio_at_a_sync_is_not_one_while_old_and_ref_stay_deterministic(
        tiny_model, tiny_processor, tmp_path, prompt_set, monkeypatch):
    # rl.policy_dropout (the official code, the paper presets): the current policy's pass runs in train mode, LoRA
    # dropout 0.1 active; the old and reference passes run in eval mode, so they are bit-identical when repeated,
    # and at a sync (old = ref = current) the ratio and the KL are no longer exactly 1 and 0. Off (the default,
    # the tiny presets): every pass in eval mode, the ratio at a sync is exactly 1.
    rows = {}
    for dropout in (False, True):
        tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / str(dropout), prompt_set,
                      regularizer="rer", policy_dropout=dropout)
        tr.reference.on_start(tr.store)
        tr.train_step()  # LoRA's B starts at 0 (dropout would change nothing): one step moves it
        assert not tr.model.training  # the update leaves the model in eval mode
        for name in ("old", "ref"):
            tr.store.capture(name)  # a sync of old and a reset of ref: both equal the live weights
        real, modes = tr._frozen_pass, []

        def repeated(name, ro, chunks, want_entropy, real=real, modes=modes, tr=tr):
            modes.append(tr.model.training)
            first, again = real(name, ro, chunks, want_entropy), real(name, ro, chunks, want_entropy)
            for a, b in zip(first, again, strict=True):
                assert (a is None and b is None) or torch.equal(a, b)  # deterministic: bit-identical repeats
            return first

        monkeypatch.setattr(tr, "_frozen_pass", repeated)
        rows[dropout] = tr.train_step()
        # Dropout on: the old and ref passes run (eval mode) although they equal the live weights; off: the
        # current pass's values are theirs, no frozen pass runs.
        assert modes == ([False, False] if dropout else [])
        assert not tr.model.training
    assert rows[False]["ratio_mean"] == 1.0 and rows[False]["kl_mean"] == 0.0
    assert rows[True]["ratio_mean"] != 1.0 and rows[True]["kl_mean"] > 0.0


@pytest.mark.parametrize("generation, expected", [(None, "lean"), ("hf", "hf"), ("lean", "lean")])
def test_rollout_backend_comes_from_the_generation_config(generation, expected, tiny_model, tiny_processor, tmp_path,
                                                          prompt_set, monkeypatch):
    """Issue 25: a trainer built outside the RL stage sampled with transformers' generate (a hidden default "hf")
    while GenerationConfig's default is lean; the backend is now the config's wherever the trainer is built."""
    import harness.grpo.passes as passes_module  # the rollouts are sampled there (issue 47)
    from harness.config import GenerationConfig

    seen = []

    def record(*args, backend, **kwargs):
        seen.append(backend)
        raise RuntimeError("sampled")

    monkeypatch.setattr(passes_module, "sample_rollout", record)
    torch.manual_seed(0)
    model = add_lora(tiny_model, r=4, alpha=8, dropout=0.1)
    set_trainable(model, "rl")
    rl = RLConfig(group_size=2, prompts_per_step=2, max_new_tokens=6, min_new_tokens=2, reward="test_length")
    kw = {} if generation is None else {"generation": GenerationConfig(backend=generation)}
    tr = GRPOTrainer(model, tiny_processor, rl, TrainConfig(epochs=1), RunDir(tmp_path), prompt_set, None, seed=0,
                     progress=False, **kw)
    tr.store.capture("old")
    with pytest.raises(RuntimeError, match="sampled"):
        tr.train_step()
    assert seen == [expected]


@pytest.mark.parametrize("reference", ["static", "ema"])
def test_frozen_feature_memo_changes_no_number(reference, tiny_model, tiny_processor, tmp_path, prompt_set,
                                               monkeypatch):
    """The frozen passes read the vision features of a snapshot they have encoded before from a memo
    (harness/sampling/feature_memo.py): two epochs with it are bit for bit the run without it. Under a static
    reference the second epoch's reference passes encode nothing; an EMA reference changes every step, so its
    memo never hits. The rollout, sampled under "old", fills the old memo: the old passes encode no image."""
    from harness.sampling.feature_memo import SnapshotFeatures

    runs, old_pass_misses = {}, []
    for memo_on in (True, False):
        if not memo_on:
            monkeypatch.setattr(SnapshotFeatures, "memo", lambda self, name, version: None)
        tr = _trainer(_fresh_copy(tiny_model), tiny_processor, tmp_path / str(memo_on), prompt_set, epochs=2,
                      regularizer="rer", reference=reference, ema_rate=0.5, select="final")
        if memo_on:
            frozen_pass = tr._frozen_pass

            def counted(name, *args, _pass=frozen_pass, _tr=tr):
                before = _tr.frozen_features.counts().get("old", (0, 0))[1]
                out = _pass(name, *args)
                if name == "old":
                    old_pass_misses.append(_tr.frozen_features.counts()["old"][1] - before)
                return out

            tr._frozen_pass = counted
        tr.train()
        runs[memo_on] = tr.run.steps(), _params(tr), tr.frozen_features
    (rows, params, features), (plain_rows, plain_params, _) = runs[True], runs[False]
    assert len(rows) == 4
    for a, b in zip(rows, plain_rows, strict=True):
        for key in ("loss", "pg_loss", "kl_loss", "kl_mean", "ratio_mean", "ref_entropy_mean", "beta_mean",
                    "entropy_mean", "reward_mean"):
            assert a[key] == b[key], key
    assert all(torch.equal(p, q) for p, q in zip(params, plain_params, strict=True))
    hits, misses = features.counts()["ref"]
    if reference == "static":  # 4 prompts: each image encoded once under the reference, then read
        assert misses <= 4 and hits > 0
    else:
        assert hits == 0 and misses > 0
    # old_sync_every = 2: an old pass on every second step, each reading all its images from the rollout's.
    assert len(old_pass_misses) == 2 and old_pass_misses == [0, 0]
    assert features.counts()["old"][0] > 0
