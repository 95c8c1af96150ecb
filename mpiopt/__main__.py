from mpiopt.cli.main import run

run()
