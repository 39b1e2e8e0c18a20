# honing — two commands on a fresh machine: `make quickstart` and `make test`.
# `make setup` is idempotent: system packages when missing, then .venv (re)built when its inputs
# change. torch is pinned here (2.13.0, the CPU build), never in the package metadata.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-done
TORCH := torch==2.13.0
BFCL := bfcl-eval==2026.3.23

.PHONY: setup system-deps test-deps quickstart test lint bench clean

setup: system-deps $(STAMP)

# apt_install CMD PKG: install Debian package PKG when command CMD is missing (root + apt-get).
define apt_install
	@if ! command -v $(1) >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing $(2) (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2); \
	  else \
	    echo "$(2) is required: sudo apt-get install $(2) (or your distro's package)"; \
	    exit 1; \
	  fi; \
	fi
endef

# bubblewrap isolates the sandboxes.
system-deps:
	$(call apt_install,bwrap,bubblewrap)

# The tests open `honing report`'s HTML page in headless Chromium, and check
# deploy/prometheus/*.yml with promtool (Debian's prometheus package; on a systemd host it also
# enables a Prometheus service: `systemctl disable --now prometheus` if it is not wanted).
test-deps:
	$(call apt_install,chromium,chromium)
	$(call apt_install,promtool,prometheus)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(TORCH)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,ray,bench,export]'
	@# Only bfcl-eval's data files are read; its pinned, heavy dependencies are not wanted.
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps $(BFCL)
	@touch $(STAMP)

# Each run gets its own directory under runs/ (a run directory is never overwritten).
quickstart: setup
	$(VENV)/bin/honing train examples/quickstart.yaml out=runs/quickstart-$$(date +%Y%m%d-%H%M%S)

lint: setup
	$(VENV)/bin/ruff check honing tests benchmarks
	$(VENV)/bin/ruff format --check honing tests benchmarks
	$(VENV)/bin/mypy

# The suite as this host resolves `auto`, then the dtype-sensitive tests as a host with the other
# answer would (bf16 hardware or not): both paths are tested on every host.
test: setup test-deps lint
	$(VENV)/bin/pytest -q -p no:cacheprovider --durations=25
	other=$$($(PY) -c "from honing.precision import auto_dtype; \
	  print('float32' if auto_dtype() == 'bfloat16' else 'bfloat16')") && \
	  $(VENV)/bin/pytest -q -p no:cacheprovider -m 'dtype and not slow' --auto-dtype $$other

bench: setup
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[llamacpp]' || \
	  echo "llama-cpp-python did not build: benchmarks/generation.py skips its llama.cpp column"
	$(PY) benchmarks/sandbox_humaneval.py
	$(PY) benchmarks/generation.py
	$(PY) benchmarks/speculative.py
	$(PY) benchmarks/async_vs_sync.py
	$(PY) benchmarks/async_vs_sync.py --mode simulated
	$(PY) benchmarks/scheduler_scale.py
	$(PY) benchmarks/grpo_vs_trl.py
	$(PY) benchmarks/learning_vs_trl.py
	$(PY) benchmarks/generator_capacity.py
	$(PY) benchmarks/learning_matrix.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
