# Two commands do all set-up on a fresh machine:
#   make demo   - the main job
#   make test   - the full test suite
# Both create .venv and install what they need on first use.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test bench install clean chromium nginx fonts translations

# PYTHONWARNINGS hides setuptools' informational "Editable installation" notice, the only thing
# a quiet install printed besides pip's own index messages.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	PYTHONWARNINGS='ignore:Editable installation' $(PY) -m pip install --quiet -e '.[test,bench]'
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

# After changing worker-facing strings: extract them, merge them into every language's catalog, compile (the .mo
# files are committed); then translate what it reports and run it again (docs/languages.md).
translations: $(STAMP)
	$(PY) -m server.i18n_catalogs

demo: $(STAMP) fonts
	$(VENV)/bin/perceptlab demo --out demo_output

# In parallel (pytest-xdist): one worker per core and one more, at most 4 (each runs its own chromium,
# PostgreSQL databases and SeaweedFS). The extra worker keeps the cores busy while the others wait on
# chromium, gunicorn or a database. TEST_JOBS=0 runs in one process.
#
# The suite starts many Python processes (the workers, CLI commands, gunicorn, forecast and scale
# jobs) that import the same modules, and pytest rewrites the asserts of every test module in each worker:
# the project is byte-compiled first, and the run keeps what it compiles and rewrites even where the
# environment sets PYTHONDONTWRITEBYTECODE (without the cache, a worker spends 8-10 s of CPU rewriting the
# test modules before its first test, and each CLI process about 0.4 s compiling the server).
TEST_JOBS ?= $(shell echo $$(( $$(nproc) + 1 )))
test: $(STAMP) chromium nginx fonts
	$(PY) -m compileall -q server analysis stimuli benchmarks tests
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n $(TEST_JOBS) --maxprocesses=4

# Browser tests drive Debian's chromium through Playwright (never `playwright install`).
chromium:
	@test -x /usr/bin/chromium || { \
	  SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

# The production recipe's test (tests/server/test_nginx_deploy.py) runs Debian's nginx in front of gunicorn.
nginx:
	@test -x /usr/sbin/nginx || { \
	  SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nginx >/dev/null; }

# Plots draw item names in DejaVu Sans, with Debian's Droid Sans Fallback for the characters it lacks
# (CJK names); without it those characters are named in one warning (analysis/plots.py font_families).
fonts:
	@test -f /usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf || { \
	  SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq fonts-droid-fallback >/dev/null; }

bench: $(STAMP) chromium nginx
	$(PY) benchmarks/scaling.py
	$(PY) benchmarks/screening.py
	$(PY) benchmarks/analysis_load.py
	$(PY) benchmarks/analysis_split.py
	$(PY) benchmarks/collusion.py
	$(PY) benchmarks/gold_separability.py
	$(PY) benchmarks/vote_cpu.py
	$(PY) benchmarks/worker_cpu.py
	$(PY) benchmarks/middleware_cpu.py
	$(PY) benchmarks/server_load.py
	$(PY) benchmarks/scale_out.py
	$(PY) benchmarks/frame_timing.py
	$(PY) benchmarks/slow_clients.py

clean:
	rm -rf $(VENV) demo_output
