"""The guard that stands for MPI.COMM_WORLD inside a trial (mpiopt.objective.world_guard),
on a stand-in for mpi4py's module: no MPI needed. The real jobs are in test_chaos.py."""
import types

import pytest

from mpiopt.objective import world_guard
from mpiopt.objective.world_guard import GuardedComm, MPIInTrialError, guard_worker, world_guarded


class Comm:
    def __init__(self, rank=1, size=3):
        self.calls = []
        self._rank, self._size = rank, size

    def Get_rank(self):
        return self._rank

    def Get_size(self):
        return self._size

    def Barrier(self):
        self.calls.append("Barrier")


@pytest.fixture
def mpi(monkeypatch):
    fake = types.SimpleNamespace(Comm=Comm, COMM_WORLD=Comm(), COMM_SELF=Comm(0, 1))
    monkeypatch.setattr(world_guard, "_mpi", lambda: fake)
    return fake


def test_inside_a_trial_the_world_answers_its_rank_and_size_and_refuses_the_rest(mpi):
    real = mpi.COMM_WORLD
    module = {"comm": real, "other": Comm()}
    with world_guarded(module):
        assert isinstance(mpi.COMM_WORLD, GuardedComm) and module["comm"] is mpi.COMM_WORLD
        assert module["other"] is not mpi.COMM_WORLD, "only the world itself is swapped"
        assert (mpi.COMM_WORLD.Get_rank(), mpi.COMM_WORLD.Get_size()) == (1, 3)
        with pytest.raises(MPIInTrialError, match=r"MPI.COMM_WORLD.Barrier called inside a "
                                                  r"trial: .*`comm` argument"):
            module["comm"].Barrier()
    assert mpi.COMM_WORLD is real and module["comm"] is real, "restored after the trial"
    assert real.calls == [], "the real communicator was never called"


def test_the_world_is_restored_when_the_trial_raises_and_a_name_the_user_rebound_is_kept(mpi):
    real = mpi.COMM_WORLD
    module = {"comm": real, "mine": real}
    with pytest.raises(ValueError):
        with world_guarded(module):
            module["mine"] = "rebound by the objective"
            raise ValueError("the trial failed")
    assert mpi.COMM_WORLD is real and module["comm"] is real
    assert module["mine"] == "rebound by the objective"


def test_in_a_forked_worker_every_communicator_is_guarded_for_good(mpi):
    module = {"world": mpi.COMM_WORLD, "dup": Comm(), "n": 3}
    guard_worker(module)
    for comm in (mpi.COMM_WORLD, mpi.COMM_SELF, module["world"], module["dup"]):
        assert isinstance(comm, GuardedComm)
        with pytest.raises(MPIInTrialError, match="forked from its rank, where MPI cannot be used"):
            comm.Barrier()
    assert module["n"] == 3
    with world_guarded(module):         # a trial in the worker: already guarded, unchanged
        with pytest.raises(MPIInTrialError, match="forked"):
            mpi.COMM_WORLD.Barrier()


def test_without_mpi4py_imported_nothing_is_imported_or_changed(monkeypatch):
    monkeypatch.setattr(world_guard, "_mpi", lambda: None)
    module = {"x": 1}
    with world_guarded(module):
        pass
    guard_worker(module)
    assert module == {"x": 1}
