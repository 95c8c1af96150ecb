"""Split COMM_WORLD into the coordinator (world rank 0) and groups of group_size ranks.

Group g holds world ranks 1 + g*group_size ... (g+1)*group_size; its leader is the first.
With one process in the world there are no groups: the study runs in that process.
"""
from __future__ import annotations

from dataclasses import dataclass

from mpiopt.errors import TopologyError


@dataclass(frozen=True)
class Topology:
    world_size: int
    group_size: int
    rank: int

    @property
    def single_process(self) -> bool:
        return self.world_size == 1

    @property
    def n_groups(self) -> int:
        return 1 if self.single_process else (self.world_size - 1) // self.group_size

    @property
    def is_coordinator(self) -> bool:
        return self.rank == 0

    @property
    def group(self) -> int | None:
        """This rank's group index (None on the coordinator of a multi-process job)."""
        if self.single_process:
            return 0
        return None if self.rank == 0 else (self.rank - 1) // self.group_size

    def leader(self, group: int) -> int:
        return 1 + group * self.group_size

    def group_of(self, world_rank: int) -> int:
        return (world_rank - 1) // self.group_size

    @property
    def is_leader(self) -> bool:
        return self.group is not None and (self.single_process or self.rank == self.leader(self.group))


def check_layout(world_size: int, group_size: int) -> Topology:
    """Validate the layout; raises TopologyError listing process counts that would work."""
    if group_size < 1:
        raise TopologyError(f"resources.group_size: must be >= 1, got {group_size}")
    if world_size == 1 or (world_size - 1) % group_size == 0:
        return Topology(world_size, group_size, 0)
    good = ", ".join(str(1 + k * group_size) for k in range(1, 6))
    raise TopologyError(
        f"{world_size} processes do not split into 1 coordinator + groups of {group_size}: "
        f"use -n {good}, ... (or 1 for single-process mode), or change --group-size"
    )


def make_topology(world, group_size: int):
    """Returns (Topology, group communicator or None). Collective over world."""
    from mpi4py import MPI

    layout = check_layout(world.Get_size(), group_size)
    topo = Topology(layout.world_size, group_size, world.Get_rank())
    if topo.single_process:
        return topo, world
    color = MPI.UNDEFINED if topo.is_coordinator else topo.group
    comm = world.Split(color, key=world.Get_rank())
    return topo, (None if comm == MPI.COMM_NULL else comm)
