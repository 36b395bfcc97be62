# The README's commands. `make demo` and `make test` set up what they need first.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-stamp
PACKAGES := $(sort $(dir $(wildcard packages/*/pyproject.toml)))
PYTEST_ARGS ?=
export DVC_NO_ANALYTICS := 1
export MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR := false

.PHONY: setup browser java prometheus system-deps test-prereqs test-checks demo test unit lint bench lock lock-hashes clean help checkov-setup gitops-check \
	repro repro-smoke rehearse rehearsal-deps rehearse-test sbom release-sbom dvc-lock-check

help:
	@echo "make demo   run the whole loop on the embedded defaults (sets up first)"
	@echo "make test   lint + the dvc.lock check + the test suite (sets up first)"
	@echo "make setup  create $(VENV) and install every package from constraints.txt (no-op when unchanged)"
	@echo "make bench  run every benchmark in benchmarks/ (one JSON line each)"
	@echo "make sbom   CycloneDX SBOM of the serving image from the lock (reports/sbom/serving.cdx.json)"
	@echo "make rehearse  the staging topology on this machine, real servers, the whole loop (sets up first)"

# Our own packages are installed editable, so the install compiles none of them: compileall writes their bytecode
# (only what changed since the last run; ~0.5 s when current). Without it, where PYTHONDONTWRITEBYTECODE is set,
# every `mlops` process compiled the ~200 modules it imports (0.37 s of CPU each time, measured).
setup: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 $(addsuffix src,$(PACKAGES)) >/dev/null

# Re-installs only when the lock or a package's metadata changed. Third-party packages come from the hashed lock
# (--require-hashes: exactly the bytes locked, or nothing); our own packages after it, --no-deps (pip takes no
# hashes for local folders). torch is the CPU build: from the machine's wheel folder (pip's find-links) when it
# has one, else from PyTorch's CPU index (TORCH_INDEX); either way its hash is the lock's, and pip installs it.
# The rest goes through uv (itself from the lock, by pip): the same hashes, installed in parallel. Where uv cannot
# be installed or cannot reach the index, pip installs the rest, as before; our own packages (editable) too (uv:
# 1.4 s, pip: 7.5 s here, the same .pth files and entry points). Bytecode is compiled at install, as pip
# does: where PYTHONDONTWRITEBYTECODE is set (this machine, CI) Python never writes it, and every process would
# compile every module it imports again (without it, CI's test run took about twice as long). What the lock
# leaves out on purpose (tools/write_lock.py LEFT_OUT, with why) is uninstalled from a venv made before.
TORCH_INDEX ?= $(if $(wildcard /opt/wheels/torch-2.13.0+cpu-*.whl),,https://download.pytorch.org/whl/cpu)
PIP_QUIET := 2>&1 | { grep -v 'is ignored: it is neither' || true; }
$(STAMP): constraints.txt requirements.lock pyproject.toml $(addsuffix pyproject.toml,$(PACKAGES))
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python tools/check_lock.py constraints.txt requirements.lock --hashes-only
	@$(BIN)/python tools/lock_subset.py requirements.lock torch > $(VENV)/lock-torch.txt
	@$(BIN)/python tools/lock_subset.py requirements.lock uv > $(VENV)/lock-uv.txt
	@$(BIN)/python tools/lock_subset.py requirements.lock --except torch uv > $(VENV)/lock-rest.txt
	$(BIN)/pip install -q --require-hashes --no-deps $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) -r $(VENV)/lock-torch.txt $(PIP_QUIET)
	@{ $(BIN)/pip install -q --require-hashes --no-deps -r $(VENV)/lock-uv.txt $(PIP_QUIET) && \
	  $(BIN)/uv pip install -q --python $(BIN)/python --require-hashes --no-deps --compile-bytecode \
	  -r $(VENV)/lock-rest.txt; } || \
	  { echo "uv could not install the lock; pip installs it"; \
	  $(BIN)/pip install -q --require-hashes --no-deps -r $(VENV)/lock-rest.txt $(PIP_QUIET); }
	@{ test -x $(BIN)/uv && $(BIN)/uv pip install -q --python $(BIN)/python --no-deps --no-build-isolation \
	  --compile-bytecode $(addprefix -e ,$(PACKAGES)) -e '.[dev]'; } || \
	  $(BIN)/pip install -q --no-deps --no-build-isolation $(addprefix -e ,$(PACKAGES)) -e '.[dev]' $(PIP_QUIET)
	@$(BIN)/pip uninstall -y -q $$($(BIN)/python tools/write_lock.py --left-out) 2>/dev/null || true
	@$(BIN)/python tools/check_lock.py constraints.txt requirements.lock
	@touch $@

# The SBOM comes first: training attaches it to the new version, so `mlops registry verify` checks it.
demo: setup sbom
	$(BIN)/mlops pipeline run

# import-linter checks the layering (pyproject.toml [tool.importlinter]); the public-names check how a
# package imports a sibling (its __init__ only).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python tools/check_public_imports.py packages

unit: setup
	$(BIN)/pytest -m "unit" $(PYTEST_ARGS)

# Debian's Chromium for the report's browser test (needs root and Debian's package index, as on CI).
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# A JVM for Spark (features.batch_engine: spark; the engine-parity test runs Spark local[*]): Debian's
# default-jre-headless where `java` is missing (needs root and Debian's package index, as on CI).
java:
	@command -v java >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends default-jre-headless >/dev/null; }

# Debian's Prometheus (with promtool), Alertmanager, the node exporter (the drift job's textfile metrics) and
# Redis: `promtool check|test rules` on our rules, and the real servers the alerting, canary-analysis and
# rehearsal tests run against (needs root and Debian's package index, as on CI). Installed, never started as
# services; PostgreSQL on 127.0.0.1:5432 is expected up (`bash .ci/run` starts it).
REHEARSAL_APT := prometheus prometheus-alertmanager prometheus-node-exporter redis-server
prometheus:
	@test -x /usr/bin/prometheus -a -x /usr/bin/promtool -a -x /usr/bin/prometheus-alertmanager \
	  -a -x /usr/bin/prometheus-node-exporter && command -v redis-server >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(REHEARSAL_APT) >/dev/null; }
rehearsal-deps: prometheus

# The staging topology on one machine: MLflow (basic-auth, PostgreSQL), Redis, Feast SQL registry, transformer +
# predictor, Prometheus + rules, Alertmanager, a bare GitOps remote, a DVC remote; the whole loop through them.
rehearse: setup prometheus
	$(BIN)/mlops pipeline rehearse

# Two workers (xdist), one test file each at a time: most of the suite waits on servers and subprocesses, so the
# 2 cores stay busy; a file's tests share their module fixtures on one worker. Files go out in the order
# tests/conftest.py gives them (longest first: by tests/durations.json, else by heaviest marker) instead of xdist's
# "most tests first", which handed out the few-test, many-minute end-to-end files last. The run lists its seconds
# per test file at the end (and writes them all to reports/test-durations.json): `python tools/file_durations.py
# CI.log` (or that file) refreshes tests/durations.json from it.
#
# What the suite needs is made first, in parallel where it can be (Debian's packages download while the venv
# installs). The checks the suite does not need (lint, the lock check) run beside it, their output kept in
# reports/test-checks.log and printed after the tests: they took ~30 s before the first test on a fresh clone
# (mypy with no cache), while the end-to-end files that start first spend much of their time waiting on servers.
# `make test` fails when either fails; `make lint` alone gives the checks' verdict at once.
CHECKS_LOG := reports/test-checks.log
test:
	@$(MAKE) --no-print-directory -j 4 --output-sync=target test-prereqs
	@mkdir -p reports && rm -f $(CHECKS_LOG).rc
	@{ $(MAKE) --no-print-directory -j 2 --output-sync=target test-checks > $(CHECKS_LOG) 2>&1 \
	  && echo 0 > $(CHECKS_LOG).rc || echo $$? > $(CHECKS_LOG).rc; } & \
	  $(BIN)/pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not gpu" --durations=30 \
	  --file-durations reports/test-durations.json $(PYTEST_ARGS) && tests=0 || tests=$$?; wait; \
	  echo "--- lint and the lock check (run beside the tests) ---"; cat $(CHECKS_LOG); \
	  checks=$$(cat $(CHECKS_LOG).rc); echo "tests: exit $$tests; lint and the lock check: exit $$checks"; \
	  test "$$tests" -eq 0 && test "$$checks" -eq 0

test-prereqs: setup system-deps checkov-setup

test-checks: lint dvc-lock-check

# browser, java and prometheus in one apt-get (one index update; apt-get cannot run beside another apt-get).
system-deps:
	@missing=""; command -v java >/dev/null || missing="$$missing default-jre-headless"; \
	  for b in prometheus promtool prometheus-alertmanager prometheus-node-exporter; do \
	    test -x /usr/bin/$$b || { missing="$$missing $(REHEARSAL_APT)"; break; }; done; \
	  command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	  command -v chromium >/dev/null && test -z "$$missing" || { apt-get update -qq && export DEBIAN_FRONTEND=noninteractive && \
	    { command -v chromium >/dev/null || apt-get install -y -qq chromium >/dev/null; } && \
	    { test -z "$$missing" || apt-get install -y -qq --no-install-recommends $$missing >/dev/null; }; }

# The rehearsal's end-to-end test alone (`mlops pipeline rehearse --fast`, every step asserted).
rehearse-test: setup prometheus
	$(BIN)/pytest -m rehearsal $(PYTEST_ARGS)

# checkov pins shared packages differently from constraints.txt, so it gets a venv of its own, installed
# from its own small lock (tools/checkov/constraints.txt); tests/gitops runs it from there (~30 s once).
CHECKOV_VENV := $(VENV)/tools/checkov
checkov-setup: $(CHECKOV_VENV)/.setup-stamp

$(CHECKOV_VENV)/.setup-stamp: tools/checkov/constraints.txt | $(STAMP)
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	@{ test -x $(BIN)/uv && $(BIN)/uv pip install -q --python $(CHECKOV_VENV)/bin/python --no-deps --compile-bytecode \
	  -r tools/checkov/constraints.txt; } || \
	  $(CHECKOV_VENV)/bin/pip install -q --no-deps -r tools/checkov/constraints.txt $(PIP_QUIET)
	@touch $@

# The offline GitOps checks alone: actionlint, kustomize + schemas, checkov, workflow run steps, promtool.
gitops-check: setup prometheus checkov-setup
	$(BIN)/pytest tests/gitops $(PYTEST_ARGS)

# The committed dvc.lock must be what the stages write from the committed code: every stage recorded, its cmd,
# its source deps' md5s (DVC's hashing), the resolved config's md5/size and each param (the `config` stage's
# command run to a temp file). Runs no stage (~5 s); data outputs are left to running them. `make test` runs it.
dvc-lock-check: setup
	$(BIN)/python tools/check_dvc_lock.py

# The data pipeline (dvc.yaml; params come from the resolved config its `config` stage writes).
repro: setup
	$(BIN)/dvc repro

# A tiny FSDP run twice must give identical weights.
repro-smoke: setup
	$(BIN)/python tools/repro_smoke.py

# CycloneDX SBOM of the serving image's dependencies, from the lock, validated offline (reports/sbom/).
sbom: setup
	$(BIN)/python tools/sbom.py

# The release workflow: the SBOM attached to a GitHub release of this commit (needs gh and GH_TOKEN).
release-sbom: sbom
	gh release create "images-$$(git rev-parse --short=12 HEAD)" reports/sbom/serving.cdx.json \
		--target "$$(git rev-parse HEAD)" --title "images $$(git rev-parse --short=12 HEAD)" \
		--notes "Service images built, scanned and pushed by the release workflow, with their SBOM."

bench: setup
	@for f in benchmarks/*.py; do case $$f in *_worker.py) continue;; esac; \
		echo "== $$f" >&2; $(BIN)/python $$f || exit 1; done

# Regenerate the lock from the packages' declared dependencies in a throw-away venv, then its hashes.
lock:
	rm -rf /tmp/mlops-lock-venv && $(PYTHON) -m venv /tmp/mlops-lock-venv
	/tmp/mlops-lock-venv/bin/pip install -q setuptools torch==2.13.0
	/tmp/mlops-lock-venv/bin/pip install -q --no-build-isolation $(addprefix -e ,$(PACKAGES)) -e '.[dev]'
	$(BIN)/python tools/write_lock.py /tmp/mlops-lock-venv/bin/pip constraints.txt
	$(MAKE) lock-hashes

# requirements.lock from constraints.txt: download each pinned file (no dependencies: the pins are complete), hash it.
LOCK_WHEELS ?= /tmp/mlops-lock-wheels
lock-hashes:
	grep -v '^#' constraints.txt | grep . > /tmp/mlops-lock-pins.txt
	$(BIN)/pip download -q --no-deps -d $(LOCK_WHEELS) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) -r /tmp/mlops-lock-pins.txt
	$(BIN)/python tools/hash_lock.py constraints.txt $(LOCK_WHEELS) requirements.lock

clean:
	rm -rf $(VENV) .mlops reports data .pytest_cache .ruff_cache .mypy_cache
