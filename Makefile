# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Both create .venv when it is missing and (re)install the package editable with the
# extras they need; the install is skipped while setup.cfg is unchanged.
PYTHON ?= python3
# PyTorch's CPU build: make test trains torch models on CPU, and the default Linux wheel
# pulls several GB of CUDA libraries. pip finds it where it is configured to look (a
# find-links folder, or PyTorch's index of CPU builds: PIP_EXTRA_INDEX_URL=
# https://download.pytorch.org/whl/cpu); installed first, it satisfies the [torch] extra.
TORCH  ?= torch==2.13.0+cpu
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.mpiopt-installed
DEMO_DB := build/demo.db

.PHONY: demo test bench docs venv clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[tensorflow,torch,mpich,postgresql,report,docs,uproot,dev]"
	touch $(STAMP)

# The demo study's database is build/demo.db; it is recreated on every `make demo`.
demo: $(STAMP)
	mkdir -p build && rm -f $(DEMO_DB) $(DEMO_DB)-wal $(DEMO_DB)-shm
	$(BIN)/mpiexec -n 5 $(BIN)/mpiopt search examples/digits/spec.yaml --storage sqlite:///$(DEMO_DB)
	$(BIN)/mpiopt best digits --storage sqlite:///$(DEMO_DB) --top 5

# Three pytest workers (pytest-xdist) on CI's two cores: many tests spend part of their
# time waiting on purpose (a deadline, a silence limit, a stopped server, a Slurm job's
# walltime), and the third worker's jobs use the core the waiting one leaves idle (the
# tests' timing holds under heavier load: they run beside other work on our machines).
# `loadfile` keeps a file's tests on one worker, so module fixtures (the report tests'
# studies) run once; each worker starts its own PostgreSQL cluster. TEST_WORKERS=0 runs
# them one after another in this process. The project's own modules are compiled first: the suite starts thousands of
# processes, and where PYTHONDONTWRITEBYTECODE is set each would otherwise compile
# every module of mpiopt again at its start.
TEST_WORKERS ?= 3

# The docs build strictly first (a broken link or a page missing from the nav fails it);
# tests/test_docs*.py check what the pages say against the code.
test: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	.ci/ensure-postgresql
	.ci/ensure-slurm
	.ci/ensure-chromium
	$(BIN)/python -m compileall -q mpiopt tests alembic examples > /dev/null
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q --durations=30 \
		-n $(TEST_WORKERS) --dist loadfile tests

# The documentation site, built into build/site/ (open build/site/index.html as a file);
# `.venv/bin/mkdocs serve` serves it while you write.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python benchmarks/run_all.py

clean:
	rm -rf build dist *.egg-info
