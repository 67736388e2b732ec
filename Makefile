# Two set-up commands for a newcomer: `make run` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
KAFKA_PORT ?= 9092
DEMO ?= 1
HOST ?= 127.0.0.1
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
BENCH_STAMP := $(VENV)/.installed-bench

# Tests always run against the real services (DESIGN.md); these are the local defaults.
TEST_ENV := DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/streamgate} \
	REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/0} \
	SECRET_KEY=$${SECRET_KEY:-test-secret-key-not-for-production-use-0123456789abcdef} \
	STREAMGATE_DATA_DIR=$${STREAMGATE_DATA_DIR:-$(CURDIR)/var/test}

.PHONY: run test install install-test lint prod bench chaos conformance screenshots clean clihelp vendor-js \
	ha-up ha-down ha-status test-ha

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# The Spark drivers' class-data-sharing archive (workers/spark/cds.py) is made here, once.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	$(BIN)/python -m workers.spark.cds
	touch $@

$(TEST_STAMP): pyproject.toml $(STAMP)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

install: $(STAMP)

# The browser tests (tests/e2e) drive Debian's chromium; Playwright never downloads a browser.
/usr/bin/chromium:
	apt-get update -qq && apt-get install -y -qq chromium

# Kafka clients the listener's tests drive beside the Python ones (pyproject's test extra):
# kcat (librdkafka's command line) from Debian, kafkajs from npm at its locked version.
/usr/bin/kcat:
	apt-get update -qq && apt-get install -y -qq kcat

KAFKAJS := tests/broker/js/node_modules/kafkajs/package.json
$(KAFKAJS): tests/broker/js/package-lock.json
	command -v npm >/dev/null || (apt-get update -qq && apt-get install -y -qq nodejs npm)
	cd tests/broker/js && npm ci --no-audit --no-fund
	touch $@

install-test: $(TEST_STAMP) /usr/bin/chromium /usr/bin/kcat $(KAFKAJS)

# Browser libraries are vendored (committed) from the npm registry, so no run or test needs the
# network: cytoscape.js and its fcose layout for the topology page (static/vendor/cytoscape),
# axe-core for the browser tests' accessibility check only (tests/e2e/vendor/axe-core).
# This target re-fetches those exact versions; bump a version here to upgrade.
NPM_VENDOR := cytoscape@3.34.4 layout-base@2.0.1 cose-base@2.2.0 cytoscape-fcose@2.2.0 axe-core@4.14.1
vendor-js:
	rm -rf var/npm && mkdir -p var/npm && cd var/npm && npm pack --silent $(NPM_VENDOR) >/dev/null \
	  && for f in *.tgz; do mkdir -p "$${f%.tgz}" && tar xzf "$$f" -C "$${f%.tgz}"; done
	cp var/npm/cytoscape-3.34.4/package/dist/cytoscape.min.js static/vendor/cytoscape/
	cp var/npm/cytoscape-3.34.4/package/LICENSE static/vendor/cytoscape/LICENSE
	for p in layout-base-2.0.1 cose-base-2.2.0 cytoscape-fcose-2.2.0; do \
	  cp var/npm/$$p/package/$${p%-*}.js static/vendor/cytoscape/ \
	  && cp var/npm/$$p/package/LICENSE static/vendor/cytoscape/LICENSE.$${p%-*}; done
	cp var/npm/axe-core-4.14.1/package/{axe.min.js,LICENSE,LICENSE-3RD-PARTY.txt} tests/e2e/vendor/axe-core/

## run: the whole product on the embedded default (SQLite, in-process broker), no services needed
run: install
	$(BIN)/python manage.py migrate --no-input
	$(BIN)/python manage.py collectstatic --no-input --verbosity 0
	$(BIN)/python manage.py ensureoperator
	$(if $(filter 1,$(DEMO)),$(BIN)/python manage.py demoscene)
	@echo "streamgate portal: http://$(HOST):$(PORT)/  (API docs: http://$(HOST):$(PORT)/api/v1/docs/)"
	@echo "Kafka listener: $(HOST):$(KAFKA_PORT) (SASL/PLAIN: your user name and an API token)"
	$(BIN)/python manage.py runembedded --host $(HOST) --port $(PORT) --kafka $(HOST):$(KAFKA_PORT) $(if $(filter 1,$(DEMO)),--demo)

## test: the lint, then every test, against real PostgreSQL and Redis. Two pytest-xdist workers
## (TEST_WORKERS=0 for one process): most tests wait on real processes, so two overlap well on
## two cores; each worker has its own databases and Redis namespace (tests/namespace.py).
## The browser tests run after the rest, in a pytest run of their own: Playwright leaves an
## event loop marked running in its worker, which asyncio.run and async_to_sync refuse.
TEST_WORKERS ?= 2
PYTEST := $(TEST_ENV) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile
test: lint
ifeq ($(PYTEST_ARGS),)
	$(PYTEST) $(PYTEST_OPTS) --ignore=tests/e2e --ignore=tests/ha
	$(PYTEST) $(PYTEST_OPTS) tests/e2e
else
	$(PYTEST) $(PYTEST_ARGS)
endif

## lint: ruff, and import-linter's contracts on the direction of imports (pyproject.toml)
lint: install-test
	$(BIN)/ruff check .
	PYTHONPATH=$(CURDIR) $(BIN)/lint-imports --no-logo

clean:
	rm -rf $(VENV) var

## prod: the production topology as local processes on PostgreSQL and Redis (no Docker)
prod: install
	bin/run-production

$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	touch $@

## bench: the peer benchmark of docs/benchmarks.md, one run (about 10 minutes; BENCH_ARGS=...)
bench: $(BENCH_STAMP)
	command -v nats-server >/dev/null || (apt-get update -qq && apt-get install -y -qq nats-server)
	$(BIN)/python -m bench.peers $(BENCH_ARGS)

## chaos: the chaos soak, a bounded run of faults then the checker (CHAOS_ARGS="--seconds 300")
chaos: install
	$(TEST_ENV) $(BIN)/python -m bench.chaos $(CHAOS_ARGS)

## conformance: librdkafka's own test suite (../shared/vendor) against a listener of the
## production stack, plain names both ways (about 40 minutes; CONFORMANCE_ARGS="--tests 0001")
conformance: $(BENCH_STAMP)
	command -v cc >/dev/null || (apt-get update -qq && apt-get install -y -qq build-essential)
	$(TEST_ENV) $(BIN)/python -m bench conformance $(CONFORMANCE_ARGS)

## screenshots: docs/screenshots/*.png from the demo scene (Debian's chromium)
screenshots: install-test
	$(BIN)/python docs/screenshots.py

## clihelp: regenerate streamgate/commands.json (the CLI's offline help) from the /rest registry
clihelp: install
	$(TEST_ENV) $(BIN)/python -m portal.rest.clihelp

# The replicated group (docs/scaling.md): Debian's Patroni, etcd and Redis Sentinel, installed
# only for the targets below, which alone need them.
HA_PACKAGES := /usr/bin/patroni /usr/bin/etcd /usr/bin/redis-sentinel
$(HA_PACKAGES):
	apt-get update -qq && apt-get install -y -qq patroni etcd-server redis-sentinel

## ha-up: three etcd, three PostgreSQL under Patroni (a synchronous standby), two Redis and three
## sentinels on loopback (var/ha, ports from HA_BASE=25400), started until healthy; prints the
## DATABASE_URL and REDIS_URL to use (`make prod` runs on them). ha-down stops, ha-status shows.
HA_BASE ?= 25400
HA := $(BIN)/python -m bench.hagroup --root var/ha --base $(HA_BASE)
ha-up: install $(HA_PACKAGES)
	$(HA) up
ha-down:
	$(HA) down
ha-status:
	$(HA) status

## test-ha: the failover proofs on a group of their own (minutes; not part of `make test`)
test-ha: install-test $(HA_PACKAGES)
	$(TEST_ENV) $(BIN)/python -m pytest -p no:cacheprovider tests/ha $(PYTEST_OPTS)
