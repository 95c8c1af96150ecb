"""The coordinator's decisions (machine), apart from the I/O that carries them out
(executor), in parts: the budget and stops (budget), what finished trials add up to
(outcomes), how idle groups get work (dispatch), asking ahead (ahead), training.refit
(refit), and the instructions they give (instructions)."""
from mpiopt.parallel.scheduler.dispatch import trial_seed
from mpiopt.parallel.scheduler.executor import Executor, drive
from mpiopt.parallel.scheduler.instructions import (Answer, Dispatch, MESSAGES, StopGroup,
                                                    Withdraw)
from mpiopt.parallel.scheduler.machine import Scheduler

__all__ = ["Answer", "Dispatch", "Executor", "MESSAGES", "Scheduler", "StopGroup", "Withdraw",
           "drive", "trial_seed"]
