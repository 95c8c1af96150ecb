from mpiopt.run.leftover_threads import run

run()
