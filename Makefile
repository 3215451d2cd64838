# Two entry points on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test install lint docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# torch 2.13.0 (CPU build, on this machine's disk) only when no torch is importable:
# a torch the user already has is never replaced or downgraded.
$(STAMP): $(PY) pyproject.toml
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: install
	$(VENV)/bin/ceiling report

lint: install
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/lint-imports

# two test processes: the suite's subprocesses, servers and torch runs leave a core idle
# much of the time, and every test holds on a loaded machine
test: lint
	$(VENV)/bin/pytest -q -n 2

# the documentation site (mkdocs.yml, docs/) into site/, offline; tests/test_docs.py builds it too
docs: install
	$(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) build site *.egg-info src/*.egg-info
