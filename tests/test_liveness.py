"""The coordinator's view of heartbeats (mpiopt.parallel.liveness.Liveness): pure, no MPI.
tests/test_chaos.py stops real ranks and a real coordinator."""
from mpiopt.parallel.liveness import Liveness, period_for


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_rank_is_silent_only_past_the_limit_and_a_beat_or_bye_clears_it():
    clock = Clock()
    live = Liveness([1, 2, 3], limit=10.0, clock=clock)
    clock.now += 9.0
    assert live.silent() == []
    live.heard(2)
    live.forget(3)                  # said BYE: no longer watched
    clock.now += 2.0
    assert live.silent() == [1]
    live.heard(1)
    live.heard(7)                   # a rank not watched is ignored
    clock.now += 0.5
    assert live.silent() == []      # looked at once a second at most: not yet again
    clock.now += 9.0
    assert live.silent() == [2]


def test_many_beats_fit_in_the_limit():
    assert period_for(60.0) == 5.0 and period_for(3.0) == 0.25
