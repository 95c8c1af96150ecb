"""The user's objective and what runs it: a plain function or nested model training,
evaluated on a group's communicator (evaluate), in a worker process where user code may
kill its process (sandbox), with MPI.COMM_WORLD guarded (world_guard), the programs it
started ended with the rank (processes), and the figures it returns read as one or several
objectives and constraints (metrics); what a function calls from inside its trial (the
trial it runs: current; torch.distributed for its group: torch_group). References to user
code are mpiopt.refs.

Nothing here touches the database or the coordinator. Import the module you need; this
package imports nothing, so a rank that needs one part loads only that part.
"""
