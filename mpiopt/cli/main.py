"""`mpiopt` entry point: a registry of subcommands, each a module with register(subparsers).

Every MpioptError becomes one line on stderr and exit status 2; no traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# Each module defines register(subparsers); its parsers set `func(args) -> int`.
COMMAND_MODULES = (
    "mpiopt.cli.validate",
    "mpiopt.cli.run",
    "mpiopt.cli.train",
    "mpiopt.cli.query",
    "mpiopt.cli.report",
    "mpiopt.cli.db",
    "mpiopt.cli.study",
    "mpiopt.cli.model",
    "mpiopt.cli.dashboard",
)


class _Parser(argparse.ArgumentParser):
    """Usage, help and errors from rank 0 only: under `mpirun -n 64` every rank parses the
    command line, and a mistyped option printed its error 64 times (subcommands' parsers
    are made of this class too). Every rank still exits with argparse's status."""

    def _print_message(self, message, file=None):
        if _world_rank() == 0:
            super()._print_message(message, file)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mpiopt",
        description="Distributed hyperparameter optimization under MPI.",
    )
    from mpiopt import __version__

    parser.add_argument("--version", action="version", version=f"mpiopt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def run() -> None:
    """The `mpiopt` program (its console entry): main(), then an exit that no thread or
    exit function a trial left can hold up (mpiopt.run.leftover_threads)."""
    import traceback

    try:
        code = main()
    except SystemExit as exc:          # (argparse's usage errors, --help, --version)
        code = exc.code
    except KeyboardInterrupt:          # (before main could hold signals: see die_of_sigint)
        from mpiopt.run.leftover_threads import die_of_sigint

        die_of_sigint()
    except BaseException:              # (a bug of mpiopt's: its traceback, then the same
        traceback.print_exc()          # bounded exit, not Python's unbounded join)
        code = 1
    from mpiopt.run.leftover_threads import exit_bounded

    exit_bounded(code)


def main(argv: list[str] | None = None) -> int:
    from mpiopt.run import startup_signals

    startup_signals.hold()      # a Ctrl-C in a rank's start waits for an orderly end
    try:
        return _main(argv)
    finally:
        startup_signals.restore()


def _tolerant_output() -> None:
    """Output whose encoding lacks a character mpiopt prints (an ASCII locale, or
    PYTHONIOENCODING=ascii: the ± of a cross-validated value, the × of a report line)
    shows '?' there instead of ending the command with a traceback."""
    try:
        sys.stdout.reconfigure(errors="replace")
    except (AttributeError, ValueError):
        pass                        # (not a text stream of its own: a test's capture)


def _main(argv: list[str] | None) -> int:
    from mpiopt import knobs
    from mpiopt.errors import MpioptError, SpecError, TopologyError
    from mpiopt.run import startup_signals

    _tolerant_output()
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "starts_a_run", False):
            startup_signals.release()      # (a run's ranks release them: mpiopt.run.launch)
    except KeyboardInterrupt:
        return _interrupted()
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        if not getattr(args, "starts_a_run", False):
            knobs.check_all()       # (a run checks them in its start-up, on every rank)
        code = int(args.func(args) or 0)
        if getattr(args, "starts_a_run", False):
            _exit_undisturbed()
        return code
    except MpioptError as exc:
        # (a spec's, a layout's or a variable's error is the same on every rank: said once)
        if not (isinstance(exc, (SpecError, TopologyError, knobs.KnobError))
                and _world_rank() != 0):
            print(f"mpiopt: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # `mpiopt trials X | head`
        return 0
    except KeyboardInterrupt:  # Ctrl-C before a study started (or in a query)
        return _interrupted(getattr(args, "starts_a_run", False))


# A run's start-up opens the study with signals held and installs its stop flag in the same
# breath (mpiopt.run.startup), so an interruption that reaches here came before the
# study was opened: a line that said "interrupted" alone left the user to guess whether to
# resume (a --resume of a study never created is refused)
_BEFORE_THE_STUDY = ("interrupted during the start-up, before the study was opened: nothing "
                     "was written; to run it, give the same command again")


def _interrupted(a_run: bool = False) -> int:
    if _world_rank() == 0:
        print(f"mpiopt: {_BEFORE_THE_STUDY if a_run else 'interrupted'}", file=sys.stderr)
    return 130


def _exit_undisturbed() -> None:
    """A run's study is closed, its closing lines are out: a stop signal from here on (a
    Ctrl-C at the summary, the batch system's SIGTERM as the job ends) has nothing left to
    stop, and it must not kill rank 0 in its last moments (MPI_Finalize, the interpreter's
    exit), which would end a COMPLETE study's job with status 15 or 2 and no line (how
    often: benchmarks/results/startup.md). SIG_IGN, not a handler that
    does nothing: the interpreter's exit puts Python handlers back to SIG_DFL before
    mpi4py's MPI_Finalize runs, and there the signal killed the group ranks. An exit that
    hangs is still ended by leftover_threads' alarm (SIGALRM), and a second Ctrl-C makes
    mpiexec kill the job."""
    import signal

    from mpiopt.objective.processes import STOP_SIGNALS

    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def _world_rank() -> int:
    """This process's MPI rank from the launcher's environment (no MPI import)."""
    from mpiopt.run.launcher import world_rank

    return world_rank()
