from mpiopt.leftover_threads import run

run()
