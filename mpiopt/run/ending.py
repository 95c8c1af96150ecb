"""The end of a run on rank 0: the study's end recorded, the summary, one closing line
that says why and, where the study can go on, the exact command that resumes it; the exit
status; MPI_Abort where a rank is stuck and did not answer.

Exit statuses: 0 the study is complete (or FAILED by its own failures, which the line
explains); EXIT_INTERRUPTED (130) a stop signal or a closed output; EXIT_FAILED (1) any
other ending; 2 (MpioptError) a start-up that was refused before anything was written.
"""
from __future__ import annotations

import errno
import os
import sys
import time

from mpiopt.knobs import ABORT_PAUSE_S
from mpiopt.reporting.commands import after_failures, resume_command, shown_url
from mpiopt.trial import StudyStatus

EXIT_INTERRUPTED = 130
EXIT_FAILED = 1


def say(line: str) -> None:
    """The one closing line (stderr; where that is closed too, the exit status says it)."""
    try:
        print(f"mpiopt: {line}", file=sys.stderr, flush=True)
    except OSError:
        pass


def progress_line(line: str) -> None:
    print(line, flush=True)


def abort(world, code: int) -> None:
    """MPI_Abort after the closing line is out: the abort tears the launcher's I/O
    forwarding down at once, so the line gets ABORT_PAUSE_S first (it was lost under
    MPICH on a loaded machine without it). Never returns."""
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(ABORT_PAUSE_S)
    world.Abort(code)
    raise SystemExit(code)


def output_closed(exc: BaseException) -> str | None:
    """The cause to print when the progress could not be written: the reader of a pipe
    went away (`mpiopt search spec.yaml | head`: a broken pipe) or the terminal hung up (an
    I/O error). The output goes to /dev/null from here on, so that the closing (the study's
    end recorded, its lease given back) is not cut short by the next line it writes; the
    closing line still goes to stderr where that works. As a stop signal: the consumer is
    gone, so the study stops (`mpiexec` itself dies of the broken pipe, see README)."""
    if not (isinstance(exc, OSError) and exc.errno in (errno.EPIPE, errno.EIO)):
        return None                  # (the objective's and the database's are caught before)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return (f"the output was closed ({type(exc).__name__}: {exc.strerror}): the study stopped "
            "as for a stop signal, running trials recorded INTERRUPTED")


def close(run, cause: str | None, interrupted: bool, stuck: str = "") -> int:
    """Record the study's end, print the summary and the one closing line; the exit code.
    `run`: the mpiopt.run.context.RunContext; `stuck`: what the line adds where ranks did
    not stop (the caller aborts the job after it)."""
    sched, spec = run.sched, run.spec
    status, cause = _record_end(run, cause, interrupted)
    run.executor.close_searcher()
    try:
        run.progress.summary(sched, status, run.storage.kept_results)
    except OSError as exc:      # (the output closed during the summary: as in the loop)
        output_closed(exc)
    taken = run.opened.taken_away(spec.study.name) if status is not StudyStatus.COMPLETE else None
    lost = run.opened.lost      # (another job runs the study now: no resume line)
    run.storage.discard_written_ahead()      # (the run's storage is a Resilient)
    for line in run.opened.close(status, "interrupted" if status is StudyStatus.INTERRUPTED
                                 else "ended", blamed=cause if sched.blamed else None):
        progress_line(line)
    if status is StudyStatus.COMPLETE or (status is StudyStatus.FAILED and not cause):
        if status is StudyStatus.FAILED and sched.stop_reason == "failures":
            # (the cause is outside the parameters: a broken objective, a data file; the
            # failed trials run again only when asked, so say how)
            again = after_failures(spec.study.name, run.url, spec.search.algorithm,
                                   launch=run.started.launch)
            say(f"{sched.message}; {again}")
        return 0 if status is StudyStatus.COMPLETE else EXIT_FAILED
    if taken and taken[0] == "deleted":
        say(f"study '{spec.study.name}' was deleted from {shown_url(run.url)} while this "
            "job ran it (mpiopt study delete --force): nothing is left to resume")
        return EXIT_FAILED
    if lost:
        say(lost)
        return EXIT_FAILED
    kept, unkept = run.storage.kept_in(), run.storage.unkept_note()
    resume = resume_command(taken[1] if taken else spec.study.name, run.url, kept,
                            launch=run.started.launch, shared=run.opened.shared)
    say(f"{cause or sched.message or 'stopped'}{unkept}; resume with: {resume}{stuck}")
    return EXIT_INTERRUPTED if sched.stop_reason == "interrupted" else EXIT_FAILED


def _record_end(run, cause: str | None, interrupted: bool):
    """(the study's status as recorded, the cause): a study whose end cannot be recorded
    is INTERRUPTED, and the line says why."""
    try:
        if interrupted:
            return StudyStatus.INTERRUPTED, cause
        from mpiopt.parallel.scheduler import events

        run.executor.run(events.Finish())
        return run.sched.final_status, cause
    except Exception as exc:
        return StudyStatus.INTERRUPTED, cause or f"could not record the study's end: {exc}"
