"""mpiopt.run.startup_signals: a signal in a rank's start is held until it can end in order."""
import os
import signal
import threading

import pytest

from mpiopt.run import startup_signals


@pytest.fixture(autouse=True)
def _handlers_kept():
    """Every test starts with Python's Ctrl-C handler (a runner may have SIGINT ignored)
    and leaves the handlers as it found them."""
    before = {sig: signal.getsignal(sig) for sig in startup_signals.HELD}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    startup_signals.restore()
    startup_signals.forget()
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.fixture
def usr1():
    """SIGUSR1 with a handler that counts its calls (the handler a hold replaces)."""
    calls = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: calls.append(signum))
    yield calls


def test_a_held_ctrl_c_is_noted_then_raised_once_on_release():
    before = signal.getsignal(signal.SIGINT)
    startup_signals.hold()
    os.kill(os.getpid(), signal.SIGINT)            # would raise KeyboardInterrupt here
    os.kill(os.getpid(), signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        startup_signals.release()
    assert signal.getsignal(signal.SIGINT) is before
    startup_signals.hold()
    startup_signals.release()                      # nothing noted since: nothing raised


def test_a_held_signal_reaches_the_handler_it_would_have_reached_once(usr1):
    startup_signals.hold()
    os.kill(os.getpid(), signal.SIGUSR1)
    os.kill(os.getpid(), signal.SIGUSR1)
    assert usr1 == []
    startup_signals.release()
    assert usr1 == [signal.SIGUSR1]


def test_restore_acts_on_nothing_and_forget_leaves_the_handlers(usr1):
    startup_signals.hold()
    os.kill(os.getpid(), signal.SIGUSR1)
    startup_signals.restore()
    assert usr1 == [] and signal.getsignal(signal.SIGUSR1) is not startup_signals._main.note
    startup_signals.hold()
    os.kill(os.getpid(), signal.SIGUSR1)
    startup_signals.forget()                       # (a group rank: its own handlers now)
    startup_signals.release()
    assert usr1 == [] and signal.getsignal(signal.SIGUSR1) == startup_signals._main.note


def test_a_deferred_block_is_not_cut_in_two(usr1):
    done = []
    with startup_signals.deferred():
        os.kill(os.getpid(), signal.SIGUSR1)       # between two sends, say
        done.append("second send")
        assert usr1 == []
    assert done == ["second send"] and usr1 == [signal.SIGUSR1]
    with pytest.raises(KeyboardInterrupt), startup_signals.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        done.append("all sent")
    assert done[-1] == "all sent"


def test_a_signal_ignored_by_whoever_started_us_stays_ignored(usr1):
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)            # as nohup leaves SIGHUP
    startup_signals.hold()
    os.kill(os.getpid(), signal.SIGUSR1)
    startup_signals.release()                                # nothing raised
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN


def test_outside_the_main_thread_nothing_is_held():
    before, done = signal.getsignal(signal.SIGINT), []
    thread = threading.Thread(target=lambda: done.append(startup_signals.hold()))
    thread.start()
    thread.join()
    assert done == [None] and signal.getsignal(signal.SIGINT) is before
