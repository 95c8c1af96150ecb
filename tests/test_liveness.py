"""The coordinator's view of heartbeats (mpiopt.parallel.liveness.Liveness) and a leader's
view of the coordinator's silence (CoordinatorSilence): pure, no MPI.
tests/test_chaos.py stops real ranks and a real coordinator."""
import pytest

from mpiopt.parallel.liveness import STOPPED_LIMITS, CoordinatorSilence, Liveness, period_for


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def awake(clock, live, seconds):
    """Time passing for a rank 0 that runs: its heartbeat thread looks every beat."""
    step = period_for(live.limit)
    end = clock.now + seconds
    while clock.now + step < end:
        clock.now += step
        live.look()
    clock.now = end


def test_a_rank_is_silent_only_past_the_limit_and_a_beat_or_bye_clears_it():
    clock = Clock()
    live = Liveness([1, 2, 3], limit=10.0, clock=clock)
    awake(clock, live, 9.0)
    assert live.silent() == []
    live.heard(2)
    live.forget(3)                  # said BYE: no longer watched
    awake(clock, live, 2.0)
    assert live.silent() == [1]
    live.heard(1)
    live.heard(7)                   # a rank not watched is ignored
    awake(clock, live, 0.5)
    assert live.silent() == []      # looked at once a second at most: not yet again
    awake(clock, live, 9.0)
    assert live.silent() == [2]


def test_a_silence_that_was_rank_0s_own_gives_every_rank_a_fresh_limit():
    """Rank 0 stopped for a minute (SIGSTOP, a suspended VM) and continued: neither its
    thread nor its loop looked meanwhile, so the ranks' silence was its own."""
    clock = Clock()
    live = Liveness([1, 2], limit=10.0, clock=clock)
    awake(clock, live, 5.0)
    live.heard(1)
    clock.now += 60.0               # frozen: no look at all
    assert live.silent() == []
    awake(clock, live, 9.0)
    assert live.silent() == []
    awake(clock, live, 2.0)         # awake past the limit: silent for real now
    assert live.silent() == [1, 2]


def test_many_beats_fit_in_the_limit():
    assert period_for(60.0) == 5.0 and period_for(3.0) == 0.25


def test_a_coordinator_seen_stopped_then_running_gets_a_fresh_limit_for_its_first_beat():
    """SIGSTOP of rank 0 past the limit, then SIGCONT: the leader that looks between the
    SIGCONT and rank 0's first beat (its thread just woke) found it silent and no longer
    stopped, and ended a healthy job (test_faults, CI). Continued, it gets a fresh limit."""
    clock, state = Clock(), {"stopped": False}
    silence = CoordinatorSilence(3.0, lambda: state["stopped"], clock=clock)
    clock.now += 1.0
    assert silence.over() is None
    state["stopped"] = True
    clock.now += 3.5
    assert silence.over() is None               # stopped on this host: SIGCONT may follow
    state["stopped"] = False                    # continued; its beat not here yet
    clock.now += 3.0
    assert silence.over() is None
    clock.now += 2.9
    assert silence.over() is None
    clock.now += 0.2                            # a limit since it ran again, and no beat
    assert silence.over() == pytest.approx(3.1)


def test_a_coordinator_silent_while_running_or_stopped_too_long_ends_the_job():
    clock, state = Clock(), {"stopped": False}
    silence = CoordinatorSilence(3.0, lambda: state["stopped"], clock=clock)
    clock.now += 3.1
    assert silence.over() == pytest.approx(3.1)  # never seen stopped: dead or stuck
    silence.heard()
    state["stopped"] = True
    clock.now += 3.0 * STOPPED_LIMITS
    assert silence.over() is None
    clock.now += 0.1
    assert silence.over() == pytest.approx(3.0 * STOPPED_LIMITS + 0.1)


def test_a_coordinator_stopped_for_less_than_the_limit_is_known_as_continued_too():
    """Stopped for most of the limit, then continued, its first beat late: the silence
    passes the limit after the SIGCONT, and the stop was seen before it did."""
    clock, state = Clock(), {"stopped": True}
    silence = CoordinatorSilence(3.0, lambda: state["stopped"], clock=clock)
    clock.now += 2.5
    assert silence.over() is None
    state["stopped"] = False
    clock.now += 1.0                            # 3.5 s silent, running, no beat yet
    assert silence.over() is None
    clock.now += 3.1
    assert silence.over() == pytest.approx(3.1)
