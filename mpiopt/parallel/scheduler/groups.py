"""Each group's state, one value per group, and every change of it in one place.

A group waits for work (IDLE), runs a trial (RUNNING: the Running record is held here;
the next trial sent ahead to it is AskAhead's, ahead.py), has ended a trial whose result
is being written (FINISHING: it joins the idle ones once the result is on record, or
before, where its next trial leaves first: results.py), was sent STOP at the study's end
(STOPPED), or ran a trial that a stop signal wrote INTERRUPTED while it ran (LET_GO:
nothing more is taken from it; the shell's wind-down cancels it).

The groups that wait (IDLE and STOPPED) also keep an order, the order they became idle
in: work goes to the longest waiting first, so a group freed later does not jump the
queue. The state cannot hold that order, so it is kept beside it, changed only by the
same transitions. A stopped group keeps its place there: a stopped group counts as idle
to the rest of the machine (its leader has left the loop; no work is planned once the
study stops).

Which groups were given up (stuck in a trial past its timeout: the wind-down does not
wait for their ranks) is not one of these states: such a group goes RUNNING ->
FINISHING -> IDLE -> STOPPED like any other, and is STOPPED too, so its heartbeats end.
"""
from __future__ import annotations

from enum import Enum


class GroupState(Enum):
    IDLE = "idle"
    RUNNING = "running"
    FINISHING = "finishing"
    STOPPED = "stopped"
    LET_GO = "let go"


WAITING = (GroupState.IDLE, GroupState.STOPPED)     # the states that keep a queue place


class Groups:
    """The groups' states, their running trials and the idle queue (module docstring)."""

    def __init__(self, n_groups: int):
        self.state = [GroupState.IDLE] * n_groups
        self.running: dict = {}                      # group -> its Running, while RUNNING
        self._queue: dict[int, None] = dict.fromkeys(range(n_groups))   # IDLE and STOPPED

    @property
    def idle(self) -> list[int]:
        """The waiting groups (IDLE and STOPPED), longest waiting first."""
        return list(self._queue)

    @property
    def any_idle(self) -> bool:
        return bool(self._queue)

    def n_idle(self) -> int:
        return len(self._queue)

    def first_idle(self) -> int:
        """The group waiting longest (there must be one)."""
        return next(iter(self._queue))

    @property
    def stopped(self) -> set[int]:
        return {g for g, s in enumerate(self.state) if s is GroupState.STOPPED}

    def n_stopped(self) -> int:
        return self.state.count(GroupState.STOPPED)

    def begin(self, group: int, run) -> None:
        """A waiting group starts `run` (raises where the group does not wait: a bug)."""
        if self.state[group] not in WAITING:
            raise ValueError(f"group {group} is {self.state[group].value}, not idle")
        del self._queue[group]
        self.state[group] = GroupState.RUNNING
        self.running[group] = run

    def promote(self, group: int, run) -> None:
        """A group whose trial ended runs the one sent ahead to it now."""
        self.state[group] = GroupState.RUNNING
        self.running[group] = run

    def end(self, group: int):
        """The group's trial ended: its Running, and the group FINISHING."""
        self.state[group] = GroupState.FINISHING
        return self.running.pop(group)

    def free(self, group: int) -> None:
        """A FINISHING group joins the end of the idle queue (once; others stay as they are)."""
        if self.state[group] is GroupState.FINISHING:
            self.state[group] = GroupState.IDLE
            self._queue[group] = None

    def stop_idle(self) -> list[int]:
        """The IDLE groups become STOPPED; returns them, in queue order."""
        fresh = [g for g in self._queue if self.state[g] is GroupState.IDLE]
        for g in fresh:
            self.state[g] = GroupState.STOPPED
        return fresh

    def let_go(self) -> list:
        """Every running group's trial is written off (a stop signal): returns the runs."""
        runs = list(self.running.values())
        for g in self.running:
            self.state[g] = GroupState.LET_GO
        self.running.clear()
        return runs

    def violations(self) -> list[str]:
        """The queue holds exactly the waiting groups; a Running exactly for RUNNING ones."""
        out = []
        waiting = {g for g, s in enumerate(self.state) if s in WAITING}
        if set(self._queue) != waiting:
            out.append(f"idle queue {list(self._queue)} but waiting groups {sorted(waiting)}")
        busy = {g for g, s in enumerate(self.state) if s is GroupState.RUNNING}
        if set(self.running) != busy:
            out.append(f"groups with a running trial {sorted(self.running)} but RUNNING "
                       f"groups {sorted(busy)}")
        return out
