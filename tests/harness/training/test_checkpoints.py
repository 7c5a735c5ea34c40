"""harness/training/checkpoints.py: the one checkpoint protocol of the three training loops (issue 47). The order of
a write across processes, the generations it keeps, and that a checkpoint written by the loops' own code before
the protocol had one home (checkpoint_io's begin / write_state / commit, and save_state) resumes as it did."""

from __future__ import annotations

import json

import torch

from harness.models.classifier import training as classifier_training
from harness.runs import checkpoint_io
from harness.runs.records import RunDir
from harness.stages import lm_train
from harness.training.checkpoints import load_latest, save_generation


class Procs:
    """One process of a group: records what it did in order."""

    def __init__(self, main: bool, log: list):
        self.main, self.log = main, log

    def barrier(self) -> None:
        self.log.append("barrier")


def test_a_write_keeps_its_order_across_processes(tmp_path):
    path = tmp_path / "checkpoint" / "state.pt"
    for main in (True, False):
        log: list = []

        def partition(staging, log=log, main=main):
            log.append("partition")
            assert staging.name == "checkpoint.new"
            if main:  # (the processes run one after another here: only the main one's folder is open now)
                assert staging.is_dir()  # opened by the main process before the first barrier
                (staging / "zero_1.pt").write_bytes(b"x")
            return {"opt": 1} if main else None

        def build(recorded, log=log):
            log.append(("build", recorded))
            return {"step": 3, "w": torch.ones(2)}

        save_generation(path, 3, build, partition=partition, dist=Procs(main, log),
                        before_seal=lambda log=log: log.append("sync_logs"))
        if main:
            assert log == ["barrier", "partition", "barrier", ("build", {"opt": 1}), "sync_logs", "barrier"]
        else:  # the others write their partition and wait: no state, no seal
            assert log == ["barrier", "partition", "barrier", "barrier"]
    sums = json.loads((tmp_path / "checkpoint" / "SUMS.json").read_text())
    assert sums["step"] == 3 and set(sums["files"]) == {"state.pt", "zero_1.pt"}


def test_generations_rotate_and_the_newest_verified_one_is_read(tmp_path):
    path = tmp_path / "checkpoint" / "s.pt"
    for step in (1, 2, 3):
        save_generation(path, step, lambda _, step=step: {"step": step})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "checkpoint.prev"]  # older ones pruned
    folder, state = load_latest(path)
    assert folder == path.parent and state["step"] == 3
    (path.parent / "s.pt").write_bytes(b"torn")  # the latest torn: the previous one, with a message
    said: list = []
    folder, state = load_latest(path, log=said.append)
    assert folder.name == "checkpoint.prev" and state["step"] == 2 and "skipped" in said[0]
    assert load_latest(tmp_path / "none" / "s.pt") is None


def _lm_objects(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + s))
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


def test_a_supervised_checkpoint_written_by_the_old_code_resumes(tmp_path):
    model, optimizer, scheduler = _lm_objects(0)
    run = RunDir(tmp_path / "old")
    # What lm_train's own code wrote before the protocol had one home: begin, write_state, commit.
    folder = run.path / "checkpoint"
    checkpoint_io.begin(folder)
    state = {"params": {n: p.detach().cpu() for n, p in model.named_parameters()},
             "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "step": 7,
             "torch_rng": torch.get_rng_state(), "engine": {}}
    checkpoint_io.write_state(state, checkpoint_io.staging_dir(folder) / "state.pt")
    checkpoint_io.commit(folder, 7)

    fresh, fresh_opt, fresh_sched = _lm_objects(1)
    assert lm_train.load_checkpoint(run, fresh, fresh_opt, fresh_sched) == 7
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters(), strict=True))
    assert fresh_sched.state_dict() == scheduler.state_dict()

    # and the loop writes the same files with the same entries today
    new = RunDir(tmp_path / "new")
    lm_train.save_checkpoint(new, model, optimizer, scheduler, 7)
    assert sorted(p.name for p in (new.path / "checkpoint").iterdir()) == ["SUMS.json", "state.pt"]
    written = torch.load(new.path / "checkpoint" / "state.pt", weights_only=True)
    assert set(written) == set(state) and written["step"] == 7
    assert json.loads((new.path / "checkpoint" / "SUMS.json").read_text())["step"] == 7


def test_a_classifier_checkpoint_written_by_the_old_code_resumes(tmp_path):
    state = {"step": 5, "epoch": 2, "w": torch.arange(4.0)}
    checkpoint_io.save_state(state, tmp_path / "old" / classifier_training.CHECKPOINT_NAME)  # the old _save
    got = classifier_training._load(tmp_path / "old")
    assert got["step"] == 5 and torch.equal(got["w"], state["w"])
    classifier_training._save(tmp_path / "new", state)
    old_sums = json.loads((tmp_path / "old" / "SUMS.json").read_text())
    new_sums = json.loads((tmp_path / "new" / "SUMS.json").read_text())
    assert new_sums["step"] == old_sums["step"] == 5 and set(new_sums["files"]) == set(old_sums["files"])
    assert classifier_training._load(tmp_path / "new")["epoch"] == 2
