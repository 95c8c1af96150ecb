"""The run of a study, from a rank's start to its end.

launch        run_study_command: every rank's way through a run (the three checked steps)
startup       rank 0's checked start-up: the spec out, every rank READY, the study opened, GO
serving       every other rank: its part of the start-up, then its group's trials
coordinating  rank 0 after GO: layout, scheduler, progress; the coordinator's loop or the
              single-process one
ending        the study's end recorded, the closing line and resume command, exit statuses,
              MPI_Abort
context       Started and RunContext: what rank 0 holds for one run, frozen
signals       the stop flag and the ranks that leave signals to rank 0
startup_signals  stop signals held while a rank starts
launcher      what the launcher tells a process (its rank, the count, its own name)
study_run     what rank 0 holds in the database for one run: storage, lease, unfinished trials
leftover_threads  the process's bounded exit where user code left threads or exit functions

Time limits and MPIOPT_* variables are declared in mpiopt.knobs.
"""
