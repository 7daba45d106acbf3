# Two entry points a newcomer needs (see README.md):
#   make demo   the main job end to end (vocabulary -> blocks -> pre-training -> NSMC)
#   make test   lint + the docs site (broken links fail) + the test suite (what CI runs)
#   make test-fast  lint + docs + everything but the end-to-end, torchrun and long learning tests
#   make docs   the documentation site (docs/, mkdocs.yml) into build/site, --strict
# Both create ./.venv with pinned CPU torch on first use.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
DATA_DIR ?= ../shared/data
DEMO_ARGS ?=

.PHONY: install demo test test-fast lint docs format clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU wheel pinned for dev/CI; the package itself accepts torch>=2.4.
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/electra demo --data-dir $(DATA_DIR) $(DEMO_ARGS)

lint: install
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

docs: install
	$(VENV)/bin/mkdocs build --strict --site-dir build/site

test: lint docs
	$(PY) -m pytest

test-fast: lint docs
	$(PY) -m pytest -m "not slow"

format: install
	$(VENV)/bin/ruff format src tests benchmarks
	$(VENV)/bin/ruff check --fix src tests benchmarks

clean:
	rm -rf $(VENV) build dist src/*.egg-info
