# Turnstile: `make demo` and `make test` work on a fresh machine with Python 3.11+ and nothing else.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck contract pytest hunt bench lock manifests schemas clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

# The demo needs only the product (a plain install): not the test tools.
DEMO_STAMP := $(VENV)/.installed-demo
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/turnstile demo

lint: $(STAMP)
	$(BIN)/ruff check queues admission migrations tests bench

typecheck: $(STAMP)
	$(BIN)/mypy queues admission

contract: $(STAMP)
	$(BIN)/lint-imports

# Most tests wait on sockets, databases and timers more than they compute: two workers share the
# two cores. The engines comparisons (``wall_clock``: scenarios played in wall time, whose inputs
# must not overtake the decisions before them) run alone afterwards, where their verdict does not
# depend on what else runs beside them; they mostly wait, so the second phase is short on CPU.
PYTEST_WORKERS ?= 2
pytest: $(STAMP)
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist worksteal --durations=15 -m 'not wall_clock'
	$(BIN)/pytest -q --durations=5 -m wall_clock

test: lint typecheck contract pytest

# The property tests on fresh random examples (make test runs a fixed set): finds new failures.
HUNT_EXAMPLES ?= 2000
hunt: $(STAMP)
	TURNSTILE_HUNT_EXAMPLES=$(HUNT_EXAMPLES) $(BIN)/pytest -q -p no:cacheprovider tests/queues/test_properties.py

bench: $(STAMP)
	$(BIN)/python -m bench

# Files written from the code: Kueue's CRDs (tests/manifests checks they are current).
manifests: $(STAMP)
	$(BIN)/turnstile crds > manifests/base/crds.yaml
	$(BIN)/python -c 'import sys; from admission.jobs import INTEGRATIONS; from admission.webhook.configurations import render_manifest; sys.stdout.write(render_manifest(INTEGRATIONS))' > manifests/base/webhooks.yaml

# The image's dependencies, pinned with hashes (the Dockerfile installs them with --require-hashes).
lock: $(STAMP)
	$(BIN)/pip install --quiet pip-tools
	$(BIN)/pip-compile --quiet --generate-hashes --strip-extras --allow-unsafe --no-emit-index-url \
		--no-emit-find-links --output-file requirements.lock pyproject.toml

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

# The simulated API server's bundled Kubernetes schemas, from kubernetes-validate (tests check they match).
schemas: $(STAMP)
	$(BIN)/python -m admission.sim.server.schema.kube_schemas
