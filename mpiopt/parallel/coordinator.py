"""The coordinator's MPI loop around the pure Scheduler (world rank 0).

One dispatch table maps message tags to scheduler events. Between messages the loop
asks ahead (prefetch) and otherwise sleeps with a growing backoff, so it costs well under
5% of a core while the groups train.
"""
from __future__ import annotations

import signal
import threading

from mpiopt.parallel.protocol import Tag
from mpiopt.parallel.scheduler import Answer, Dispatch, StopGroup
from mpiopt.parallel.waiting import Backoff, probe


class StopFlag:
    """Set by SIGINT/SIGTERM; the loop looks at it between messages."""

    def __init__(self):
        self.event = threading.Event()
        self.signum: int | None = None

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handler)

    def _handler(self, signum, frame) -> None:
        self.signum = signum
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()


class Coordinator:
    def __init__(self, world, topology, scheduler, stop_flag: StopFlag | None = None):
        self.world, self.topo, self.sched = world, topology, scheduler
        self.stop_flag = stop_flag or StopFlag()
        self.handlers = {
            Tag.RESULT: self.sched.on_result,
            Tag.REPORT: self.sched.on_report,
        }

    def run(self) -> bool:
        """Run until the study is done. Returns False when a signal cut busy groups off."""
        self.execute(self.sched.start())
        backoff = Backoff()
        while not self.sched.done:
            if self.stop_flag.is_set():
                busy = bool(self.sched.running)
                self.execute(self.sched.interrupt())
                return not busy
            status = probe(self.world)
            if status is not None:
                tag = status.Get_tag()
                msg = self.world.recv(source=status.Get_source(), tag=tag)
                group = self.topo.group_of(status.Get_source())
                self.execute(self.handlers[Tag(tag)](group, msg))
                backoff.reset()
            elif not self.sched.prefetch():
                self.execute(self.sched.tick())
                backoff.sleep()
        return True

    def execute(self, actions) -> None:
        for action in actions:
            leader = self.topo.leader(action.group)
            if isinstance(action, Dispatch):
                self.world.send(action.trial, dest=leader, tag=Tag.TRIAL)
            elif isinstance(action, Answer):
                self.world.send(action.decision, dest=leader, tag=Tag.DECISION)
            elif isinstance(action, StopGroup):
                self.world.send(None, dest=leader, tag=Tag.STOP)
