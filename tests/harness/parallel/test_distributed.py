"""Data parallelism (harness/parallel/distributed.py, harness/parallel/updater.py: accelerate's DDP) with two CPU
processes on gloo.

- The scaled per-process losses, with gradients averaged by DDP (each process's share in two micro-batches under
  no_sync, then sync), give the gradient of the whole batch's loss in one process, for every aggregation
  (hand-made tensors); a process without any sample this step still takes part.
- A 2-process `regbench train rl` on the tiny model: both processes end with identical trainable parameters
  (equal to the saved model's), rank 0 alone writes the run records, once per step.
"""

from __future__ import annotations

import os
import socket
import traceback
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from harness.config import load_config
from harness.grpo.core import AGGREGATIONS, aggregation_normalizer, aggregation_weights, policy_loss
from harness.parallel.distributed import Dist, shard
from harness.runs.records import read_jsonl
from tests.tiny_sizes import TINY


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(fn, world: int, *args) -> None:
    """Run fn(rank, world, port, *args) in `world` spawned processes, as torchrun would set them up."""
    port = _free_port()
    mp.start_processes(fn, args=(world, port, *args), nprocs=world, start_method="spawn", join=True)


def _env(rank: int, world: int, port: int) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)


# ---------------------------------------------------------------------------------------------------------
# Gradients


def _batch(seed: int = 0, n: int = 8, t: int = 6):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, t, generator=g)
    logp_old = -torch.rand(n, t, generator=g) * 3
    logp_ref = -torch.rand(n, t, generator=g) * 3
    adv = torch.randn(n, generator=g)
    beta = torch.rand(n, generator=g) * 0.2
    mask = (torch.rand(n, t, generator=g) > 0.3).float()
    mask[3] = 0.0  # a response with no token
    mask[5, 1:] = 0.0  # a one-token response
    return x, logp_old, logp_ref, adv, beta, mask


AGG = {"group_size": 2, "max_len": 6}  # rows are 4 groups of G = 2 (group_token_mean); dr_grpo's budget


def _loss(theta: torch.Tensor, rows: list[int], aggregation: str,
          token_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    x, logp_old, logp_ref, adv, beta, mask = (v[rows] for v in _batch())
    logp = -torch.nn.functional.softplus(x * theta[0] + theta[1])  # a policy with two shared parameters
    loss, _ = policy_loss(logp, logp_old, logp_ref, adv, beta, mask, aggregation=aggregation,
                          entropy=-logp, entropy_coef=0.01, token_weights=token_weights, **AGG)
    return loss, mask


def _gradient_worker(rank: int, world: int, port: int, out: str) -> None:
    try:
        _env(rank, world, port)
        from harness.parallel.distributed import init_distributed
        from harness.parallel.updater import Updater

        d = init_distributed()
        assert d.accelerator().distributed_type.value == "MULTI_CPU"
        results = {}
        for aggregation in AGGREGATIONS:
            policy = torch.nn.Module()
            policy.theta = torch.nn.Parameter(torch.tensor([0.7, -0.2]))
            updater = Updater(policy, [policy.theta], d)
            assert isinstance(updater.ddp, torch.nn.parallel.DistributedDataParallel)
            full, _ = _loss(policy.theta, list(range(8)), aggregation)
            (expected,) = torch.autograd.grad(full, policy.theta)
            # Each process takes whole groups (its prompts), as the trainer does.
            rows = [r for g in shard(list(range(4)), d) for r in (2 * g, 2 * g + 1)]
            _, mask = _loss(policy.theta, rows, aggregation)
            scale = d.loss_scale(aggregation_normalizer(mask, aggregation, **AGG))  # as the trainer does
            weights = aggregation_weights(mask, aggregation, **AGG)
            for part in (rows[:2], rows[2:]):  # two micro-batches (a group each), weighted by the share's normalisers
                at = [rows.index(r) for r in part]
                with updater.no_sync():
                    loss, _ = updater.forward(lambda m, rs, w, a: _loss(m.theta, rs, a, w), part, weights[at],
                                             aggregation)
                    updater.backward(loss * scale)
            updater.sync()
            results[aggregation] = (policy.theta.grad.clone(), expected)
        # Rank 1 without samples (the last batch of an epoch): its sync still meets rank 0's; mean of (g, 0).
        policy = torch.nn.Module()
        policy.theta = torch.nn.Parameter(torch.tensor([0.7, -0.2]))
        updater = Updater(policy, [policy.theta], d)
        if d.rank == 0:
            with updater.no_sync():
                updater.backward(updater.forward(lambda m: (m.theta * torch.tensor([3.0, -5.0])).sum()))
        updater.sync()
        results["empty_share"] = (policy.theta.grad.clone(), torch.tensor([1.5, -2.5]))
        torch.save(results, Path(out) / f"grads{rank}.pt")
        del policy, updater  # the DDP wrappers (and their hold on the group) go before the group does
        from harness.parallel.distributed import finalize

        finalize()
    except BaseException:
        (Path(out) / f"error{rank}.txt").write_text(traceback.format_exc())
        raise


def test_scaled_losses_with_averaged_gradients_equal_the_whole_batch(tmp_path):
    _launch(_gradient_worker, 2, str(tmp_path))
    for rank in (0, 1):
        for aggregation, (got, expected) in torch.load(tmp_path / f"grads{rank}.pt").items():
            torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7, msg=aggregation)


# ---------------------------------------------------------------------------------------------------------
# The official code's normaliser (issue 24): 1 prompt per GPU, each rank's loss the token mean of its one group,
# the ranks' gradients averaged = the mean over groups of per-group token means. rl.aggregation=group_token_mean
# must give that objective on any number of processes, with or without micro-batches.


def _per_group_objective(theta: torch.Tensor, groups) -> torch.Tensor:
    """The official run, written out: one rank per group (G = 2 rows), each rank's loss the token mean over its
    group (policy_loss with token_mean on that group alone), averaged over the ranks as DDP averages."""
    losses = [_loss(theta, [2 * g, 2 * g + 1], "token_mean")[0] for g in groups]
    return sum(losses) / len(losses)


def test_group_token_mean_is_the_official_per_group_objective_in_one_process():
    theta = torch.tensor([0.7, -0.2], requires_grad=True)
    expected = _per_group_objective(theta, range(4))
    (expected_grad,) = torch.autograd.grad(expected, theta)
    whole, mask = _loss(theta, list(range(8)), "group_token_mean")
    torch.testing.assert_close(whole, expected, rtol=1e-6, atol=1e-7)
    # Micro-batches that cut a group in two (rows 0-2, 3-7), weighted by the whole step's normalisers.
    weights = aggregation_weights(mask, "group_token_mean", **AGG)
    parts = [_loss(theta, rows, "group_token_mean", weights[rows])[0] for rows in ([0, 1, 2], [3, 4, 5, 6, 7])]
    (grad,) = torch.autograd.grad(sum(parts), theta)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-6, atol=1e-7)
    # token_mean (all tokens of the step) is another objective: groups with more tokens weigh more.
    (other,) = torch.autograd.grad(_loss(theta, list(range(8)), "token_mean")[0], theta)
    assert not torch.allclose(other, expected_grad, rtol=1e-3)


def _official_worker(rank: int, world: int, port: int, out: str) -> None:
    try:
        _env(rank, world, port)
        from harness.parallel.distributed import finalize, init_distributed
        from harness.parallel.updater import Updater

        d = init_distributed()
        results = {}
        # 4 groups (2 per process, one micro-batch each) and 2 groups (1 per process: the official layout).
        for n_groups in (4, 2):
            policy = torch.nn.Module()
            policy.theta = torch.nn.Parameter(torch.tensor([0.7, -0.2]))
            updater = Updater(policy, [policy.theta], d)
            (expected,) = torch.autograd.grad(_per_group_objective(policy.theta, range(n_groups)), policy.theta)
            groups = shard(list(range(n_groups)), d)
            rows = [r for g in groups for r in (2 * g, 2 * g + 1)]
            _, mask = _loss(policy.theta, rows, "group_token_mean")
            # As the trainer does: the share of the normaliser (groups with tokens) scales the process's loss.
            scale = d.loss_scale(aggregation_normalizer(mask, "group_token_mean", **AGG))
            weights = aggregation_weights(mask, "group_token_mean", **AGG)
            for g in range(len(groups)):
                at = [2 * g, 2 * g + 1]
                with updater.no_sync():
                    loss, _ = updater.forward(lambda m, rs, w: _loss(m.theta, rs, "group_token_mean", w),
                                              [rows[i] for i in at], weights[at])
                    updater.backward(loss * scale)
            updater.sync()
            results[n_groups] = (policy.theta.grad.clone(), expected, scale)
        torch.save(results, Path(out) / f"official{rank}.pt")
        del policy, updater  # the DDP wrappers (and their hold on the group) go before the group does
        finalize()
    except BaseException:
        (Path(out) / f"error{rank}.txt").write_text(traceback.format_exc())
        raise


def test_group_token_mean_is_the_official_per_group_objective_on_two_processes(tmp_path):
    _launch(_official_worker, 2, str(tmp_path))
    for rank in (0, 1):
        results = torch.load(tmp_path / f"official{rank}.pt")
        for n_groups, (got, expected, _scale) in results.items():
            torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7, msg=f"{n_groups} groups")
        # One group per process: each process's loss is its group's token mean, unscaled (the official code).
        assert results[2][2] == 1.0


class _TwoProcessStats(Dist):
    """Rank 0 of two processes whose all-gather hands back the other process's (weight, stats) as well."""

    def __init__(self, other: dict):
        super().__init__(rank=0, world=2)
        self.other = other  # weight name -> (weight, stats) of rank 1

    def gather_objects(self, obj):
        from harness.grpo.step_log import LOSS_KEYS

        weight, stats = obj
        which = "normalizer" if set(stats) <= set(LOSS_KEYS) else "tokens"
        w, other = self.other[which]
        return [obj, (w, {k: other[k] for k in stats})]


@pytest.mark.parametrize("aggregation", ["group_token_mean", "token_mean"])
def test_logged_loss_of_two_processes_is_the_whole_steps(aggregation):
    # The step row's loss terms, reduced over processes, are the loss of the whole step (issue 24: weighting them by
    # response tokens, as before, logged another number than the objective for group_token_mean).
    from harness.grpo.step_log import loss_stats

    theta = torch.tensor([0.7, -0.2])
    whole, _ = _loss(theta, list(range(8)), aggregation)
    x, logp_old, logp_ref, adv, beta, mask = _batch()
    share = {}
    for rank, rows in enumerate(([0, 1], [2, 3, 4, 5, 6, 7])):  # 1 group and 3: unequal shares
        logp = -torch.nn.functional.softplus(x[rows] * theta[0] + theta[1])
        _, stats = policy_loss(logp, logp_old[rows], logp_ref[rows], adv[rows], beta[rows], mask[rows],
                               aggregation=aggregation, entropy=-logp, entropy_coef=0.01, **AGG)
        share[rank] = (stats, float(mask[rows].sum()), float(aggregation_normalizer(mask[rows], aggregation, **AGG)))
    other = {"tokens": (share[1][1], share[1][0]), "normalizer": (share[1][2], share[1][0])}
    logged = loss_stats(_TwoProcessStats(other), *share[0])
    _, expected = policy_loss(-torch.nn.functional.softplus(x * theta[0] + theta[1]), logp_old, logp_ref, adv, beta,
                              mask, aggregation=aggregation, entropy=-x, entropy_coef=0.0, **AGG)
    assert logged["loss"] == pytest.approx(float(whole), rel=1e-6)
    assert logged["kl_mean"] == pytest.approx(expected["kl_mean"], rel=1e-6)  # token means stay token-weighted


def test_a_single_process_is_a_no_op():
    from harness.parallel.updater import Updater

    d = Dist()
    model = torch.nn.Linear(3, 1)
    updater = Updater(model, list(model.parameters()), d)
    assert updater.ddp is None and updater.scaler is None and updater.loss_scale is None
    x = torch.tensor([[0.3, -1.7, 2.9]])
    with updater.no_sync():
        updater.backward(updater.forward(lambda m, v: m(v).sum(), x))
    updater.sync()
    assert torch.equal(model.weight.grad, x)  # plain torch: nothing averaged, nothing scaled
    assert updater.step(torch.optim.SGD(model.parameters(), lr=0.1))
    assert d.reduce_stats({"kl_mean": 0.5, "beta_min": 0.1}, 10.0) == {"kl_mean": 0.5, "beta_min": 0.1}
    assert d.broadcast_object({"a": 1}) == {"a": 1} and d.gather_objects(3) == [3]
    assert shard(list(range(5)), d) == [0, 1, 2, 3, 4]
    assert shard(list(range(5)), Dist(rank=1, world=2)) == [1, 3]


def test_prompts_per_step_must_split_evenly(tiny_model, tiny_processor, tmp_path):
    from harness.grpo.trainer import GRPOTrainer, PromptSet
    from harness.runs.records import RunDir

    cfg = load_config(None, ["rl.prompts_per_step=3"])
    for p in tiny_model.parameters():
        p.requires_grad_(True)
    with pytest.raises(ValueError, match=r"rl.prompts_per_step = 3 must be a multiple of the number of processes"):
        GRPOTrainer(tiny_model, tiny_processor, cfg.rl, cfg.train, RunDir(tmp_path), PromptSet([], [], [], []),
                    None, seed=0, dist=Dist(rank=0, world=2))


# ---------------------------------------------------------------------------------------------------------
# A real 2-process RL stage



def _train_worker(rank: int, world: int, port: int, stage: str, args: list[str], out: str) -> None:
    """`regbench train <stage> ARGS` as one process of a torchrun launch; each process also saves the trainable
    parameters its RL trainer ends with (params<rank>.pt), so that the processes can be compared."""
    try:
        _env(rank, world, port)
        from harness.grpo import trainer as trainer_module

        original = trainer_module.GRPOTrainer.train

        def train_and_keep_parameters(self):
            result = original(self)
            torch.save([p.detach().clone() for p in self.params], Path(out) / f"params{rank}.pt")
            return result

        trainer_module.GRPOTrainer.train = train_and_keep_parameters
        from harness.cli import main

        (Path(out) / f"rc{rank}").write_text(str(main(["train", stage, *args, "--no-progress"])))
    except BaseException:
        (Path(out) / f"error{rank}.txt").write_text(traceback.format_exc())
        raise


@pytest.mark.slow
def test_two_process_rl_keeps_the_processes_identical(tmp_path):
    from harness.cli import main

    common = TINY + [f"data.synth_dir={tmp_path / 'data'}", f"cache_dir={tmp_path / 'cache'}"]
    # Stage 0 and the data set first (as a launch would find them cached), then a 2-process RL stage 3.
    assert main(["train", "pretrain", *common, f"out_dir={tmp_path / 'pre'}", "--no-progress"]) == 0
    args = common + [f"out_dir={tmp_path / 'rl'}", "train.max_steps=2", "rl.prompts_per_step=2", "rl.group_size=2",
                     "rl.max_new_tokens=8", "rl.min_new_tokens=2", "rl.regularizer=rer", "rl.reference=vapr",
                     "rl.val_max_samples=5", "train.lr=1e-3", "train.scheduler=constant", "model.lora_r=4"]
    _launch(_train_worker, 2, "rl", args, str(tmp_path))
    assert [(tmp_path / f"rc{r}").read_text() for r in (0, 1)] == ["0", "0"]
    p0, p1 = (torch.load(tmp_path / f"params{r}.pt") for r in (0, 1))
    assert all(torch.equal(a, b) for a, b in zip(p0, p1, strict=True))  # identical on both processes
    steps = read_jsonl(tmp_path / "rl" / "steps.jsonl")
    assert [s["step"] for s in steps] == [1, 2]  # written once, by rank 0
    assert all(s["reward_mean"] is not None for s in steps)
    evals = read_jsonl(tmp_path / "rl" / "evals.jsonl")
    assert [e["step"] for e in evals] == [0, 2] and all("val_score" in e for e in evals)
    from harness.models.checkpoint import stage_tensors

    saved = stage_tensors(tmp_path / "rl" / "model")
    assert sorted(t.numel() for t in saved.values()) == sorted(t.numel() for t in p0)
    from harness.runs.records import read_json

    assert read_json(tmp_path / "rl" / "metrics.json")["processes"] == 2


@pytest.mark.slow
def test_two_process_warmup_takes_the_steps_of_one_process(tmp_path):
    """Warm-up has no sampling and no dropout: two processes must reach the parameters one process does."""
    from harness.cli import main
    from harness.models.checkpoint import stage_tensors

    common = TINY + [f"data.synth_dir={tmp_path / 'data'}", f"cache_dir={tmp_path / 'cache'}",
                     "train.max_steps=3", "train.batch_size=4", "train.lr=1e-2", "train.scheduler=constant",
                     "prompt.max_report_tokens=200"]  # untruncated reports: the processes get unequal token counts
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the launched processes (_env): the same float sums
    try:
        assert main(["train", "warmup", *common, f"out_dir={tmp_path / 'one'}", "--no-progress"]) == 0
    finally:
        torch.set_num_threads(threads)
    _launch(_train_worker, 2, "warmup", common + [f"out_dir={tmp_path / 'two'}"], str(tmp_path))
    assert [(tmp_path / f"rc{r}").read_text() for r in (0, 1)] == ["0", "0"]
    one = stage_tensors(tmp_path / "one" / "model")
    two = stage_tensors(tmp_path / "two" / "model")
    assert one.keys() == two.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-4, atol=1e-6, msg=name)
    steps_one, steps_two = (read_jsonl(tmp_path / d / "steps.jsonl") for d in ("one", "two"))
    assert [s["step"] for s in steps_two] == [1, 2, 3]
    for a, b in zip(steps_one, steps_two, strict=True):
        assert b["tokens"] == a["tokens"] and b["loss"] == pytest.approx(a["loss"], rel=1e-5)
    evals_one, evals_two = (read_jsonl(tmp_path / d / "evals.jsonl") for d in ("one", "two"))
    assert evals_two[-1]["loss"] == pytest.approx(evals_one[-1]["loss"], rel=1e-5)  # sharded validation loss
    # ... and training moved the parameters (the comparison above is not between two untouched models).
    assert all(s["grad_norm"] > 0 for s in steps_one) and steps_one[0]["loss"] != steps_one[-1]["loss"]


# ---------------------------------------------------------------------------------------------------------
# Timeouts: train.dist_timeout_s for the collectives, a long wait for rank-0-first loading


def _wait_for(path: Path, what: str, deadline_s: float = 120.0) -> None:
    """Poll until `path` exists; the deadline only turns a hang into a failure, it orders nothing."""
    import time

    give_up = time.monotonic() + deadline_s
    while not path.exists():
        if time.monotonic() > give_up:
            raise TimeoutError(f"gave up after {deadline_s:.0f}s waiting for {what} ({path})")
        time.sleep(0.02)


COLLECTIVE_TIMEOUT_S = 2.0


def _timeout_worker(rank: int, world: int, port: int, out: str) -> None:
    try:
        _env(rank, world, port)
        import time

        from harness.parallel.distributed import finalize, init_distributed

        out = Path(out)
        d = init_distributed(timeout_s=COLLECTIVE_TIMEOUT_S, load_timeout_s=120.0)
        if rank == 1:
            (out / "waiting1").touch()  # next: main_first's waits for rank 0's load
        with d.main_first():
            if d.main:
                # A slow model load, begun once rank 1 is waiting for it (the marker orders the two), lasting three
                # times the collectives' timeout: the duration is what is tested, not a synchronisation.
                _wait_for(out / "waiting1", "rank 1 to wait for the load")
                time.sleep(3 * COLLECTIVE_TIMEOUT_S)
        total = float(d.sum(torch.ones(1))[0])  # the group still works afterwards
        error = ""
        if rank == 1:  # a barrier rank 0 never joins: the configured timeout ends it
            try:
                d.barrier()
            except Exception as e:  # noqa: BLE001 - the error is the result
                error = type(e).__name__
            (out / "timeout1.txt").write_text(f"{total} {error}")
        else:
            # Stay in the group until rank 1's barrier has ended (it writes its result then): rank 1's error is the
            # timeout's, never rank 0 leaving.
            _wait_for(out / "timeout1.txt", "rank 1's barrier to time out")
            (out / "timeout0.txt").write_text(f"{total} {error}")
        finalize()
    except BaseException:
        (Path(out) / f"error{rank}.txt").write_text(traceback.format_exc())
        raise


def test_rank_zero_first_loading_outlasts_the_collective_timeout(tmp_path):
    _launch(_timeout_worker, 2, str(tmp_path))
    assert (tmp_path / "timeout0.txt").read_text() == "2.0 "
    total, error = (tmp_path / "timeout1.txt").read_text().split(" ")
    assert total == "2.0" and error  # rank 1 outlived rank 0's load, and the 2 s timeout is in force


def test_timeouts_must_be_positive(monkeypatch):
    from harness.parallel.distributed import init_distributed

    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"train.dist_timeout_s = 0.0"):
        init_distributed(timeout_s=0.0)
