"""What rank 0 holds for one run of a study: its storage, its lease, its unfinished trials.

Opening a run is the job's first write. On resume it settles the trials that were still
RUNNING when the last job ended without a word (kill -9, a node lost, a process killed by
its own trial):

- a sandboxed objective (mpiopt.objective.sandbox) cannot take its rank down, so such a trial only
  lost its job: it is INTERRUPTED and runs again;
- an objective that runs in the rank's own process (Keras models, functions taking
  `comm`, `objective.isolate: false`) may have killed the job itself. Each such ending
  counts as a lost attempt of the trial (with the rank and host it ran on); after
  `search.max_attempts` the trial is FAILED ("killed its process 2 times (last: rank 3,
  host n12)") and the study goes on without it, so one bad parameter set cannot poison
  every resume. A job killed from outside while the trial ran counts too: raise
  max_attempts where jobs are often killed mid-trial.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from mpiopt.objective.processes import process_alive
from mpiopt.errors import LeaseLost, StorageError, StudyBusyError
from mpiopt.knobs import LEASE_PERIOD
from mpiopt.search import traits
from mpiopt.trial import TrialStatus


def lease_period_s() -> float:
    """Seconds between the lease's heartbeats (MPIOPT_LEASE_PERIOD, default 30): a job
    silent for three periods has died, and a resume may take its study over."""
    return LEASE_PERIOD.get()


class StudyRun:
    """The opened study, its unfinished trials settled, its job's lease kept fresh by a
    thread.

    The beat runs in its own thread (and its own database connection from the pool), not
    in the coordinator's loop: a single-process study runs its trial in that loop, and a
    ten-minute trial must not look like a dead job. A beat that finds the lease taken
    over (this job was silent too long) is reported by `on_tick`, which ends the job. In
    a shared study (`--join`) each beat also takes over the jobs whose leases went stale:
    their running trials become INTERRUPTED (a lost attempt where a trial could have
    killed its job), and whichever live job claims one first runs it again
    (mpiopt.parallel.scheduler.shared).
    """

    def __init__(self, storage, opened, notes, job=None, period_s: float = 30.0,
                 recovery=None, shared: bool = False, max_attempts: int = 2):
        self.storage, self.study_id = storage, opened.study_id
        self.recovery = recovery      # where results go if the database stays away (in order)
        self.existing, self.resumed = opened.existing, opened.resumed
        self.notes = notes
        self.warm: list[tuple[dict, float]] = []     # search.warm_start: told first
        self.isolated = True          # every trial in a sandbox (set by open_run)
        self.job, self.shared, self.max_attempts = job, shared, max_attempts
        self.lease_token = None if job is None else job.token
        if job is not None:               # every write checks the lease (Storage.fence)
            storage.fence = (job.id, job.token)
        self._stop = threading.Event()
        self._beat = None
        if job is not None:
            self._beat = threading.Thread(target=self._beat_loop, args=(period_s,),
                                          name="mpiopt-lease", daemon=True)
            self._beat.start()

    def _beat_loop(self, period_s: float) -> None:
        while not self._stop.wait(period_s):
            try:
                self.storage.job_heartbeat(self.job.id, self.job.token)
                if self.shared:
                    settle_unfinished(self.storage, self.study_id, self.isolated,
                                      self.max_attempts)
            except LeaseLost:
                return
            except StorageError:
                pass      # a database outage: the next beat tries again (the lease is
                # stale only after three periods without one)

    @property
    def lost(self) -> str | None:
        """Why this job may write nothing more (its lease was taken over), or None."""
        return self.storage.lost

    def on_tick(self) -> None:
        """Called by the coordinator while it waits: ends the job if the lease was lost."""
        if self.lost:
            raise LeaseLost(self.lost)

    def taken_away(self, name: str) -> tuple[str, str | None] | None:
        """("deleted", None) or ("renamed", new name) if `mpiopt study delete|rename --force`
        took the study from this job while it ran; None if not, or if the database cannot
        say (an outage: the resume line stays as it is)."""
        try:
            now = self.storage.study_name(self.study_id)
        except Exception:
            return None
        if now is None:
            return "deleted", None
        return ("renamed", now) if now != name else None

    def shared_for(self, seconds: float | None) -> float | None:
        """A shared study's time limit, left for this job: it counts from the start of
        the oldest job still live (a job that finds none live starts it anew, as a
        resume does). Hosts' clocks are taken to agree to within seconds."""
        if seconds is None or not self.shared:
            return seconds
        now = datetime.now(timezone.utc)
        starts = [j.started_at for j in self.storage.list_jobs(self.study_id)
                  if j.live and not j.is_stale(now)]
        return max(0.0, seconds - (now - min(starts)).total_seconds()) if starts else seconds

    def searcher_seed(self, seed: int) -> int:
        """Jobs of a shared study draw from streams of their own (by job id), so two jobs
        never suggest the same points; a job alone keeps the study's seed (a resume
        suggests what an uninterrupted run would have)."""
        if not self.shared:
            return seed
        return int(np.random.SeedSequence([seed, self.job.id]).generate_state(1)[0] % (2**31 - 1))

    def close(self, status=None, end: str = "ended", blamed: str | None = None) -> list[str]:
        """Give the lease back (`end`: how this job ended, as `mpiopt status` lists it);
        the last job of a shared study to end records the study's `status`. `blamed`:
        why the job ended, where it ended on what some trials sent (the coordinator's
        failure, mpiopt.parallel.scheduler's blame): those trials, left RUNNING, each
        count a lost attempt (lines for the person returned). Counted here, at the end,
        since only this job knows it; a resume counts none where trials run in a sandbox
        (a job killed from outside is not their doing)."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=10)
        try:
            if self.job is not None and self.lost is None:
                self.storage.end_job(self.job.id, self.job.token, end,
                                     study_status=status if self.shared else None)
                if blamed:
                    # (the job's own trials after its own end, taken as a resume takes
                    # them: its fence, which ended with it, would refuse the write)
                    self.storage.fence = None
                    return count_lost_attempts(
                        self.storage, self.study_id, self.max_attempts,
                        lambda t: f"ended its job {t.lost_attempts} times (last: {blamed})")
        except Exception:
            pass          # a lease left behind goes stale by itself
        finally:
            self.storage.close()
        return []


def take_lease(storage, study_id: int, period: float, wait_s: float = 0.0,
               say=print, shared: bool = False, groups: int | None = None,
               launch: str | None = None):
    """This job's lease on the study (a Job with its token). `shared` (`--join`): other
    jobs may hold theirs at once (storage.join_study refuses only a job that runs the
    study alone, and jobs on several hosts of one SQLite file).

    For a job that runs the study alone: a holder on this very host whose process is gone
    (a job that ended while the database was away could not give its lease back) is
    taken over at once; elsewhere a silent holder goes stale after three periods.

    A holder on another host cannot be asked whether it lives, and a job killed without a
    word (kill -9, the OOM killer, a node lost) leaves a fresh lease: a requeued or chained
    job that started within three periods was refused, and the chain ended there. With
    `wait_s`, the holder is watched for at most that long (and three of its periods): a
    new heartbeat means it lives (refused, as before); none for three periods, counted
    on this host's clock, means it is gone and its study is taken over. A stop signal
    ends the wait (KeyboardInterrupt; the start-up's signals are held meanwhile)."""
    host = socket.gethostname()

    def join(takeover: bool = False):
        return storage.join_study(study_id, host, os.getpid(), period, shared=shared,
                                  takeover=takeover, groups=groups, launcher=launcher_job(),
                                  launch=launch)

    try:
        return join()
    except StudyBusyError as exc:
        held = exc.lease
        if shared or held is None or (held.host == host[:255] and process_alive(held.pid)):
            raise
        if held.host == host[:255]:
            return join(takeover=True)
        if wait_s <= 0:
            raise
        busy = exc
    limit = min(wait_s, 3 * held.period_s + 1.0)
    name = storage.study_name(study_id)
    say(f"study {name!r}: the job that ran it last (host {held.host}, pid {held.pid}) "
        f"has not given it up; waiting up to {limit:.0f}s for its next heartbeat (a job "
        f"killed without a word leaves its lease for {3 * held.period_s:.0f}s)", flush=True)
    from mpiopt.run import startup_signals

    start = time.monotonic()
    while time.monotonic() - start < limit:
        if startup_signals.noted():
            raise KeyboardInterrupt
        time.sleep(min(1.0, held.period_s / 10))
        try:
            return join()
        except StudyBusyError as again:
            now = again.lease
            if now is None or (now.beat_at, now.host, now.pid) != (held.beat_at, held.host,
                                                                   held.pid):
                raise again from None     # it beat again (alive), or another job took it
    if time.monotonic() - start < 3 * held.period_s:
        raise busy                        # (wait_s ran out first)
    say(f"study {name!r}: no heartbeat for {time.monotonic() - start:.0f}s: taking it "
        "over", flush=True)
    return join(takeover=True)


def launcher_job() -> str | None:
    """The batch system's name for this job, as `mpiopt status` lists it: Slurm's array
    task or job id, PBS's, LSF's; None outside a batch job."""
    env = os.environ
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"slurm {env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    for var, name in (("SLURM_JOB_ID", "slurm"), ("PBS_JOBID", "pbs"), ("LSB_JOBID", "lsf"),
                      ("FLUX_JOB_ID", "flux")):
        if env.get(var):
            return f"{name} {env[var]}"[:255]
    return None


def recovery_places(spec, url: str, job: int | None = None) -> list[Path]:
    """Where a run's recovery file may be, in the order it is tried: beside the spec file
    (not when the spec came from the database, `mpiopt resume`), then in the current
    directory (a spec in a folder that cannot be written), then in the home folder, under
    a name of the database's own (a full disk or an exceeded quota where the study runs,
    often a scratch file system, leaves the home folder's); a resume imports from each.
    `job`: a shared study's job, whose files are its own (kept.recovery_file)."""
    from mpiopt.kept import recovery_file

    source = Path(spec.source)
    folders = [source.parent] if source.suffix in (".yaml", ".yml") and source.is_file() else []
    folders.append(Path.cwd())
    places = [recovery_file(f.resolve(), spec.study.name, job) for f in folders]
    home = _home_recovery_folder(url)
    return list(dict.fromkeys(places + ([recovery_file(home, spec.study.name, job)]
                                        if home else [])))


def _home_recovery_folder(url: str) -> Path | None:
    """~/.mpiopt/recovery/<database key>/: the key tells databases apart (a file's lines
    name trial ids, which mean other trials in another database); None without a home."""
    from mpiopt.storage import StorageURL

    try:
        home = Path.home()
    except (RuntimeError, KeyError):
        return None
    return home / ".mpiopt" / "recovery" / StorageURL.parse(url).key


def _import_recoveries(storage, spec, url: str, study_id: int, given=(),
                       stored=()) -> list[str]:
    """The recovery files a resume finds (recovery_places), those the last job recorded
    (`stored`: a killed job's file beside its spec, for `mpiopt resume NAME` run from
    another folder) and those named (`mpiopt resume --recovery FILE`, as a closing line
    prints it), imported first; before them the files beside them where group leaders
    kept the results they sent (mpiopt.kept)."""
    from mpiopt.kept import group_files, jobs_recovery_files, remove_if_empty
    from mpiopt.storage.recovery import import_recovery

    notes = []
    given, stored, found = [Path(p).resolve() for p in given], [Path(p) for p in stored], \
        recovery_places(spec, url)
    found += [p for place in found for p in jobs_recovery_files(place)]
    places = given + [p for p in stored if _readable(p)] + found
    kept, key = 0, storage.location.key
    beside = (p for place in given + stored + found for p in group_files(place, key))
    for path in dict.fromkeys(beside):
        if _readable(path):
            kept += import_recovery(storage, path, study_id)
            remove_if_empty(path.parent)
    if kept:
        notes.append(f"imported {kept} finished result(s) that the groups kept on file (the "
                     "last job ended before it wrote them)")
    for path in dict.fromkeys(places):
        foreign: list[int] = []
        n = import_recovery(storage, path, study_id, foreign)
        if n:
            notes.append(f"imported {n} result write(s) kept in {path} during a database outage")
        if foreign:
            notes.append(f"{path}: {foreign[0]} write(s) for trials that are not this study's "
                         f"in {storage.shown_url} (the file was written for another database"
                         "?) were left in it, not imported; resume with the --storage its "
                         "job's closing line named")
    return notes


def _others_live(storage, study_id: int, job) -> bool:
    """Whether another job runs the study now (a shared study's join): the recovery and
    kept files of a live job are its own to import."""
    if job is None:
        return False
    now = datetime.now(timezone.utc)
    return any(j.live and not j.is_stale(now) and j.id != job.id
               for j in storage.list_jobs(study_id))


def _forget_kept(storage, places) -> None:
    """A new study's start: files that group leaders kept for a study of the same name in
    this database are a deleted one's (its trial ids could be given to this study's
    trials, and a resume would import their results into them), so they go."""
    from mpiopt.kept import group_files, remove_if_empty
    key = storage.location.key
    for path in (p for place in places for p in group_files(place, key)):
        try:
            path.unlink()
        except OSError:
            pass
        remove_if_empty(path.parent)


def _readable(path: Path) -> bool:
    """A recorded place this host can read (another node's folder may not be mounted)."""
    try:
        return (path.is_file() and os.access(path, os.R_OK)
                and os.access(path.parent, os.W_OK))       # (the import removes it)
    except OSError:
        return False


def refuse_retry_of_rounds(spec, retry_failed: bool) -> None:
    """--retry-failed is refused for a searcher whose trials are rounds of a population
    (pbt), before any rank sets up or anything is written."""
    if retry_failed and traits(spec.search.algorithm).rounds:
        from mpiopt.errors import SpecError

        raise SpecError("--retry-failed: a pbt round runs within its population (a failed "
                        "round's member exploits another member instead); leave it off")


def refuse_shared(spec, url: str) -> None:
    """`--join` is refused, before any rank sets up, for a searcher whose trials are rounds
    of one population (pbt): a population's rounds are planned by one job."""
    if traits(spec.search.algorithm).rounds:
        from mpiopt.errors import SpecError

        raise SpecError("--join: search.algorithm pbt trains one population, planned by one "
                        "job; run it without --join (a requeued job resumes it with "
                        "--resume-or-start)")


def open_run(spec, url: str, resume, isolated: bool, retry_failed: bool = False,
             recovery=(), lease_wait: float = 0.0, shared: bool = False,
             groups: int | None = None, launch: str | None = None) -> StudyRun:
    """`resume`: see mpiopt.study.opening.open_study; `retry_failed` (`--retry-failed`): the
    resumed study's FAILED trials become RETRIED and their parameter sets run again;
    `recovery`: recovery files to import besides those the resume finds itself;
    `lease_wait`: how long to watch a holder on another host (see take_lease);
    `shared` (`--join`): other jobs may run the study at once; `groups`: this job's;
    `launch`: what goes before `mpiopt resume` to start this layout again (the job's
    record keeps it for `mpiopt status`)."""
    from mpiopt.storage import open_storage
    from mpiopt.study.opening import open_study

    warm, warm_note = _warm(spec, url)          # refused before anything is written
    # `--resume` never creates the database: a mistyped path made an empty one, then said
    # there was no study to resume (but for a study a recovery file holds whole: its
    # database file was deleted or replaced under the job that wrote it)
    from mpiopt.storage.recovery import rescued_study, restore_study

    rescued = resume is True and rescued_study(recovery, spec.study.name) is not None
    storage = open_storage(url, create=resume is not True or rescued)
    period = lease_period_s()
    try:
        restored = restore_study(storage, recovery, spec.study.name,
                                 recovery_places(spec, url)) if rescued else None
        opened = open_study(storage, spec, resume, url,
                            lambda study_id: take_lease(storage, study_id, period, lease_wait,
                                                        shared=shared, groups=groups,
                                                        launch=launch))
        if getattr(spec, "artifacts", None):
            storage.set_study_artifacts(opened.study_id, spec.artifacts)
        notes = [n for n in (warm_note, restored) if n]
        job = opened.job
        places = recovery_places(spec, url, job.id if shared else None)
        if opened.resumed and not _others_live(storage, opened.study_id, job):
            stored = storage.get_study(spec.study.name).recovery
            notes += _import_recoveries(storage, spec, url, opened.study_id, recovery, stored)
            notes += settle_unfinished(storage, opened.study_id, isolated,
                                       getattr(spec.search, "max_attempts", 2))
            if retry_failed:
                notes.append(_retry(storage, opened.study_id))
            opened.existing = storage.get_trials(opened.study_id)
        elif opened.resumed:       # (joined beside live jobs: their files are theirs)
            notes += settle_unfinished(storage, opened.study_id, isolated,
                                       getattr(spec.search, "max_attempts", 2))
            if retry_failed:
                notes.append("--retry-failed: not while other jobs run the study (their "
                             "searchers would not know of it); give it to a job that starts "
                             "it when none runs")
            opened.existing = storage.get_trials(opened.study_id)
        else:
            _forget_kept(storage, places)
        storage.set_study_recovery(opened.study_id, [str(p) for p in places])
        queued = sum(t.status is TrialStatus.PENDING for t in opened.existing) if \
            opened.resumed else len(getattr(spec.search, "initial_trials", ()))
        if queued:
            notes.append(f"{queued} queued parameter set(s) run before the searcher's own")
        run = StudyRun(storage, opened, notes, job, period, places, shared=shared,
                       max_attempts=getattr(spec.search, "max_attempts", 2))
        run.warm = warm
        run.isolated = isolated       # (else a trial can end the job: parallel/coordinator.py)
        return run
    except BaseException:
        storage.close()
        raise


def _warm(spec, url: str):
    """search.warm_start's results, read from the existing database (never created here)."""
    if not getattr(spec.search, "warm_start", None):
        return [], None
    from mpiopt.storage import open_storage
    from mpiopt.study.warm_start import warm_results

    storage = open_storage(url, read_only=True)
    try:
        return warm_results(storage, spec)
    finally:
        storage.close()


def _retry(storage, study_id: int) -> str:
    numbers = storage.retry_failed(study_id)
    if not numbers:
        return "--retry-failed: no FAILED trials to retry"
    shown = ", ".join(f"#{n}" for n in numbers[:10]) + (" ..." if len(numbers) > 10 else "")
    return (f"--retry-failed: {len(numbers)} FAILED trial(s) ({shown}) marked RETRIED (kept, "
            "no longer counted); their parameter sets run again as new trials")


def settle_unfinished(storage, study_id: int, isolated: bool, max_attempts: int) -> list[str]:
    """Mark trials left RUNNING by a job that died; FAIL those that killed it too often.
    Returns lines for the study's header."""
    if isolated:
        before = storage.count_trials(study_id)[TrialStatus.INTERRUPTED]
        storage.take_orphans(study_id, count_lost_attempts=False)
        n = storage.count_trials(study_id)[TrialStatus.INTERRUPTED] - before
        return [f"{n} trial(s) were running when their job ended; they run again"] if n > 0 else []
    return count_lost_attempts(
        storage, study_id, max_attempts, lambda t: f"killed its process {t.lost_attempts} "
        f"times (last: rank {t.rank if t.rank is not None else '?'}, host {t.host or '?'})")


def count_lost_attempts(storage, study_id: int, max_attempts: int, failure) -> list[str]:
    """Each trial left RUNNING by a job that has ended counts one lost attempt and runs
    again, or, at `max_attempts`, is FAILED with `failure(trial)`, so that one bad
    parameter set cannot end every resume. Returns lines for the person."""
    notes = []
    for t in storage.take_orphans(study_id, count_lost_attempts=True):
        if t.lost_attempts >= max_attempts:
            error = failure(t)
            storage.finish_trial(t.id, TrialStatus.FAILED, error=error)
            notes.append(f"trial {t.number} FAILED: {error} (search.max_attempts = {max_attempts})")
        else:
            notes.append(f"trial {t.number} was running when its job ended (attempt "
                         f"{t.lost_attempts} of {max_attempts}); it runs again")
    return notes
