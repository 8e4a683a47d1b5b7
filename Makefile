# Two entry points on a fresh machine:
#   make demo   - venv in .venv, install sglwrap, dry-run launch of `fewchan` for a bundled model config on a
#                 catalogued GPU (no GPU and no SGLang needed)
#   make test   - test venv outside the checkout (keyed by requirements/test.txt), with the real SGLang 0.5.23;
#                 runs the whole suite
PYTHON ?= python3
CACHE ?= $(HOME)/.cache/sglwrap
PIN_HASH := $(shell sha256sum requirements/test.txt | cut -c1-12)
TEST_VENV := $(CACHE)/venv-$(PIN_HASH)
DEMO_VENV := .venv
DEMO_MODEL := sglwrap/data/models/Llama-3.1-8B

.PHONY: demo test test-venv lint check-data bench clean

$(DEMO_VENV)/.complete: pyproject.toml setup.py
	rm -rf $(DEMO_VENV)
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/pip install -q --disable-pip-version-check .
	touch $@

demo: $(DEMO_VENV)/.complete
	$(DEMO_VENV)/bin/pip install -q --disable-pip-version-check --no-deps --force-reinstall .
	$(DEMO_VENV)/bin/sglwrap launch --profile fewchan --dry-run --assume 8xRTX-PRO-6000 -- \
		--model-path $(DEMO_MODEL) --tp-size 8

# order-only: the venv path already carries the hash of requirements/test.txt, so a fresh clone (new mtimes) reuses it
$(TEST_VENV)/.complete: | requirements/test.txt
	rm -rf $(TEST_VENV)
	mkdir -p $(CACHE)
	$(PYTHON) -m venv $(TEST_VENV)
	$(TEST_VENV)/bin/pip install -q --disable-pip-version-check -r requirements/test.txt
	touch $@

test-venv: $(TEST_VENV)/.complete
	$(TEST_VENV)/bin/pip install -q --disable-pip-version-check --no-build-isolation -e .

lint: test-venv
	$(TEST_VENV)/bin/ruff check sglwrap tests benchmarks tools
	$(TEST_VENV)/bin/mypy

test: lint
	SGLWRAP_REQUIRE_SGLANG=1 SGLWRAP_TEST_VENV=$(TEST_VENV) $(TEST_VENV)/bin/python -m pytest -q tests

# the generators' checks that need no download (the suite runs them too; tools/*.py say what each compares)
check-data: test-venv
	$(TEST_VENV)/bin/python tools/gen_memory_fits.py --check
	$(TEST_VENV)/bin/python tools/gen_release_pins.py --check
	$(TEST_VENV)/bin/python tools/gen_model_parallel.py --check --offline
	$(TEST_VENV)/bin/python tools/gen_model_parallel.py --check --installed
	$(TEST_VENV)/bin/python tools/gen_catalogue.py --check --offline
	$(TEST_VENV)/bin/python tools/gen_catalogue.py --check --installed

bench: test-venv
	$(TEST_VENV)/bin/python benchmarks/run_all.py

clean:
	rm -rf $(DEMO_VENV) build dist *.egg-info .pytest_cache
