# django-blamequeue: development tasks. Everything runs from the repository's own .venv.
#
#   make test [PYTEST_ARGS='-k lease -x'] [TEST_SERVERS='postgres']
#   make demo | dist-check | lint | typecheck | bench | docs | docs-serve | screenshots | clean | distclean

SHELL := /bin/bash

# Python 3.12 (pyenv resolves python3.12/python3 through .python-version).
PYTHON ?= $(shell command -v python3.12 2>/dev/null || command -v python3 2>/dev/null)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TMP := .tmp
SERVERS := $(PY) -m tests.servers

DEV_STAMP := $(VENV)/.installed-dev
RUNTIME_STAMP := $(VENV)/.installed-runtime

PYTEST_ARGS ?=
# The whole suite also builds the wheel and sdist and runs the quickstart against the wheel in a
# fresh virtualenv (tests/dist_check.py, ~30 s); a run with PYTEST_ARGS skips it unless asked.
DIST_CHECK ?= $(if $(strip $(PYTEST_ARGS)),no,yes)
# The test servers tests/servers.py knows (postgres redis redis_cluster sqs), read when a recipe
# needs them.
SERVER_KINDS = $(shell $(PY) -c 'from tests.servers import KINDS; print(*KINDS)' 2>/dev/null)
# PostgreSQL is always started; the others (redis, redis_cluster: six redis-servers, sqs:
# moto_server) only where installed. A server that was started must have its tests run
# (BLAMEQUEUE_TEST_REQUIRE_*): they cannot skip.
TEST_SERVERS ?= $(SERVER_KINDS)

LINT_PATHS := $(wildcard django_blamequeue tests bench testproject)

.PHONY: venv test dist-check demo lint typecheck bench docs docs-serve clean distclean

venv: $(DEV_STAMP)

$(PY):
	@test -n "$(PYTHON)" || { echo "python3.12 not found" >&2; exit 1; }
	@ver=$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	  test "$$ver" = 3.12 || { echo "need Python 3.12, $(PYTHON) is $$ver" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

# Reinstalled only when pyproject.toml changes (or the venv is recreated, stamps and all).
$(DEV_STAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet --progress-bar off -e '.[dev]'
	@touch $@ $(RUNTIME_STAMP)

$(RUNTIME_STAMP): pyproject.toml | $(PY)
	$(PIP) install --quiet --progress-bar off -e .
	@touch $@

# Servers live under .tmp/{pg,redis,redis_cluster,sqs} and are stopped by pid from the EXIT trap, whatever pytest
# does (failure, Ctrl-C). The recipe exits with pytest's code (make reports "Error 5" when no
# tests were collected, then exits 2). With PostgreSQL started, its tests must not be skipped.
test: $(DEV_STAMP)
	@mkdir -p $(TMP) && $(VENV)/bin/lint-imports --no-cache >$(TMP)/lint-imports.log 2>&1 || { cat $(TMP)/lint-imports.log; exit 1; }
	@echo "make test: import layers kept (lint-imports)"
	@if test "$(DIST_CHECK)" = yes; then $(PY) -m tests.dist_check || exit 1; fi
	@test -n "$(SERVER_KINDS)" || { echo "make test: tests/servers.py lists no KINDS" >&2; exit 1; }
	@set -u; \
	dir_of() { echo "$(TMP)/$${1/postgres/pg}"; }; \
	stop_servers() { for kind in $(SERVER_KINDS); do \
	  $(SERVERS) $$kind stop --dir "$$(dir_of $$kind)" || true; done; }; \
	trap stop_servers EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	for kind in $(TEST_SERVERS); do \
	  if test $$kind = postgres || $(SERVERS) $$kind available; then \
	    line=$$($(SERVERS) $$kind start --dir "$$(dir_of $$kind)") || exit 1; \
	    export "$$line"; \
	    export "BLAMEQUEUE_TEST_REQUIRE_$${kind^^}=1"; \
	  else echo "make test: no $$kind server installed; its tests will skip" >&2; fi; \
	done; \
	export BLAMEQUEUE_TEST_REQUIRE_BROWSER=1; \
	$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; exit $$rc

# The wheel and sdist as PyPI would take them, and the quickstart against the installed wheel.
dist-check: $(DEV_STAMP)
	$(PY) -m tests.dist_check

demo: $(RUNTIME_STAMP)
	$(PY) testproject/manage.py migrate --noinput
	$(PY) testproject/manage.py demo

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/lint-imports --no-cache

typecheck: $(DEV_STAMP)
	MYPYPATH=testproject $(VENV)/bin/mypy django_blamequeue

bench: $(DEV_STAMP)
	$(PY) bench/throughput.py

# The documentation site into build/site/ (mkdocs.yml; offline). Warnings are errors, as in
# tests/docs. docs-serve rebuilds on save at http://127.0.0.1:8000/.
docs: $(DEV_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: $(DEV_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --strict --dev-addr 127.0.0.1:8000

# Stops servers left running under .tmp before deleting their directories.
clean:
	@if test -x $(PY) && test -d $(TMP); then for kind in $(SERVER_KINDS); do \
	  dir=$(TMP)/$${kind/postgres/pg}; \
	  test -f $$dir/server.json && $(SERVERS) $$kind stop --dir $$dir; \
	  done; true; fi
	rm -rf $(TMP) build dist *.egg-info .mypy_cache .ruff_cache .pytest_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)

# Every admin console screen with demo data, as PNGs in docs/img/ (headless system Chromium).
.PHONY: screenshots
screenshots: $(DEV_STAMP)
	$(PY) -m tests.admin.screenshots docs/img
