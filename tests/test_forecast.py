"""The coordinator's forecast of the next result a group waits on (pure, no MPI)."""
from __future__ import annotations

import pytest

from mpiopt.parallel.forecast import EAGER_POLL_S, LEAD_S, WINDOW_S, Forecast


def always(group, trial_id):
    return True


def test_nothing_is_expected_before_a_duration_is_known():
    f = Forecast()
    f.began(0, 1, at=0.0)
    assert f.due_in(0.4, always) is None
    assert f.sleep_s(0.4, always, backoff_s=5e-3) == 5e-3


def test_a_result_is_expected_at_its_start_plus_the_median_duration():
    f = Forecast()
    for seconds in (0.5, 0.52, 0.9):             # median 0.52: one slow trial does not move it
        f.ended(seconds)
    f.began(0, 7, at=10.0)
    f.began(1, 8, at=10.1)
    assert f.due_in(10.0, always) == pytest.approx(0.52)
    # long before: the backoff's sleep, but never past the window's start
    assert f.sleep_s(10.0, always, backoff_s=5e-3) == 5e-3
    assert f.sleep_s(10.518, always, backoff_s=5e-3) == pytest.approx(0.52 - 0.518 - LEAD_S)
    # inside the window: fine polling, until WINDOW_S after the expected end
    assert f.sleep_s(10.52, always, backoff_s=5e-3) == EAGER_POLL_S
    assert f.sleep_s(10.52 + WINDOW_S * 0.9, always, backoff_s=5e-3) == EAGER_POLL_S
    # past trial 7's window: the next one (trial 8, started later) is expected
    assert f.due_in(10.52 + WINDOW_S * 1.1, always) == pytest.approx(0.1 - WINDOW_S * 1.1)


def test_groups_that_will_not_wait_are_not_expected():
    f = Forecast()
    f.ended(1.0)
    f.began(0, 1, at=0.0)      # its group holds a trial sent ahead: no dispatch is waited on
    f.began(1, 2, at=0.5)
    ahead = {0}
    waits = lambda group, trial_id: group not in ahead   # noqa: E731
    assert f.due_in(0.9, waits) == pytest.approx(0.6)
    ahead.add(1)
    assert f.due_in(0.9, waits) is None
    assert not f.starts                          # forgotten once seen not to matter
