"""The coordinator's decisions (machine), apart from the I/O that carries them out
(executor): events in (events), instructions out (instructions), one entry point
(`Scheduler.handle`), built of parts that share one State (state) and call no other
part: the event loop (stepping), the budget and stops (budget), what finished trials add
up to (outcomes), the results (results), how idle groups get work (dispatch), asking
ahead (ahead), training.refit (refit), telling the searcher (teaching), judging
per-epoch values (judging), a shared study
(shared), each group's state (groups), the invariants (checks)."""
from mpiopt.parallel.scheduler import events
from mpiopt.parallel.scheduler.dispatch import trial_seed
from mpiopt.parallel.scheduler.executor import Executor
from mpiopt.parallel.scheduler.instructions import (Answer, Dispatch, MESSAGES, StopGroup,
                                                    Withdraw)
from mpiopt.parallel.scheduler.machine import Scheduler

__all__ = ["Answer", "Dispatch", "Executor", "MESSAGES", "Scheduler", "StopGroup", "Withdraw",
           "events", "trial_seed"]
