# The two commands of the README: `make demo` and `make test`. Both set up .venv themselves:
# `make demo` installs only the gateway; `make test` adds the test extra and, through
# .ci/provision, the system tools the tests run (Debian's prometheus and chromium).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.installed
TESTING := $(VENV)/.installed-test
COMPILED := $(VENV)/.compiled

.PHONY: demo test provision lint typecheck unit e2e-agents bench soak clean

# The packages are installed by uv (pinned; the venv's pip fetches it in a second or two):
# it resolves, downloads and links the hundred-odd wheels in parallel, where pip takes most of a
# fresh install's time doing that one at a time. Each install builds the package, compiled
# (setup.py): the test install is the runtime's with the test extra, not a second step. uv keeps
# a built editable package while pyproject.toml and setup.py stay the same, so each install
# asks for it to be built again (the compiled modules follow the sources, not those two files).
UV_VERSION := 0.13.9
UV_INSTALL := $(BIN)/uv pip install --quiet --python $(BIN)/python \
	--reinstall-package chat-gateway

$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv==$(UV_VERSION)

$(RUNTIME): pyproject.toml setup.py | $(BIN)/uv
	$(UV_INSTALL) -e .
	touch $@ $(COMPILED)

$(TESTING): pyproject.toml setup.py | $(BIN)/uv
	$(UV_INSTALL) -e '.[test]'
	touch $(RUNTIME) $@ $(COMPILED)

# An edited source takes effect once compiled again: the compiled modules run instead of it, and
# tests/test_build.py fails on one older than its source. Any module of the package may change
# what the compiled ones were compiled against, so any edit rebuilds.
$(COMPILED): $(shell find gateway -name '*.py') | $(RUNTIME)
	$(UV_INSTALL) --no-deps -e .
	touch $@

demo: $(RUNTIME) $(COMPILED)
	$(BIN)/chat-gateway demo

provision:
	bash .ci/provision

lint: $(TESTING)
	$(BIN)/ruff check gateway tests bench e2e setup.py

typecheck: $(TESTING)
	$(BIN)/mypy

# pytest-xdist, two workers a core: about a third of the suite's time is spent waiting on the
# timeouts it tests (an upstream that stalls, a client that trickles), which another worker's
# tests fill. Work stealing evens out the end of the run. Each worker starts its own servers
# (PostgreSQL, Prometheus, Chromium, ...) on free ports, in temporary directories of its own.
TEST_WORKERS ?= $(shell echo $$(( 2 * $$(nproc 2>/dev/null || echo 1) )))

# Each worker collects the whole suite, and pytest rewrites the asserts of every package that
# registers a plugin (LangSmith's, a dependency of LangChain's SDKs, is 227 modules): the plugins
# the suite uses are named, the others are not loaded.
PYTEST_PLUGINS := -p xdist -p asyncio -p aiohttp -p timeout -p hypothesispytest

unit: $(TESTING) $(COMPILED) provision
	PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 $(BIN)/python -m pytest -q $(PYTEST_PLUGINS) \
		-n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# Installing compiles the translation core (setup.py) on one core while provisioning waits on
# apt's downloads, and the type check takes one core: each runs beside another step.
test:
	$(MAKE) --jobs=2 --output-sync=target provision $(TESTING)
	$(MAKE) lint
	$(MAKE) --jobs=2 --output-sync=target typecheck unit

# Opt-in, not part of `make test`: the coding agents' own CLIs (Codex, Claude Code; npm installs
# pinned in e2e/agents/conftest.py, cached in ~/.cache/chat-gateway-e2e) each run a tool loop
# through the gateway on a scripted fake backend of another dialect. Needs node and npm, the
# registry the first time, and a few minutes.
e2e-agents: $(TESTING) $(COMPILED)
	$(BIN)/python -m pytest -q -p no:cacheprovider e2e/agents $(PYTEST_ARGS)

bench: $(TESTING) $(COMPILED)
	$(BIN)/python bench/run.py

soak: $(TESTING) $(COMPILED)
	$(BIN)/python bench/soak.py

clean:
	rm -rf $(VENV) build .mypy_cache .ruff_cache .pytest_cache
	find . -path ./tests/node -prune -o -name '*.so' -print -delete
