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
    startup_signals.hold()
    mine = lambda signum, frame: None             # noqa: E731 (a rank's own handler)
    signal.signal(signal.SIGTERM, mine)
    os.kill(os.getpid(), signal.SIGINT)
    startup_signals.restore()
    assert signal.getsignal(signal.SIGTERM) is mine
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_forget_drops_what_was_noted():
    startup_signals.hold()
    os.kill(os.getpid(), signal.SIGUSR1)
    startup_signals.forget()                       # (a group rank: its own handlers now)
    startup_signals.release()                      # nothing raised, nothing restored
    assert signal.getsignal(signal.SIGUSR1) is startup_signals._note
    for sig in startup_signals.HELD:
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)


def test_outside_the_main_thread_nothing_is_held():
    done = []
    thread = threading.Thread(target=lambda: done.append(startup_signals.hold()))
    thread.start()
    thread.join()
    assert done == [None] and signal.getsignal(signal.SIGINT) is signal.default_int_handler
