"""Checkpoints are read with weights_only=True: a pickled object is refused (and never executed), a corrupt
file is a clear error naming it, and what the trainers save loads back unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.runs.checkpoint_io import CheckpointError, checkpoint_step, load_state, save_state
from harness.runs.records import RunDir
from harness.stages.lm_train import load_checkpoint


class _Payload:
    """Unpickling this touches a marker file: the stand-in for code a hostile run folder would run."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _tiny_training_objects():
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    return model, opt, sched


def test_pickled_object_in_an_lm_checkpoint_is_refused_and_not_run(tmp_path):
    run = RunDir(tmp_path / "run")
    marker = tmp_path / "code_ran"
    (run.path / "checkpoint").mkdir()
    torch.save({"params": {}, "step": 3, "extra": _Payload(marker)}, run.path / "checkpoint" / "state.pt")
    model, opt, sched = _tiny_training_objects()
    with pytest.raises(CheckpointError, match=r"state\.pt: refused to load"):
        load_checkpoint(run, model, opt, sched)
    assert not marker.exists()


def test_rl_trainer_loads_through_the_safe_loader():
    """The RL engine resumes through the one checkpoint protocol (harness/training/checkpoints.py: load_latest), whose
    reader is the safe loader: every state it reads comes through load_state (weights only)."""
    import inspect

    from harness.grpo import checkpointing
    from harness.training import checkpoints

    assert "load_latest(" in inspect.getsource(checkpointing.resume_from)
    src = inspect.getsource(checkpoints.load_latest)
    assert "load_state(" in src and "weights_only=False" not in src
    assert checkpoints.load_state is load_state  # the protocol's reader is checkpoint_io's safe one


@pytest.mark.parametrize("cut", [0, 10, 200])
def test_truncated_checkpoint_is_a_clear_error(tmp_path, cut):
    path = tmp_path / "state.pt"
    save_state({"w": torch.randn(64, 64), "step": 7}, path)
    data = path.read_bytes()
    path.write_bytes(data[:cut])
    with pytest.raises(CheckpointError, match=r"state\.pt: corrupt or truncated"):
        load_state(path)


def test_round_trip_of_what_the_trainers_save(tmp_path):
    model, opt, sched = _tiny_training_objects()
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    sched.step()
    state = {"params": {n: p.detach().clone() for n, p in model.named_parameters()}, "optimizer": opt.state_dict(),
             "scheduler": sched.state_dict(), "step": 5, "torch_rng": torch.get_rng_state(),
             "regularizer": {"beta": 0.1, "last_error": -0.03, "num_updates": 2},
             "reference": {"best_score": 0.37, "best_epoch": None, "best_step": 4, "num_resets": 1}}
    save_state(state, tmp_path / "s.pt")
    back = load_state(tmp_path / "s.pt")
    assert back["step"] == 5 and checkpoint_step(tmp_path / "s.pt") == 5
    assert torch.equal(back["torch_rng"], state["torch_rng"])
    assert back["optimizer"]["state"][0]["exp_avg"].equal(state["optimizer"]["state"][0]["exp_avg"])
    assert back["reference"] == state["reference"]


def test_regularizer_and_reference_states_are_plain_values():
    import numpy as np

    from harness.grpo.selection import BestTracker
    from regularizers import build_reference, build_regularizer

    adaptive = build_regularizer("adaptive", beta_base=0.1, kl_target=0.05, kl_horizon=100)
    adaptive.beta = np.float64(0.125)  # numpy scalars would be refused by weights_only=True
    vapr = build_reference("vapr", reset_every_epochs=3, val_every_steps=None)
    vapr.num_resets = np.int64(2)
    best = BestTracker()
    best.score, best.epoch, best.step = np.float64(0.3), np.int64(1), np.int64(7)
    for state in (adaptive.state_dict(), vapr.state_dict(), best.state_dict()):
        assert all(v is None or type(v) in (int, float) for v in state.values()), state
