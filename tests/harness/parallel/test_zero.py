"""DeepSpeed ZeRO-1/2 through accelerate (harness/parallel/zero.py) with two CPU processes (DeepSpeed's CPU
accelerator, gloo).

- Two processes under ZeRO take the AdamW steps one plain-torch process takes on the whole batch.
- A VAPR-style reset (SnapshotStore.restore with zero.master_sync + reset_zero_optimizer_state) is exact: the next
  step is a fresh Adam step from the snapshot, as in plain torch; without the master sync ZeRO's fp32 copy undoes
  the restore (the negative control that shows the hook matters).

deepspeed is a dependency (`make install` builds it with DS_BUILD_OPS=0), so this runs in every CI run (its tests
are marked slow: `make test-slow`, which .ci/run runs after `make test`); it skips only where an install lacks it.
"""

from __future__ import annotations

import copy
import os
import traceback
from pathlib import Path

import pytest
import torch

from harness.parallel.zero import unavailable
from tests.harness.parallel.test_distributed import _env, _launch

REPO = Path(__file__).resolve().parents[3]
LR = 0.01
pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))


def _net() -> torch.nn.Module:
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.Tanh(), torch.nn.Linear(6, 4), torch.nn.Tanh(),
                              torch.nn.Linear(4, 3))
    net[0].requires_grad_(False)  # a frozen base, as in the stages
    return net


def _trainable(net) -> list[torch.Tensor]:
    return [p.detach().clone() for p in net.parameters() if p.requires_grad]


def _zero_worker(rank: int, world: int, port: int, config: str, out: str) -> None:
    try:
        _env(rank, world, port)
        os.environ.update(DS_ACCELERATOR="cpu", ACCELERATE_USE_DEEPSPEED="true")
        from accelerate import Accelerator

        from harness.parallel.zero import deepspeed_plugin, master_sync, reset_zero_optimizer_state
        from harness.policy.snapshots import SnapshotStore

        acc = Accelerator(deepspeed_plugin=deepspeed_plugin(config))
        assert acc.distributed_type.value == "DEEPSPEED" and torch.distributed.get_world_size() == 2
        net = _net()
        plain = copy.deepcopy(net)  # one process, the whole batch
        plain_opt = torch.optim.AdamW([p for p in plain.parameters() if p.requires_grad], lr=LR, weight_decay=0.0)
        opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=LR, weight_decay=0.0)
        engine, opt = acc.prepare(net, opt)
        store = SnapshotStore(engine.module, master_sync=master_sync(opt))
        g = torch.Generator().manual_seed(11)
        batches = [torch.randn(4, 5, generator=g) * 1.3 for _ in range(6)]

        def zero_step(x):
            acc.backward(engine(x[rank::world]).pow(2).mean())  # each process: half the batch
            opt.step()
            opt.zero_grad()

        def plain_step(x):
            plain(x).pow(2).mean().backward()
            plain_opt.step()
            plain_opt.zero_grad()

        out_rows = {}
        for k in range(3):
            zero_step(batches[k])
            plain_step(batches[k])
            if k == 0:
                store.capture("ref")
                ref = _trainable(plain)
        out_rows["after_3"] = (_trainable(engine.module), _trainable(plain))
        # The reset: the snapshot back in, Adam's moments forgotten; plain torch: the same by hand.
        store.restore("ref")
        assert reset_zero_optimizer_state(opt) > 0
        with torch.no_grad():
            for p, v in zip([p for p in plain.parameters() if p.requires_grad], ref, strict=True):
                p.copy_(v)
        plain_opt = torch.optim.AdamW([p for p in plain.parameters() if p.requires_grad], lr=LR, weight_decay=0.0)
        zero_step(batches[3])
        plain_step(batches[3])
        out_rows["after_reset"] = (_trainable(engine.module), _trainable(plain))
        out_rows["ref"] = ref
        # Negative control: a snapshot 0.5 away restored without the master sync is undone by ZeRO's fp32 copy.
        before = _trainable(engine.module)
        with torch.no_grad():
            for p in store.parameters():
                p.add_(0.5)
        store.capture("far")
        store.master_sync = None
        store.restore("far")
        zero_step(batches[4])
        out_rows["unsynced"] = (_trainable(engine.module), before)
        torch.save(out_rows, Path(out) / f"zero{rank}.pt")
        acc.end_training()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    except BaseException:
        (Path(out) / f"error{rank}.txt").write_text(traceback.format_exc())
        raise


@pytest.mark.slow
@pytest.mark.parametrize("config", ["zero1.json", "zero2.json"])
def test_zero_equals_one_process_and_a_reset_is_exact(config, tmp_path):
    _launch(_zero_worker, 2, str(REPO / "experiments" / "deepspeed" / config), str(tmp_path))
    for rank in (0, 1):
        rows = torch.load(tmp_path / f"zero{rank}.pt")
        for key in ("after_3", "after_reset"):
            got, expected = rows[key]
            for a, b in zip(got, expected, strict=True):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"{config} {key}")
        # A fresh Adam step from the snapshot moves every weight by about lr (m / sqrt(v) = sign(g)).
        for p, r in zip(rows["after_reset"][0], rows["ref"], strict=True):
            torch.testing.assert_close((p - r).abs(), torch.full_like(p, LR), rtol=1e-3, atol=1e-5)
        # Without the sync the step continues from the pre-restore master (moves ~lr), not from the snapshot.
        unsynced, before = rows["unsynced"]
        for u, b in zip(unsynced, before, strict=True):
            assert float((u - b).abs().max()) < 3 * LR
            assert float((u - (b + 0.5)).abs().min()) > 0.4
