# Two commands a newcomer needs: `make demo` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# PyTorch's CPU build: tools/pick_torch.py takes the pin from PyTorch's CPU index (TORCH_INDEX) where that answers
# within seconds, else from pip's own configuration (offline, CI: a CPU wheel on the machine's disk), never the
# multi-GB CUDA build by default. `make install TORCH=SPEC` installs exactly SPEC (a CUDA build, a wheel file).
TORCH_PIN   := torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
ifeq ($(origin TORCH),undefined)
TORCH_ARGS = $$($(PY) tools/pick_torch.py --index "$(TORCH_INDEX)" "$(TORCH_PIN)")
else
TORCH_ARGS = "$(TORCH)"
endif
# The corpus where CI finds it (.ci/run), unless ATTNLAB_DATA names another copy; without one the demo
# uses its bundled sample and the corpus' tests skip, counted in the summary (docs/data.md).
ATTNLAB_DATA ?= $(abspath $(wildcard ../shared/data/fra-eng.zip))
export ATTNLAB_DATA

.PHONY: demo test test-quick test-timing lint bench docs notebook install clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip >/dev/null
	$(PY) -m pip install $(TORCH_ARGS)
	$(PY) -m pip install -e ".[dev]"
	touch $@

install: $(VENV)/.installed

# A second demo refuses to replace the first: `make demo DEMO_FLAGS=--force` replaces it.
demo: $(VENV)/.installed
	$(VENV)/bin/attnlab demo $(DEMO_FLAGS)

# Two test processes: most tests pin torch to one thread, so the suite keeps both cores busy.
test: $(VENV)/.installed
	$(PY) -m pytest -q -n 2 --dist loadfile

# A first check (76 s on 2 quiet cores): the library's packages and every command's tests, without the benchmarks',
# the server's, the exports' and the documentation's (docs/testing.md). CI runs `make test`.
QUICK := tests/attention tests/models tests/decoding tests/data tests/metrics tests/runs tests/chapter tests/kernels \
         tests/commands
test-quick: $(VENV)/.installed
	$(PY) -m pytest -q -n 2 --dist loadfile $(QUICK)

# The suite timed once (20 slowest tests, each package's share) into docs/testing.md, alone on the machine.
test-timing: $(VENV)/.installed
	flock /tmp/attnlab-measure.lock $(PY) tools/suite_timing.py

# Lint, format check and types, as CI runs them before the tests (settings in pyproject.toml).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests benchmarks tools
	$(VENV)/bin/ruff format --check src tests benchmarks tools
	$(VENV)/bin/mypy

bench: $(VENV)/.installed
	$(PY) benchmarks/run_all.py

# The documentation site (MkDocs, strict: a broken link or reference fails) into site/; open site/index.html.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 PYTHONPATH=src $(VENV)/bin/mkdocs build --strict

# One notebook top to bottom into runs/notebooks/NB.ipynb, with its outputs (notebooks/ stays clean):
#   make notebook NB=02_nadaraya_watson             # ATTNLAB_SMALL=1 before it: seconds instead of minutes
notebook: $(VENV)/.installed
	@test -f "notebooks/$(basename $(notdir $(NB))).ipynb" || { echo "make notebook: NB must name one of" \
	    "notebooks/*.ipynb, e.g. NB=02_nadaraya_watson; got NB='$(NB)'" >&2; exit 2; }
	mkdir -p runs/notebooks
	cp "notebooks/$(basename $(notdir $(NB))).ipynb" runs/notebooks/
	MPLBACKEND=Agg $(VENV)/bin/jupyter execute --inplace "runs/notebooks/$(basename $(notdir $(NB))).ipynb"
	@echo "executed: runs/notebooks/$(basename $(notdir $(NB))).ipynb (open it in Jupyter: pip install jupyterlab)"

clean:
	rm -rf $(VENV) runs .pytest_cache site
