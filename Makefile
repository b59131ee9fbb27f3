# txmsg: `make demo` runs the whole lifecycle on the embedded default (the virtualenv, plus
# Java and the JDBC drivers for its Spark step); `make test` passes the tests (and installs
# everything they use: Chromium, promtool, Patroni, etcd, HAProxy, PostgreSQL started).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install system-deps spark-deps demo test lint docs bench soak clean

$(VENV)/.installed: pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]" -e "./clients/python[callback,barrier,aio]"
	touch $@

system-deps:
	@./scripts/ensure-system-deps.sh all

# what the demo's last step (`txmsg ingest`) needs from Debian, and nothing else
spark-deps:
	@./scripts/ensure-system-deps.sh spark

install: $(VENV)/.installed system-deps

demo: $(VENV)/.installed spark-deps
	$(PY) -m scripts.demo

test: install lint
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check app checker spark_outbox migrations tests scripts bench clients
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# the documentation site (docs/, mkdocs.yml) into site/; the tests build it too, with --strict
docs: $(VENV)/.installed
	$(VENV)/bin/mkdocs build --strict

# the bench's own extra (PgQueuer, asyncpg, matplotlib); the charts are drawn from the
# results even when a phase failed, and the run's exit status kept
$(VENV)/.bench-installed: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -q -e ".[dev,bench]"
	touch $@

bench: install $(VENV)/.bench-installed
	$(PY) -m bench.run; status=$$?; $(PY) -m bench.report.charts && exit $$status

# 10 minutes of steady traffic with a 60 s retention: row counts, disk, RSS every 30 s
soak: install
	$(PY) -m bench.phases.soak

clean:
	rm -rf $(VENV) var bench/out site
