"""A torch model on three ranks under the venv's mpiexec, checked against one rank.

One mpiexec run (torch is imported once per rank) makes every check and writes its
results as JSON; the single-rank references run in the pytest process. Checked: allreduce
follows the single-rank trajectory (the same weights up to float rounding), also summed in
one bucket per tensor (a module with a parameter its loss never reaches among them), each
bucket started from inside backward and in order; ranks whose gradients raised at
different points of backward leave the communicator in step for the next training; every
training mode (allreduce, downpour, easgd) trains through the flat buffers; and in every
mode a trial stopped at epoch 2 continues at epoch 3 from its checkpoint, allreduce with
the value of an uninterrupted run. Run directly, this file is the MPI worker.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conftest  # noqa: E402
from conftest import BIN  # noqa: E402
from test_torch_training import write_torch_case  # noqa: E402

MODES = ("allreduce", "downpour", "easgd")
PARAMS = {"width": 8}


def allreduce_weights(comm, folder: Path, build="build_plain", buckets=None,
                      watch=None) -> np.ndarray:
    """Weights after two epochs of allreduce steps over fixed global batches of 25 samples
    (110 samples: every batch splits unevenly over the ranks, the last one is short).
    buckets: (bucket bytes, first bucket's bytes); watch(algorithm) before training."""
    from mpiopt.spec import load_spec
    from mpiopt.refs import load_callable
    from mpiopt.training import frameworks
    from mpiopt.training.allreduce import AllreduceSGD

    spec = load_spec(folder / "spec.yaml")
    x, y = load_callable(f"{folder / 'tiny_torch.py'}:load")()
    built = load_callable(f"{folder / 'tiny_torch.py'}:build_plain") if build == "build_plain" \
        else globals()[build]
    model = frameworks.build_model(built, PARAMS, 1, spec, None, x, y)
    sizes = dict(zip(("bucket_bytes", "first_bucket_bytes"), buckets or ()))
    algorithm = AllreduceSGD(model, comm, SimpleNamespace(batch_size=25), **sizes)
    if watch:
        watch(algorithm)
    algorithm.start()
    for epoch in range(2):
        algorithm.train_epoch(x[:110], y[:110], np.random.default_rng(epoch).permutation(110))
    return model.get_weights()


def build_unused(params):
    """Three layers, the middle one never used: the loss reaches no parameter of it."""
    from torch import nn

    class Skips(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.unused, self.last = nn.Linear(6, 8), nn.Linear(8, 8), nn.Linear(8, 3)

        def forward(self, x):
            return self.last(self.first(x).tanh())

    return Skips()


# every tensor its own bucket (the smallest is 3 floats)
ONE_PER_TENSOR = (4, 4)


def watch_order(events: list):
    """Records the exchange's hand-overs ("ready", k) and bucket starts ("start", j)."""
    def watch(algorithm):
        exchange = algorithm.exchange
        ready, start = exchange.ready, exchange._start

        def logged_ready(k):
            events.append(("ready", k))
            ready(k)

        def logged_start():
            events.append(("start", exchange.started))
            start()
        exchange.ready, exchange._start = logged_ready, logged_start
    return watch


def fail_in_backward(rank: int):
    """Rank r raises at its hand-over of tensor 3 - r, in the first step only: each rank
    has started another number of buckets when it raises."""
    def watch(algorithm):
        exchange, ready = algorithm.exchange, algorithm.exchange.ready

        def failing(k):
            if k == 3 - rank and not exchange.failed:
                exchange.failed = True
                raise RuntimeError(f"rank {rank} fails")
            ready(k)
        exchange.failed, exchange.ready = False, failing
    return watch


def failures_leave_the_group_in_step(comm, folder: Path) -> dict:
    try:
        allreduce_weights(comm, folder, buckets=ONE_PER_TENSOR,
                          watch=fail_in_backward(comm.Get_rank()))
        raised = None
    except RuntimeError as exc:
        raised = str(exc)
    return {"raised": raised, "after": allreduce_weights(comm, folder).tolist()}


# a peer slower than the group wait by far: the wait must end first whatever the load
SLOW_PEER_S, GROUP_WAIT_S = 6.0, "1"


def fail_late_on_slow_peers(rank: int, gave_up: Path, saw: list):
    """Rank 0 raises at its first hand-over; the others stay in backward SLOW_PEER_S, note
    whether rank 0 had given up on them by then, and raise too."""
    def watch(algorithm):
        exchange, ready = algorithm.exchange, algorithm.exchange.ready

        def slow(k):
            if not exchange.failed:
                exchange.failed = True
                if rank == 0:
                    raise RuntimeError("rank 0 fails")
                time.sleep(SLOW_PEER_S)
                saw.append(gave_up.exists())
                raise RuntimeError(f"rank {rank} fails late")
            ready(k)
        exchange.failed, exchange.ready = False, slow
    return watch


def a_failed_rank_waits_for_slow_peers_only_the_group_wait(comm, folder: Path) -> dict:
    gave_up, saw, raised = folder / "gave-up", [], None
    os.environ["MPIOPT_GROUP_WAIT"] = GROUP_WAIT_S
    try:
        allreduce_weights(comm, folder, buckets=ONE_PER_TENSOR,
                          watch=fail_late_on_slow_peers(comm.Get_rank(), gave_up, saw))
    except RuntimeError as exc:
        raised = str(exc)
        if comm.Get_rank() == 0:
            gave_up.touch()
    finally:
        del os.environ["MPIOPT_GROUP_WAIT"]
    return {"raised": raised, "saw": comm.gather(saw, root=0),
            "after": allreduce_weights(comm, folder).tolist()}


def through_torch(fn, group_wait: str | None = None):
    """fn() with MPIOPT_TORCH_COLLECTIVES=torch (gloo: these ranks have no GPU), the
    process group closed after, as a trial's end does; (its result or error, the
    all_reduce calls this rank made)."""
    import torch.distributed as dist

    from mpiopt.training import torch_collectives

    calls, all_reduce = [], dist.all_reduce

    def counted(*args, **kwargs):
        calls.append(1)
        return all_reduce(*args, **kwargs)
    os.environ["MPIOPT_TORCH_COLLECTIVES"] = "torch"
    if group_wait:
        os.environ["MPIOPT_GROUP_WAIT"] = group_wait
    dist.all_reduce = counted
    try:
        out = fn()
    except RuntimeError as exc:
        out = exc
    finally:
        dist.all_reduce = all_reduce
        os.environ.pop("MPIOPT_TORCH_COLLECTIVES")
        os.environ.pop("MPIOPT_GROUP_WAIT", None)
        torch_collectives.close()
    return out, len(calls)


def torch_distributed_sums(comm, folder: Path) -> dict:
    weights, calls = through_torch(lambda: allreduce_weights(comm, folder, "build_unused",
                                                             ONE_PER_TENSOR))
    return {"weights": weights.tolist(), "calls": comm.gather(calls, root=0)}


def stuck_peer(rank: int, woke: Path, saw: list):
    """Rank 1 stays in its first hand-over SLOW_PEER_S, then notes whether its peers had
    raised by then and goes on (its sums then have no peer)."""
    def watch(algorithm):
        exchange, ready = algorithm.exchange, algorithm.exchange.ready

        def slow(k):
            if rank == 1 and not exchange.failed:
                exchange.failed = True
                time.sleep(SLOW_PEER_S)
                saw.append(woke.exists())
            ready(k)
        exchange.failed, exchange.ready = False, slow
    return watch


def a_stuck_peer_ends_torch_sums_after_the_group_wait(comm, folder: Path) -> dict:
    woke, saw = folder / "peers-raised", []
    out, _ = through_torch(lambda: allreduce_weights(comm, folder, buckets=ONE_PER_TENSOR,
                                                     watch=stuck_peer(comm.Get_rank(), woke, saw)),
                           group_wait=GROUP_WAIT_S)
    if comm.Get_rank() != 1 and isinstance(out, RuntimeError):
        woke.touch()
    return {"raised": comm.gather(isinstance(out, RuntimeError), root=0),
            "saw": comm.gather(saw, root=0),
            "after": allreduce_weights(comm, folder).tolist()}


def _run(comm, spec, folder, report=None):
    from mpiopt.artifacts import TrialArtifacts
    from mpiopt.training import run_training

    art = TrialArtifacts(checkpoints=str(folder / "ck"), every=1)
    return run_training(spec, PARAMS, comm, 7, report=report, artifacts=art)


def stopped_and_resumed(comm, path: Path, folder: Path, mode: str) -> dict:
    from mpiopt.errors import TrialCancelled
    from mpiopt.spec import load_spec

    spec = load_spec(path, {"training.mode": mode, "training.easgd_period": 2})
    plain = _run(comm, spec, folder / f"{mode}-plain") if mode == "allreduce" else None
    seen = []

    def report(epoch, value, fold):
        seen.append(epoch)
        return TrialCancelled("stop") if epoch == 2 and len(seen) == 2 else True

    try:
        _run(comm, spec, folder / mode, report)
        stopped = False
    except TrialCancelled:
        stopped = True
    resumed = _run(comm, spec, folder / mode, report)
    return {"stopped": stopped, "seen": seen, "plain": plain and plain["value"],
            "resumed": resumed["value"]}


def worker(out: Path, folder: Path) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 0:     # one writer: a rank reading a half-written model file fails
        write_torch_case(folder / "case", training={"epochs": 4, "batch_size": 32})
    comm.Barrier()
    path = folder / "case" / "spec.yaml"
    events: list = []
    results = {"weights": allreduce_weights(comm, path.parent).tolist(),
               "buckets": allreduce_weights(comm, path.parent, "build_unused", ONE_PER_TENSOR,
                                            watch_order(events)).tolist(),
               "one bucket": allreduce_weights(comm, path.parent, "build_unused").tolist(),
               "failures": failures_leave_the_group_in_step(comm, path.parent),
               "slow": a_failed_rank_waits_for_slow_peers_only_the_group_wait(comm, path.parent),
               "torch": torch_distributed_sums(comm, path.parent),
               "stuck": a_stuck_peer_ends_torch_sums_after_the_group_wait(comm, path.parent)}
    results["events"] = comm.gather(events[:12], root=0)     # the first step's, every rank's
    for mode in MODES:
        results[mode] = stopped_and_resumed(comm, path, folder, mode)
    if comm.Get_rank() == 0:
        out.write_text(json.dumps(results))


@pytest.fixture(scope="module")
def three_ranks(tmp_path_factory):
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("torch3")
    out = folder / "out.json"
    cmd = [str(BIN / "mpiexec"), "-n", "3", sys.executable, __file__, str(out), str(folder)]
    proc = subprocess.run(cmd, env=conftest.subprocess_env(), capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return json.loads(out.read_text()), folder


def test_the_wait_for_a_steps_sums_never_sleeps_past_a_tenth_of_a_millisecond(monkeypatch):
    """The peer a step waits for is due within a fraction of a step: the wait keeps
    testing every 0.1 ms at most however long it lasts (a sum arrived during a long sleep
    would hold up both ranks' next step)."""
    from mpi4py import MPI

    from mpiopt import backoff
    from mpiopt.training.allreduce import Exchange

    exchange = Exchange(MPI.COMM_SELF, np.zeros(2, np.float32), [(0, 2, ())])
    inbox, sleeps = np.zeros(1), []
    exchange.requests = [MPI.COMM_SELF.Irecv(inbox, source=0, tag=60)]

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 40:            # the peer's part arrives after 40 sleeps
            MPI.COMM_SELF.Send(np.ones(1), dest=0, tag=60)

    monkeypatch.setattr(backoff.time, "sleep", sleep)
    exchange.wait()
    assert len(sleeps) == 40 and inbox[0] == 1.0
    assert max(sleeps) <= 1e-4, max(sleeps)


def test_allreduce_on_three_ranks_follows_the_single_rank_trajectory(three_ranks):
    from mpi4py import MPI

    results, folder = three_ranks
    single = allreduce_weights(MPI.COMM_SELF, folder / "case")
    np.testing.assert_allclose(results["weights"], single, rtol=1e-4, atol=1e-5)


def test_allreduce_in_buckets_follows_the_single_rank_trajectory(three_ranks):
    from mpi4py import MPI

    results, folder = three_ranks
    single = allreduce_weights(MPI.COMM_SELF, folder / "case", "build_unused")
    np.testing.assert_allclose(results["buckets"], single, rtol=1e-4, atol=1e-5)


def test_one_bucket_taken_in_one_call_after_backward_follows_the_single_rank_trajectory(
        three_ranks):
    """A model under the first bucket's size is summed as one bucket, its gradient taken
    whole after backward (no hook per tensor), the unused layer's as zeros."""
    from mpi4py import MPI

    results, folder = three_ranks
    single = allreduce_weights(MPI.COMM_SELF, folder / "case", "build_unused")
    np.testing.assert_allclose(results["one bucket"], single, rtol=1e-4, atol=1e-5)


def test_each_bucket_starts_during_backward_in_its_order(three_ranks):
    """Buckets of one tensor each (bucket j: tensor 5 - j), backward finishing the last
    layer first: buckets 0 and 1 start as soon as their tensors are handed over, before
    backward hands the next one. The unused layer's tensors (2 and 3) are handed over
    after backward, as zeros; bucket 2 (tensor 3) waits for its own, and buckets 3 to 5,
    ready before, start after it, in order."""
    expected = [("ready", 5), ("start", 0), ("ready", 4), ("start", 1), ("ready", 1),
                ("ready", 0), ("ready", 2), ("ready", 3), ("start", 2), ("start", 3),
                ("start", 4), ("start", 5)]
    for events in three_ranks[0]["events"]:
        assert [tuple(e) for e in events] == expected


def test_ranks_that_raised_in_backward_leave_the_group_in_step(three_ranks):
    """Every rank raised its own error, having started another number of buckets; the
    next training on the same communicator is the single-rank trajectory."""
    from mpi4py import MPI

    results, folder = three_ranks
    assert results["failures"]["raised"] == "rank 0 fails"
    single = allreduce_weights(MPI.COMM_SELF, folder / "case")
    np.testing.assert_allclose(results["failures"]["after"], single, rtol=1e-4, atol=1e-5)


def test_a_rank_that_raised_waits_for_slow_peers_only_the_group_wait(three_ranks):
    """Rank 0 raised in backward while its peers stayed in theirs far longer than
    MPIOPT_GROUP_WAIT: it gave up on the step's sums before they woke (it does not wait on
    a peer that may be stuck: parallel/together ends such a group), and once they raised
    too, the group is in step for its next training."""
    from mpi4py import MPI

    results, folder = three_ranks
    slow = results["slow"]
    assert slow["raised"] == "rank 0 fails"
    assert slow["saw"] == [[], [True], [True]]
    single = allreduce_weights(MPI.COMM_SELF, folder / "case")
    np.testing.assert_allclose(slow["after"], single, rtol=1e-4, atol=1e-5)


def test_torch_distributed_sums_follow_the_single_rank_trajectory(three_ranks):
    """MPIOPT_TORCH_COLLECTIVES=torch: each bucket (one per tensor, 6) summed by
    torch.distributed's all_reduce (gloo) from backward's hooks, every step of the 10
    (two epochs of 5), on every rank: the single-rank trajectory, as MPI's sums."""
    from mpi4py import MPI

    results, folder = three_ranks
    assert results["torch"]["calls"] == [60, 60, 60]
    single = allreduce_weights(MPI.COMM_SELF, folder / "case", "build_unused")
    np.testing.assert_allclose(results["torch"]["weights"], single, rtol=1e-4, atol=1e-5)


def test_a_peer_stuck_in_backward_ends_the_torch_sums_after_the_group_wait(three_ranks):
    """Rank 1 stayed in backward far longer than MPIOPT_GROUP_WAIT: ranks 0 and 2 raised
    before it woke (the process group's timeout is the group wait: no wait for ever), it
    raised too, and the group trains in step after."""
    from mpi4py import MPI

    results, folder = three_ranks
    stuck = results["stuck"]
    assert stuck["raised"] == [True, True, True]
    assert stuck["saw"] == [[], [True], []]
    single = allreduce_weights(MPI.COMM_SELF, folder / "case")
    np.testing.assert_allclose(stuck["after"], single, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_trains_and_continues_from_its_checkpoint(three_ranks, mode):
    r = three_ranks[0][mode]
    assert r["stopped"]
    assert r["seen"] == [1, 2, 2, 3, 4]     # 1-2, then from the checkpoint of 2: 3-4
    assert r["resumed"] > 0.6               # trained (three classes: chance is 1/3)
    if mode == "allreduce":
        assert r["resumed"] == pytest.approx(r["plain"], abs=1e-6)


if __name__ == "__main__":
    try:
        worker(Path(sys.argv[1]), Path(sys.argv[2]))
    except BaseException:        # one rank failing must end all three, not leave two waiting
        import traceback

        from mpi4py import MPI

        traceback.print_exc()
        MPI.COMM_WORLD.Abort(1)
