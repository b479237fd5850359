# docsum — the two commands that matter: `make run` and `make test`. Both set up everything they need.
SHELL := /bin/bash
UV := .run/bootstrap/bin/uv
VENV := .venv/.synced

.PHONY: setup run up down test test-unit lint contracts bench eval clean

setup: $(VENV)

# uv comes from PyPI into a private bootstrap environment; it then builds .venv from uv.lock.
$(UV):
	python3 -m venv .run/bootstrap
	.run/bootstrap/bin/pip install --quiet --disable-pip-version-check uv

$(VENV): $(UV) uv.lock pyproject.toml shared/pyproject.toml services/*/pyproject.toml cli/pyproject.toml
	$(UV) sync --locked --quiet
	touch $@

run: setup
	scripts/run.sh

up: setup
	scripts/stack.sh up

down:
	scripts/stack.sh down

test: setup
	scripts/stack.sh infra
	scripts/chromium.sh >/dev/null  # the web page's browser test drives Debian's Chromium
	.venv/bin/pytest -q

test-unit: setup
	.venv/bin/pytest -q tests/unit

# ruff on the tree, its formatter on the packages, mypy on every package.
lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check shared services cli
	.venv/bin/mypy shared/docsum_shared services/*/docsum_* cli/docsum_cli
	.venv/bin/python -m docsum_shared.contracts --check

# The JSON Schema of every topic, generated from shared/docsum_shared/events.py into contracts/.
contracts: setup
	.venv/bin/python -m docsum_shared.contracts

# ROUGE of the extractive summarizer against the abstracts of the ACLSum papers, before/after/lead-3:
# writes eval/results.md. Installs its own dependency group (rouge-score, aclsum); not part of `make test`.
eval: setup
	$(UV) run --locked --group eval python eval/evaluate.py

clean: down
	rm -rf .run .venv
