"""mpiopt.startup_signals: a signal in a rank's start is held until it can end in order."""
import os
import signal
import threading

import pytest

from mpiopt import startup_signals


@pytest.fixture(autouse=True)
def _clean():
    yield
    startup_signals.restore()
    startup_signals.forget()


def test_a_held_ctrl_c_is_noted_then_raised_once_on_release():
    before = signal.getsignal(signal.SIGINT)
    startup_signals.hold()
    os.kill(os.getpid(), signal.SIGINT)            # would raise KeyboardInterrupt here
    os.kill(os.getpid(), signal.SIGTERM)           # would end the process here
    with pytest.raises(KeyboardInterrupt):
        startup_signals.release()
    assert signal.getsignal(signal.SIGINT) is before
    startup_signals.hold()
    startup_signals.release()                      # nothing noted since: nothing raised


def test_restore_leaves_a_handler_installed_since_alone_and_acts_on_nothing():
    before = signal.getsignal(signal.SIGINT)     # (SIG_IGN where the runner started us so)
    startup_signals.hold()
    mine = lambda signum, frame: None             # noqa: E731 (a rank's own handler)
    signal.signal(signal.SIGTERM, mine)
    os.kill(os.getpid(), signal.SIGINT)
    startup_signals.restore()
    assert signal.getsignal(signal.SIGTERM) is mine
    assert signal.getsignal(signal.SIGINT) is before
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_forget_drops_what_was_noted():
    before = {sig: signal.getsignal(sig) for sig in startup_signals.HELD}
    startup_signals.hold()
    os.kill(os.getpid(), signal.SIGUSR1)
    startup_signals.forget()                       # (a group rank: its own handlers now)
    startup_signals.release()                      # nothing raised, nothing restored
    assert signal.getsignal(signal.SIGUSR1) is startup_signals._note
    for sig, handler in before.items():
        signal.signal(sig, handler)


def test_outside_the_main_thread_nothing_is_held():
    before, done = signal.getsignal(signal.SIGINT), []
    thread = threading.Thread(target=lambda: done.append(startup_signals.hold()))
    thread.start()
    thread.join()
    assert done == [None] and signal.getsignal(signal.SIGINT) is before


def test_a_signal_ignored_by_whoever_started_us_stays_ignored():
    before = signal.getsignal(signal.SIGUSR1)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)            # as nohup leaves SIGHUP
    try:
        startup_signals.hold()
        os.kill(os.getpid(), signal.SIGUSR1)
        startup_signals.release()                            # nothing raised
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGUSR1, before)
