"""The run of a study, from a rank's start to its end: the launch on every rank (launch),
Ctrl-C and other stop signals held while a rank starts (startup_signals), what rank 0
holds for one run (study_run: its storage, lease and unfinished trials), and the process's
exit where user code left threads behind (leftover_threads, the console entry point).
"""
