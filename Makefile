# The two commands of the README: `make demo` and `make test`. Both set up .venv themselves:
# `make demo` installs only the gateway; `make test` adds the test extra and, through
# .ci/provision, the system tools the tests run (Debian's prometheus and chromium).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.installed
TESTING := $(VENV)/.installed-test

COMPILED := .compiled
# The tests that drive the compiled modules (pyproject.toml, [tool.chat-gateway] compiled): every
# dialect pair through the translation core, and through the whole gateway.
COMPILED_TESTS := tests/test_build.py tests/dialects tests/test_golden.py tests/test_matrix.py \
	tests/test_identity.py tests/test_stream_edges.py tests/test_hostile.py tests/test_fuzz.py \
	tests/test_properties.py tests/test_sink.py tests/test_canonical.py tests/test_framing_*.py \
	tests/test_translate_cli.py tests/test_strict_readers.py tests/test_legacy_backends.py \
	tests/test_exchange.py tests/test_server_e2e.py tests/test_metrics_batched.py \
	tests/test_exposition.py tests/test_traffic.py tests/test_status.py

.PHONY: demo test provision lint typecheck unit compiled unit-compiled bench bench-compiled soak \
	clean

# The venv's own pip (ensurepip's, >= 22 for Python >= 3.11) installs an editable pyproject
# package, so there is no pip upgrade to wait for.
$(RUNTIME): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e .
	touch $@

$(TESTING): $(RUNTIME)
	$(BIN)/pip install --quiet -e '.[test,compile]'
	touch $@

# The compiled build (setup.py), installed beside the source tree, never into it: compiled
# modules in the tree would shadow every later edit of their sources.
$(COMPILED)/.built: $(TESTING) setup.py pyproject.toml $(shell find gateway -name '*.py')
	rm -rf $(COMPILED) build
	CHAT_GATEWAY_COMPILE=1 $(BIN)/pip install --quiet --no-deps --no-build-isolation \
		--target $(COMPILED) .
	touch $@

compiled: $(COMPILED)/.built

demo: $(RUNTIME)
	$(BIN)/chat-gateway demo

provision:
	bash .ci/provision

lint: $(TESTING)
	$(BIN)/ruff check gateway tests bench

typecheck: $(TESTING)
	$(BIN)/mypy

unit: $(TESTING) provision
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# The same tests again, run from a copy beside the compiled package so that they import it.
unit-compiled: $(COMPILED)/.built provision
	rm -rf $(COMPILED)/tests && cp -r tests pyproject.toml $(COMPILED)/
	cd $(COMPILED) && GATEWAY_BUILD=compiled ../$(BIN)/python -m pytest -q -p no:cacheprovider \
		$(PYTEST_ARGS) $(COMPILED_TESTS)

test: provision lint typecheck unit unit-compiled

bench: $(TESTING)
	$(BIN)/python bench/run.py

bench-compiled: $(COMPILED)/.built
	$(BIN)/python bench/run.py --gateway-cmd "env -C $(COMPILED) $(abspath $(BIN))/python -m gateway" \
		$(BENCH_ARGS)

soak: $(TESTING)
	$(BIN)/python bench/soak.py

clean:
	rm -rf $(VENV) $(COMPILED) build .mypy_cache .ruff_cache .pytest_cache
