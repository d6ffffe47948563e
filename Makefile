# The README's two commands: `make dev` starts the whole local stack, `make test` runs every check.
# Both create the virtualenv (.venv) and install the project into it on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: dev test lint typecheck unit bench bench-quick clean

# The browser tests (tests/browser) drive Debian's chromium through Playwright; Playwright's own
# browser download (`playwright install`) is never used.
CHROMIUM ?= /usr/bin/chromium
# The Temporal TLS test (tests/e2e/test_temporal_tls.py) puts Debian's nginx (grpc_pass) in
# front of the dev server.
NGINX ?= /usr/sbin/nginx

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	test -x $(CHROMIUM) || DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium \
		|| (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium)
	test -x $(NGINX) || DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx \
		|| (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx)
	touch $(STAMP)

dev: $(STAMP)
	$(BIN)/orchestrator dev

test: $(STAMP) lint typecheck
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest tests/unit

# The benchmark (docs/BENCHMARKS.md): full run < 25 min, quick run < 3 min.
bench: $(STAMP)
	$(BIN)/python -m bench

bench-quick: $(STAMP)
	$(BIN)/python -m bench --quick

clean:
	rm -rf $(VENV) var .mypy_cache .ruff_cache .pytest_cache
